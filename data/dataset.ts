/**
 * The common in-memory dataset every source produces, and its validation against the spec.
 *
 * A Dataset holds one flat, row-major typed array per spec input (keyed by the input's
 * name), `count` samples each. Sources map their files onto the spec's inputs:
 *  - the *label* input is the one the loss reads as its target (cross_entropy/nll/mse/...
 *    second input); every other input is a *feature* input.
 */
import { createHash } from 'node:crypto';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel, InputDecl } from '../compiler/model.js';
import type { Vocabulary } from './text.js';

export type DataArray = Float32Array | Int32Array;

export interface Dataset {
  /** where the samples came from, for messages (`bundled MNIST digits (train split)`, a file path) */
  source: string;
  count: number;
  tensors: Map<string, DataArray>;
  /** the file each input came from, when the inputs come from different files (IDX images / labels) */
  inputSources?: Record<string, string>;
  /**
   * sample counts of consecutive blocks that come from separate source files, when the file order
   * groups the samples by class (the bundled digits: one block per digit, digits 0..9): `val_split`
   * then holds out the last fraction of each block, so the validation set has every class
   */
  blocks?: number[];
  /**
   * text data (data/text.ts): `tensors` is empty and sample k is a window of T + 1 tokens of
   * `ids` (inputs `tokens` = its first T, `targets` = its last T), cut by data/batcher.ts:
   * random: seeded random starts (training); else the non-overlapping window k*T (evaluation)
   */
  windows?: { ids: Int32Array; T: number; tokens: string; targets: string; random: boolean };
}

export interface DataSplits {
  train: Dataset;
  /** null when the spec gives no test data */
  test: Dataset | null;
  /** text data: the tokenizer's vocabulary (stored in checkpoints for `mpsc sample`) */
  vocab?: Vocabulary;
}

/** elements per sample of an input (its shape without the leading batch dimension) */
export function sampleSize(input: InputDecl): number {
  let n = 1;
  for (let i = 1; i < input.shape.length; i++) n *= input.shape[i];
  return n;
}

export function sampleShape(input: InputDecl): number[] {
  return input.shape.slice(1);
}

const TARGET_OPS = new Set(['cross_entropy', 'nll', 'mse', 'bce_with_logits', 'accuracy', 'top_k']);
const CLASS_LABEL_OPS = new Set(['cross_entropy', 'nll', 'accuracy', 'top_k']);

export interface InputRoles {
  /** inputs fed from the data's features, in spec order */
  features: InputDecl[];
  /** the loss/metric target input, or null */
  label: InputDecl | null;
  /** names of inputs used as class labels (range-checked against numClasses) */
  classLabels: Set<string>;
}

/** Decide which spec input is the label (the loss's target) and which are features. */
export function inputRoles(model: CheckedModel): InputRoles {
  const byValue = new Map(model.inputs.map((i) => [i.value, i]));
  let label: InputDecl | null = null;
  let fromLoss = false;
  const classLabels = new Set<string>();
  for (const n of model.graph.nodes) {
    if (!TARGET_OPS.has(n.op)) continue;
    const inp = byValue.get(n.inputs[1]);
    if (!inp) continue;
    const isLoss = model.loss !== null && n.outputs.includes(model.loss.value);
    if (label === null || (isLoss && !fromLoss)) {
      label = inp;
      fromLoss = isLoss;
    }
    if (CLASS_LABEL_OPS.has(n.op)) classLabels.add(inp.name);
  }
  if (label === null && model.inputs.length >= 2) label = model.inputs[model.inputs.length - 1];
  const features = model.inputs.filter((i) => i !== label);
  return { features, label, classLabels };
}

/**
 * i32 inputs that feed an `embedding` directly, with the table size V: their ids must lie in
 * [0, V) (the smallest table when an input feeds several).
 */
export function embeddingIdRanges(model: CheckedModel): Map<string, { vocab: number; layer: string }> {
  const byValue = new Map(model.inputs.map((i) => [i.value, i]));
  const out = new Map<string, { vocab: number; layer: string }>();
  for (const n of model.graph.nodes) {
    if (n.op !== 'embedding') continue;
    const inp = byValue.get(n.inputs[0]);
    if (!inp) continue;
    const vocab = model.graph.values[n.inputs[1]].shape[0];
    const layer = model.graph.values[n.inputs[1]].name.replace(/\.weight$/, '');
    const prev = out.get(inp.name);
    if (!prev || vocab < prev.vocab) out.set(inp.name, { vocab, layer });
  }
  return out;
}

/** Check a dataset against the spec: every input present with the right length, finite features, labels and token ids in range. */
export function validateDataset(model: CheckedModel, ds: Dataset): void {
  const roles = inputRoles(model);
  const ids = embeddingIdRanges(model);
  if (!Number.isInteger(ds.count) || ds.count <= 0) {
    throw new UserError(`${ds.source}: error: the data has no samples\n  help: check the file is the one you meant and is not empty`);
  }
  if (ds.windows) return; // text windows: data/text.ts checks the vocabulary against the model
  for (const inp of model.inputs) {
    const src = ds.inputSources?.[inp.name] ?? ds.source;
    const arr = ds.tensors.get(inp.name);
    if (!arr) throw new UserError(`${src}: error: no data for the spec's input '${inp.name}'`);
    const per = sampleSize(inp);
    if (arr.length !== ds.count * per) {
      throw new UserError(
        `${src}: error: input '${inp.name}' needs ${per} values per sample (shape [${sampleShape(inp).join(', ')}]) ` +
          `but the data has ${arr.length} values for ${ds.count} samples\n  help: make the spec's input shape match the data`,
      );
    }
    if (inp.dtype === 'f32') {
      if (!(arr instanceof Float32Array)) throw new Error(`internal: input '${inp.name}' should be a Float32Array`);
      for (let i = 0; i < arr.length; i++) {
        if (!Number.isFinite(arr[i])) {
          const s = Math.floor(i / per);
          throw new UserError(
            `${src}: error: sample ${s} of input '${inp.name}' contains ${arr[i]} (value ${i - s * per} of the sample)\n` +
              `  help: remove or repair samples with NaN/Inf values`,
          );
        }
      }
    } else {
      if (!(arr instanceof Int32Array)) throw new Error(`internal: input '${inp.name}' should be an Int32Array`);
      const emb = ids.get(inp.name);
      if (emb) {
        for (let i = 0; i < arr.length; i++) {
          const v = arr[i];
          if (v < 0 || v >= emb.vocab) {
            const s = Math.floor(i / per);
            throw new UserError(
              `${src}: error: sample ${s}, position ${i - s * per} of input '${inp.name}': token id ${v} is outside [0, ${emb.vocab}), the vocabulary of embedding '${emb.layer}'\n` +
                (v < 0
                ? `  help: token ids count from 0 (a row of the embedding); fix the data (a negative id is often padding: replace it with a real id)`
                : `  help: the embedding has ${emb.vocab} rows; fix the data or make it embedding(${v + 1}, ...) or larger`),
            );
          }
        }
      }
      const hi = roles.classLabels.has(inp.name) ? model.numClasses : null;
      for (let i = 0; i < arr.length; i++) {
        const v = arr[i];
        if (v < 0 || (hi !== null && v >= hi)) {
          const s = Math.floor(i / per);
          const range = hi !== null ? `[0, ${hi})` : 'non-negative values';
          throw new UserError(
            `${src}: error: sample ${s}: ${inp.name} ${v} is outside the class range ${range}` +
              (v < 0
                ? `\n  help: class labels count from 0; fix the label (a negative label is often a padding or ignore marker: set the loss's ignore_index to it)`
                : hi !== null
                  ? `\n  help: the model has ${hi} classes; fix the label or make the last layer output ${v + 1} or more classes`
                  : ''),
          );
        }
      }
    }
  }
}

/**
 * Split off the last `fraction` of a dataset (file order) as a validation set: the first
 * count - floor(count * fraction) samples stay for training.
 */
export function holdOut(ds: Dataset, fraction: number, what: string): { train: Dataset; val: Dataset } {
  if (ds.windows) return holdOutWindows(ds, fraction, what);
  // [first, end) of each block, and where its held-out tail starts
  const blocks: { from: number; cut: number; to: number }[] = [];
  let from = 0;
  for (const n of ds.blocks ?? [ds.count]) {
    blocks.push({ from, cut: from + n - Math.floor(n * fraction), to: from + n });
    from += n;
  }
  const nVal = blocks.reduce((s, b) => s + b.to - b.cut, 0);
  const nTrain = ds.count - nVal;
  if (nVal < 1 || nTrain < 1) {
    throw new UserError(
      `${what}: error: val_split ${fraction} of ${ds.count} training samples leaves ${nVal} for validation and ${nTrain} for training\n` +
        `  help: use a val_split that keeps at least one sample on each side`,
    );
  }
  const part = (ranges: [number, number][], tag: string): Dataset => {
    const count = ranges.reduce((s, [a, b]) => s + b - a, 0);
    const tensors = new Map<string, DataArray>();
    for (const [name, a] of ds.tensors) {
      const per = a.length / ds.count;
      const out = new (a.constructor as new (n: number) => DataArray)(count * per);
      let k = 0;
      for (const [f, t] of ranges) {
        out.set(a.subarray(f * per, t * per), k);
        k += (t - f) * per;
      }
      tensors.set(name, out);
    }
    return { source: `${ds.source} (${tag})`, count, tensors, ...(ds.inputSources ? { inputSources: ds.inputSources } : {}) };
  };
  const of = ds.blocks ? ` of each of its ${blocks.length} blocks` : '';
  return {
    train: part(blocks.map((b) => [b.from, b.cut]), `first ${nTrain} samples${of}`),
    val: part(blocks.map((b) => [b.cut, b.to]), `last ${nVal} samples${of}, validation`),
  };
}

/**
 * Text windows (data/text.ts): the last `fraction` of the training tokens becomes the validation
 * text (its non-overlapping windows), the rest keeps random training windows (len / T an epoch).
 */
function holdOutWindows(ds: Dataset, fraction: number, what: string): { train: Dataset; val: Dataset } {
  const w = ds.windows!;
  const cut = w.ids.length - Math.floor(w.ids.length * fraction);
  const nTrain = Math.floor(cut / w.T);
  const nVal = Math.floor((w.ids.length - cut - 1) / w.T);
  if (nVal < 1 || cut < w.T + 1) {
    throw new UserError(
      `${what}: error: val_split ${fraction} of ${w.ids.length} training tokens leaves ${nVal} validation windows of ${w.T} and ${cut} tokens for training\n` +
        `  help: use a val_split that keeps at least one window of T + 1 tokens on each side`,
    );
  }
  return {
    train: { source: `${ds.source} (first ${cut} tokens)`, count: nTrain, tensors: new Map(), windows: { ...w, ids: w.ids.subarray(0, cut), random: true } },
    val: { source: `${ds.source} (last ${w.ids.length - cut} tokens, validation)`, count: nVal, tensors: new Map(), windows: { ...w, ids: w.ids.subarray(cut), random: false } },
  };
}

/** sha256 over the dataset's arrays (input name order), stored in checkpoints to detect a changed dataset on resume. */
export function datasetChecksum(ds: Dataset): string {
  const h = createHash('sha256');
  if (ds.windows) {
    const w = ds.windows;
    h.update(`windows T=${w.T}`);
    h.update(new Uint8Array(w.ids.buffer, w.ids.byteOffset, w.ids.byteLength));
  }
  for (const name of [...ds.tensors.keys()].sort()) {
    const a = ds.tensors.get(name)!;
    h.update(name);
    h.update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  }
  return h.digest('hex');
}

/** For image/label sources (MNIST): the feature input that takes the pixels and the label input. */
export function imageLabelInputs(model: CheckedModel, pixels: number, what: string): { image: InputDecl; label: InputDecl } {
  const roles = inputRoles(model);
  const f32 = roles.features.filter((i) => i.dtype === 'f32');
  if (f32.length !== 1 || roles.features.length !== 1 || !roles.label) {
    throw new UserError(
      `${model.file}: error: ${what} gives one image input and one label input, but the spec declares inputs ` +
        `${model.inputs.map((i) => `'${i.name}' ${i.dtype}[${i.shape.map((d) => (d < 0 ? 'N' : d)).join(', ')}]`).join(', ')}\n` +
        `  help: declare an f32 image input (e.g. [N, 1, 28, 28]) and an i32 label input used by the loss`,
    );
  }
  const image = f32[0];
  if (sampleSize(image) !== pixels) {
    throw new UserError(
      `${model.file}: error: ${what} images have ${pixels} pixels but input '${image.name}' has shape ` +
        `[${sampleShape(image).join(', ')}] (${sampleSize(image)} values per sample)\n  help: use [N, 1, 28, 28] or [N, 784]`,
    );
  }
  if (roles.label.dtype !== 'i32' || sampleSize(roles.label) !== 1) {
    throw new UserError(`${model.file}: error: ${what} labels are class indices, so input '${roles.label.name}' must be i32 [N]`);
  }
  return { image, label: roles.label };
}
