/**
 * `mpsc predict`: run a trained model's eval graph on new inputs and return the network values
 * its loss and metrics read (for example `logits`).
 *
 * Consumes: the CheckedModel, a weights file (checkpoint, best.safetensors or model.safetensors),
 * and input samples (safetensors / CSV / image files, see loadPredictInputs). Produces: per
 * network output (compiler/export/heads.ts: the same values and names an ONNX export returns),
 * a [N, ...] float32 array.
 *
 * How: the `eval` program (and `eval_tail` for a smaller last chunk) of compiler/ir/programs.ts,
 * extended by compiler/ir/predict_program.ts so the head values come back whole, run through the
 * Session interface on any device (--device: auto picks cuda / metal / cpu as train does; the
 * float64 reference interpreter is `--device reference`). The weights load as `mpsc eval` loads
 * them (trainer.ts weightsLoad: parameters and buffers, a checkpoint's optimizer state skipped).
 * Labels are not needed: the label input is fed zeros, so the loss and metric nodes compute
 * meaningless numbers that are never read. Chunks of `batch` samples (the last one smaller).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { numel } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { buildPredictProgram, predictBufferName } from '../compiler/ir/predict_program.js';
import { headReads, networkOutputs } from '../compiler/export/heads.js';
import { inputRoles, validateDataset, type DataArray, type Dataset } from '../data/dataset.js';
import { loadCsv } from '../data/csv.js';
import { loadSafetensorsData } from '../data/safetensors_source.js';
import { IMAGE_EXTENSIONS, loadImages } from '../data/images.js';
import { loadIntoSession, programTensorTable, readCheckpointFile } from './checkpoint.js';
import { openSession } from './device.js';
import type { Batch } from './session.js';
import { weightsLoad } from './trainer.js';

export interface Head {
  /** the name the spec's loss / metric uses for it (`logits`), else the graph value's name */
  name: string;
  /** value id in the (training-form) model graph */
  value: number;
  /** true when a class-label loss or metric reads it ([N, C] scores) */
  classScores: boolean;
  /** 'logits' (cross_entropy, accuracy, top_k: softmax gives probabilities) or 'log_probs' (nll) */
  scores: 'logits' | 'log_probs' | null;
}

/**
 * The values the loss and metrics read, other than spec inputs (what predict returns), named as
 * the export names them (compiler/export/heads.ts: the spec's name for the value, e.g. `logits`),
 * with the kind of scores a class-label head reads from them.
 */
export function headValues(model: CheckedModel): Head[] {
  return networkOutputs(model).map((o) => {
    let scores: Head['scores'] = null;
    for (const n of model.graph.nodes) {
      if (n.inputs[0] !== o.value) continue;
      if (n.op === 'nll') scores = 'log_probs';
      else if (scores === null && ['cross_entropy', 'accuracy', 'top_k'].includes(n.op)) scores = 'logits';
    }
    return { name: o.name, value: o.value, classScores: scores !== null, scores };
  });
}

export interface PredictInputs {
  count: number;
  /** spec input name -> samples (feature inputs only) */
  tensors: Map<string, DataArray>;
  /** a label per sample for messages (file name, or `row k`) */
  labels: string[];
}

function kindOf(file: string): 'safetensors' | 'csv' | 'image' {
  const ext = path.extname(file).toLowerCase();
  if (ext === '.safetensors') return 'safetensors';
  if (ext === '.csv') return 'csv';
  if (IMAGE_EXTENSIONS.includes(ext)) return 'image';
  throw new UserError(`${file}: error: unknown input file type '${ext || '(none)'}'\n  help: --input takes a .safetensors file, a .csv file, or .png / .jpg image files`);
}

/** columns of the first data row of a CSV file (a header row is skipped) */
function csvWidth(file: string): number {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UserError(`${file}: error: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'input file not found' : (e as Error).message}`);
  }
  const rows = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  const numeric = rows.find((r) => r.split(',').every((f) => f.trim() !== '' && !Number.isNaN(Number(f.trim().replace(/^"|"$/g, '')))));
  return (numeric ?? rows[0] ?? '').split(',').length;
}

/**
 * Read the samples of the spec's feature inputs from the --input files:
 *  - one .safetensors file: one tensor per feature input, named as the input, [N, ...];
 *  - one .csv file: as the csv() data source reads it, with or without the label column;
 *  - image files (.png, .jpg): one sample each, for a model with one f32 image input.
 */
export function loadPredictInputs(model: CheckedModel, files: string[]): PredictInputs {
  const roles = inputRoles(model);
  const featModel: CheckedModel = { ...model, inputs: roles.features };
  const kinds = new Set(files.map(kindOf));
  if (kinds.size > 1) throw new UserError('error: --input files must all be of one kind (one .safetensors, one .csv, or image files)');
  const kind = [...kinds][0];
  let ds: Dataset;
  if (kind !== 'image' && files.length > 1) throw new UserError(`error: give one ${kind} file to --input (got ${files.length})`);
  if (kind === 'safetensors') ds = loadSafetensorsData(featModel, files[0], null);
  else if (kind === 'csv') {
    const src = model.train.data.kind === 'csv' ? model.train.data : { label_column: null, normalize: null };
    const featWidth = roles.features.reduce((s, f) => s + numel(f.shape.slice(1)), 0);
    if (csvWidth(files[0]) === featWidth) ds = loadCsv({ ...featModel, loss: null, metrics: [] }, files[0], { ...src, label_column: null });
    else {
      ds = loadCsv(model, files[0], src);
      if (roles.label) ds.tensors.delete(roles.label.name);
    }
  } else {
    const f32 = roles.features.filter((f) => f.dtype === 'f32');
    if (roles.features.length !== 1 || f32.length !== 1) {
      throw new UserError(`error: image files feed a model with one f32 image input, but the spec's inputs besides the label are ${roles.features.map((f) => `'${f.name}'`).join(', ')}\n  help: pass the inputs as a safetensors file with one tensor per input`);
    }
    ds = { source: files.join(', '), count: files.length, tensors: new Map([[f32[0].name, loadImages(model, f32[0], files)]]) };
  }
  const labelName = roles.label?.name;
  const check: Dataset = { ...ds, tensors: new Map(ds.tensors) };
  if (roles.label) check.tensors.set(roles.label.name, new Int32Array(ds.count * numel(roles.label.shape.slice(1))));
  validateDataset(model, check);
  const labels = kind === 'image' ? files.map((f) => path.basename(f)) : Array.from({ length: ds.count }, (_, i) => `sample ${i}`);
  if (labelName) ds.tensors.delete(labelName);
  return { count: ds.count, tensors: ds.tensors, labels };
}

export interface PredictOptions {
  /** a weights or checkpoint file (already resolved: run_folder.ts resolveWeights) */
  weights: string;
  /** samples per run (the last chunk may be smaller) */
  batch: number;
  /** runtime/device.ts: auto (default), cpu, cuda, metal, metal-emu, reference */
  device?: string;
  threads?: number;
  onNote?: (msg: string) => void;
}

export interface PredictResult {
  heads: Head[];
  /** per head: N x (sample size) values, row-major */
  values: Float32Array[];
  /** per head: the sample shape (without N) */
  shapes: number[][];
  /** the device that ran it */
  device: string;
}

/**
 * Run the eval program on the inputs in chunks of `batch` samples, on any backend through the
 * Session interface: the eval (and, for a smaller last chunk, eval_tail) program extended by
 * compiler/ir/predict_program.ts so each head value is read back whole after a run.
 */
export async function predict(model0: CheckedModel, inputs: PredictInputs, o: PredictOptions): Promise<PredictResult> {
  const heads = headValues(model0);
  if (heads.length === 0) throw new UserError(`${model0.file}: error: the spec's loss and metrics read no network value, so there is nothing to predict`);
  const B = Math.min(o.batch, inputs.count);
  const model: CheckedModel = { ...model0, train: { ...model0.train, batch: B } };
  const tail = inputs.count % B;
  const set = buildPrograms(model, { batch: B, evalTail: tail > 0 ? tail : undefined });
  const bufferOf = (k: number) => `out${k}`;
  for (const name of ['eval', 'eval_tail'] as const) {
    const p = set[name];
    if (!p) continue;
    const reads = headReads(p.graph);
    if (reads.length !== heads.length) throw new Error(`internal: program ${name} reads ${reads.length} network values, the model ${heads.length}`);
    set[name] = buildPredictProgram(p, reads.map((value, k) => ({ name: bufferOf(k), value })));
  }
  const st = readCheckpointFile(o.weights);
  const table = programTensorTable(set);
  const load = weightsLoad(model, table);
  loadIntoSession(table, st, o.weights, load); // names and shapes, before a backend is compiled
  const opened = await openSession(o.device ?? 'auto', set, { threads: o.threads, onProgress: o.onNote });
  o.onNote?.(opened.note);
  const session = opened.session;
  const shapes = heads.map((h) => model.graph.values[h.value].shape.slice(1));
  const values = heads.map((_, k) => new Float32Array(inputs.count * numel(shapes[k])));
  try {
    loadIntoSession(session, st, o.weights, load);
    for (let start = 0; start < inputs.count; start += B) {
      const n = Math.min(B, inputs.count - start);
      const name = n === B ? 'eval' : 'eval_tail';
      const p = set[name]!;
      // the spec's inputs in program order; the label (and any input predict was not given) is fed zeros
      const batch: Batch = p.inputs.map((id) => {
        const v = p.graph.values[id];
        const per = numel(v.shape.slice(1));
        const src = inputs.tensors.get(v.name);
        if (src) return src.subarray(start * per, (start + n) * per);
        return v.dtype === 'i32' ? new Int32Array(n * per) : new Float32Array(n * per);
      });
      session.run(name, batch, { lr: 0, t: 1, seed: model.train.seed, counter: 0 });
      heads.forEach((_, k) => values[k].set(session.read(predictBufferName(name, bufferOf(k))), start * numel(shapes[k])));
    }
  } finally {
    session.close();
  }
  return { heads, values, shapes, device: opened.device };
}

/** [N, ...shape] flat values -> nested arrays */
export function nested(values: Float32Array, count: number, shape: number[]): unknown[] {
  const build = (off: number, dims: number[]): unknown => {
    if (dims.length === 0) return values[off];
    const stride = numel(dims.slice(1));
    return Array.from({ length: dims[0] }, (_, i) => build(off + i * stride, dims.slice(1)));
  };
  return build(0, [count, ...shape]) as unknown[];
}

/** top class and its probability per sample of a [N, C] score head */
export function topClasses(values: Float32Array, count: number, classes: number, scores: 'logits' | 'log_probs'): { cls: number; p: number }[] {
  const out: { cls: number; p: number }[] = [];
  for (let i = 0; i < count; i++) {
    const row = values.subarray(i * classes, (i + 1) * classes);
    let best = 0;
    for (let c = 1; c < classes; c++) if (row[c] > row[best]) best = c;
    let p: number;
    if (scores === 'log_probs') p = Math.exp(row[best]);
    else {
      let z = 0;
      for (let c = 0; c < classes; c++) z += Math.exp(row[c] - row[best]);
      p = 1 / z;
    }
    out.push({ cls: best, p });
  }
  return out;
}
