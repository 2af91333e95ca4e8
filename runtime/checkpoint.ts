/**
 * Checkpoints: a Session's persistent tensors in one safetensors file.
 *
 * Tensors: every persistent tensor of the session under its name (parameters `fc1.weight`,
 * buffers `bn0.running_mean`, optimizer state `fc1.weight.exp_avg`, gradient accumulators),
 * all F32, plus `<layer>.num_batches_tracked` (I64, as in torch's state_dict) for every
 * batchnorm layer. `__metadata__` (all strings): format, model, spec_hash, data_sha256,
 * seed, step, epoch, batch_in_epoch, counter, total_steps, batch, grad_accum, shuffle,
 * drop_last, device, precision (fp16 / bf16 only), for fp16 the loss scaler's amp_scale / amp_growth_tracker /
 * amp_skipped_steps / amp_consecutive_skips (the `amp.loss_scale` tensor is saved too), tensors_sha256 (sha256 of the data block: detects corruption), for text
 * data vocab (the tokenizer and its characters, JSON: `mpsc sample` decodes with it), and with a
 * monitored value the state of best.safetensors and early stopping (monitor, monitor_best /
 * monitor_best_step, early_stop_best / early_stop_best_step / early_stop_since), so a resumed run
 * keeps the best file and stops where the uninterrupted run stops.
 *
 * Files are written atomically: a temporary file in the same folder, fsync, rename, fsync
 * the folder. A folder keeps `checkpoint-<step>.safetensors` files; `latest` is found by
 * scanning (temporary files are ignored, unreadable checkpoints are skipped with a note).
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { isPersistent, programsOf, type ProgramSet } from '../compiler/ir/graph.js';
import { asU8, decodeSafetensors, encodeSafetensors, tensorToF32, type StFile, type StWriteTensor } from './safetensors.js';
import type { Session } from './session.js';
import type { Vocabulary } from '../data/text.js';
import { PRECISIONS, type Precision } from '../compiler/ir/precision.js';
import type { ScalerState } from './loss_scaler.js';

export const CHECKPOINT_FORMAT = 'mpsc-checkpoint-1';

/** Where training stands; everything needed to continue exactly. */
export interface TrainPosition {
  /** optimizer steps done */
  step: number;
  epoch: number;
  /** micro-batches of this epoch already consumed */
  batchInEpoch: number;
  /** train_step runs so far (dropout RNG counter) */
  counter: number;
}

export interface CheckpointInfo extends TrainPosition {
  model: string;
  specHash: string;
  dataSha256: string;
  seed: number;
  totalSteps: number;
  batch: number;
  gradAccum: number;
  shuffle: boolean;
  dropLast: boolean;
  device: string;
  /** seconds of training (every session of the run, resumed ones included) up to this checkpoint */
  trainSeconds?: number;
  /** text data: the tokenizer's vocabulary (metadata key `vocab`, JSON), read by `mpsc sample` */
  vocab?: Vocabulary;
  /** train { precision } when not fp32 (metadata `precision`; absent: fp32) */
  precision?: Precision;
  /** fp16: the loss scaler's state (metadata `amp_scale`, `amp_growth_tracker`, `amp_skipped_steps`, `amp_consecutive_skips`) */
  amp?: ScalerState;
  /** the monitored value's state when the run has one (best.safetensors, early stopping) */
  monitor?: MonitorState;
}

/** What best.safetensors and early stopping have seen so far (runtime/trainer.ts). */
export interface MonitorState {
  /** `val_loss`, `test_accuracy`, ... */
  monitor: string;
  /** the best value so far and its step (any improvement: best.safetensors holds that state) */
  best: { value: number; step: number } | null;
  /** early stopping's reference (an improvement beyond min_delta) and the evaluations since it */
  earlyStop: { value: number; step: number } | null;
  sinceBest: number;
}

/** torch's batchnorm layers carry num_batches_tracked; ours are the layers with a `<layer>.running_mean` state. */
export function batchnormLayers(model: CheckedModel): string[] {
  return model.params.filter((p) => p.kind === 'state' && p.path.endsWith('.running_mean')).map((p) => p.path.slice(0, -'.running_mean'.length));
}

export function infoToMetadata(info: CheckpointInfo): Record<string, string> {
  return {
    format: CHECKPOINT_FORMAT,
    model: info.model,
    spec_hash: info.specHash,
    data_sha256: info.dataSha256,
    seed: String(info.seed),
    step: String(info.step),
    epoch: String(info.epoch),
    batch_in_epoch: String(info.batchInEpoch),
    counter: String(info.counter),
    total_steps: String(info.totalSteps),
    batch: String(info.batch),
    grad_accum: String(info.gradAccum),
    shuffle: String(info.shuffle),
    drop_last: String(info.dropLast),
    device: info.device,
    train_seconds: String(info.trainSeconds ?? 0),
    ...(info.vocab ? { vocab: JSON.stringify(info.vocab) } : {}),
    ...(info.precision && info.precision !== 'fp32' ? { precision: info.precision } : {}),
    ...(info.amp
      ? {
          amp_scale: String(info.amp.scale),
          amp_growth_tracker: String(info.amp.growthTracker),
          amp_skipped_steps: String(info.amp.skipped),
          amp_consecutive_skips: String(info.amp.consecutiveSkips),
        }
      : {}),
    ...(info.monitor
      ? {
          monitor: info.monitor.monitor,
          early_stop_since: String(info.monitor.sinceBest),
          ...(info.monitor.best ? { monitor_best: String(info.monitor.best.value), monitor_best_step: String(info.monitor.best.step) } : {}),
          ...(info.monitor.earlyStop ? { early_stop_best: String(info.monitor.earlyStop.value), early_stop_best_step: String(info.monitor.earlyStop.step) } : {}),
        }
      : {}),
  };
}

export function metadataToInfo(md: Record<string, string>, file: string): CheckpointInfo {
  if (md.format !== CHECKPOINT_FORMAT) {
    throw new UserError(`${file}: error: not an mpsc training checkpoint (no __metadata__ format "${CHECKPOINT_FORMAT}")\n  help: --resume needs a checkpoint written by mpsc train; to start from plain weights use --init-from`);
  }
  const int = (k: string): number => {
    const v = Number(md[k]);
    if (md[k] === undefined || !Number.isInteger(v) || v < 0) throw new UserError(`${file}: error: checkpoint metadata '${k}' is missing or invalid (${JSON.stringify(md[k])})`);
    return v;
  };
  return {
    model: md.model ?? '',
    specHash: md.spec_hash ?? '',
    dataSha256: md.data_sha256 ?? '',
    seed: int('seed'),
    step: int('step'),
    epoch: int('epoch'),
    batchInEpoch: int('batch_in_epoch'),
    counter: int('counter'),
    totalSteps: int('total_steps'),
    batch: int('batch'),
    gradAccum: int('grad_accum'),
    shuffle: md.shuffle === 'true',
    dropLast: md.drop_last === 'true',
    device: md.device ?? '',
    trainSeconds: Number.isFinite(Number(md.train_seconds)) ? Number(md.train_seconds) : 0,
    ...(md.precision !== undefined ? { precision: precisionOf(md.precision, file) } : {}),
    ...(md.amp_scale !== undefined ? { amp: ampOf(md, int, file) } : {}),
    ...(md.monitor !== undefined ? { monitor: monitorOf(md, int, file) } : {}),
  };
}

function monitorOf(md: Record<string, string>, int: (k: string) => number, file: string): MonitorState {
  const point = (valueKey: string, stepKey: string): { value: number; step: number } | null => {
    if (md[valueKey] === undefined) return null;
    const value = Number(md[valueKey]);
    if (!Number.isFinite(value)) throw new UserError(`${file}: error: checkpoint metadata '${valueKey}' is invalid (${JSON.stringify(md[valueKey])})`);
    return { value, step: int(stepKey) };
  };
  return { monitor: md.monitor, best: point('monitor_best', 'monitor_best_step'), earlyStop: point('early_stop_best', 'early_stop_best_step'), sinceBest: int('early_stop_since') };
}

function precisionOf(p: string, file: string): Precision {
  if (!(PRECISIONS as readonly string[]).includes(p)) throw new UserError(`${file}: error: checkpoint metadata 'precision' is invalid (${JSON.stringify(p)})`);
  return p as Precision;
}

function ampOf(md: Record<string, string>, int: (k: string) => number, file: string): ScalerState {
  const scale = Number(md.amp_scale);
  if (!(scale > 0) || !Number.isFinite(scale)) throw new UserError(`${file}: error: checkpoint metadata 'amp_scale' is invalid (${JSON.stringify(md.amp_scale)})`);
  return { scale, growthTracker: int('amp_growth_tracker'), skipped: int('amp_skipped_steps'), consecutiveSkips: int('amp_consecutive_skips') };
}

/**
 * Create a folder and its parents for a path the user gave (-o, --run-dir, --checkpoint-dir,
 * --metrics, ...): a file in the way or a folder that cannot be written is theirs to fix (UserError).
 */
export function makeDirs(dir: string, what = 'the folder'): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (e) {
    throw new UserError(`${dir}: error: cannot create ${what} (${(e as Error).message})\n  help: ${outputPathHelp(e)}`);
  }
}

/** Open a file for writing (a metrics file: 'w', or 'a' to append), creating its folder; failures as makeDirs. */
export function openForWriting(file: string, flags: 'w' | 'a'): number {
  makeDirs(path.dirname(path.resolve(file)));
  try {
    return fs.openSync(file, flags);
  } catch (e) {
    throw cannotWrite(file, e);
  }
}

function cannotWrite(file: string, e: unknown): UserError {
  return new UserError(`${file}: error: cannot write the file (${(e as Error).message})\n  help: ${outputPathHelp(e)}`);
}

function outputPathHelp(e: unknown): string {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOTDIR' || code === 'EEXIST') return 'a file stands where the path needs a folder: choose another path';
  if (code === 'EISDIR') return 'a folder of that name is in the way: give a file name';
  return 'choose a path in a folder you can write to';
}

/** Write bytes to `file` atomically: temp file in the same folder, fsync, rename, fsync the folder. */
export function writeFileAtomic(file: string, bytes: Uint8Array): void {
  const dir = path.dirname(path.resolve(file));
  makeDirs(dir);
  const tmp = path.join(dir, `.${path.basename(file)}.tmp-${process.pid}-${Date.now()}`);
  let fd: number;
  try {
    fd = fs.openSync(tmp, 'w');
  } catch (e) {
    throw cannotWrite(file, e);
  }
  try {
    let off = 0;
    while (off < bytes.byteLength) off += fs.writeSync(fd, bytes, off, bytes.byteLength - off);
    fs.fsyncSync(fd);
  } catch (e) {
    fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw new UserError(`${file}: error: cannot write the file (${(e as Error).message})`);
  }
  fs.closeSync(fd);
  try {
    fs.renameSync(tmp, file);
  } catch (e) {
    // the temp file must not be left behind; a folder (or an unwritable name) in the way is the user's to fix
    fs.rmSync(tmp, { force: true });
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`${file}: error: cannot write the file (${code === 'EISDIR' ? 'a folder of that name is in the way' : (e as Error).message})\n  help: give a file name that is not a folder's`);
  }
  try {
    const dfd = fs.openSync(dir, 'r');
    try {
      fs.fsyncSync(dfd);
    } finally {
      fs.closeSync(dfd);
    }
  } catch {
    // some filesystems cannot fsync a directory; the rename itself is still atomic
  }
}

function dataBlockHash(buf: Uint8Array): string {
  const hlen = Number(new DataView(buf.buffer, buf.byteOffset, 8).getBigUint64(0, true));
  return createHash('sha256').update(buf.subarray(8 + hlen)).digest('hex');
}

/** Encode tensors + metadata, adding tensors_sha256 over the data block. */
function encodeWithHash(tensors: Map<string, StWriteTensor>, metadata: Record<string, string>): Uint8Array {
  const first = encodeSafetensors(tensors, metadata);
  const hash = dataBlockHash(first);
  return encodeSafetensors(tensors, { ...metadata, tensors_sha256: hash });
}

/** Session tensors (optionally only `names`) as safetensors tensors. */
export function sessionTensors(session: Session, names?: Iterable<string>): Map<string, StWriteTensor> {
  const out = new Map<string, StWriteTensor>();
  for (const name of names ?? session.tensorNames()) out.set(name, { shape: session.tensorShape(name), data: session.read(name) });
  return out;
}

/**
 * Save a full training checkpoint of the session. Afterwards the session's tensors are set to
 * exactly the saved f32 values (a no-op on f32 backends; on the float64 reference it rounds), so
 * the live run continues from precisely the state a --resume would load: resumed == uninterrupted.
 */
export function saveCheckpoint(file: string, session: Session, model: CheckedModel, info: CheckpointInfo): void {
  const tensors = sessionTensors(session);
  const own = [...tensors.entries()];
  for (const layer of batchnormLayers(model)) {
    tensors.set(`${layer}.num_batches_tracked`, { shape: [], data: BigInt64Array.of(BigInt(info.counter)) });
  }
  writeFileAtomic(file, encodeWithHash(tensors, infoToMetadata(info)));
  for (const [name, t] of own) session.write(name, t.data as Float32Array);
}

export const WEIGHTS_FORMAT = 'mpsc-weights-1';

/**
 * Save the model's weights only: parameters and buffers (running statistics) under their torch
 * names, plus `<layer>.num_batches_tracked` for batchnorm layers, no optimizer state; loads into
 * the torch module with load_state_dict(strict=True) and into mpsc with --weights / --init-from.
 */
export function saveWeights(file: string, session: Session, model: CheckedModel, counter: number, metadata: Record<string, string> = {}): void {
  const have = new Set(session.tensorNames());
  const names = model.params.map((p) => p.path).filter((n) => have.has(n)).sort();
  const t = sessionTensors(session, names);
  for (const layer of batchnormLayers(model)) t.set(`${layer}.num_batches_tracked`, { shape: [], data: BigInt64Array.of(BigInt(counter)) });
  saveTensors(file, t, { format: WEIGHTS_FORMAT, model: model.name, spec_hash: model.sourceHash, ...metadata });
}

/** Save plain tensors (e.g. --save-init) with optional metadata, atomically. */
export function saveTensors(file: string, tensors: Map<string, StWriteTensor>, metadata: Record<string, string> = {}): void {
  writeFileAtomic(file, encodeWithHash(tensors, metadata));
}

/** Read a safetensors file, verifying tensors_sha256 when present (truncation / corruption name the file). */
export function readCheckpointFile(file: string): StFile {
  let buf: Uint8Array;
  try {
    buf = asU8(fs.readFileSync(file));
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new UserError(`${file}: error: ${err.code === 'ENOENT' ? 'checkpoint file not found' : `cannot read the checkpoint (${err.message})`}`);
  }
  const st = decodeSafetensors(buf, file);
  const want = st.metadata.tensors_sha256;
  if (want !== undefined && dataBlockHash(buf) !== want) {
    throw new UserError(`${file}: error: the checkpoint is corrupt (its tensor data does not match the checksum in its header)\n  help: use an earlier checkpoint`);
  }
  return st;
}

export function checkpointFileName(step: number): string {
  return `checkpoint-${step}.safetensors`;
}

const CKPT_RE = /^checkpoint-(\d+)\.safetensors$/;

/** checkpoint files of a folder, newest (highest step) first; temporary files are ignored */
export function listCheckpoints(dir: string): { file: string; step: number }[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .map((f) => ({ m: CKPT_RE.exec(f), f }))
    .filter((x) => x.m !== null)
    .map((x) => ({ file: path.join(dir, x.f), step: Number(x.m![1]) }))
    .sort((a, b) => b.step - a.step);
}

/**
 * Resolve --resume: a checkpoint file, or a folder (its newest readable checkpoint).
 * `notes` receives a line for every newer checkpoint that was skipped because it is unreadable.
 */
export function resolveCheckpoint(p: string, notes: string[] = []): string {
  if (!fs.existsSync(p)) throw new UserError(`${p}: error: checkpoint not found`);
  if (!fs.statSync(p).isDirectory()) return p;
  const list = listCheckpoints(p);
  for (const c of list) {
    try {
      readCheckpointFile(c.file);
      return c.file;
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      notes.push(`skipping ${c.file}: ${e.message.split('\n')[0]}`);
    }
  }
  throw new UserError(`${p}: error: no readable checkpoint-<step>.safetensors in this folder${notes.length ? `\n  ${notes.join('\n  ')}` : ''}`);
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Keep the newest `keep` checkpoints of a folder; delete older ones, and the temporary files of
 * writes whose process is gone (a run killed mid-write leaves one; it is never loaded). With
 * `upToStep`, only checkpoints at or below that step count and are pruned (a higher step in a
 * shared --checkpoint-dir belongs to another run and is left alone, so this run's newest file is
 * never the one deleted).
 */
export function pruneCheckpoints(dir: string, keep: number, upToStep = Infinity): void {
  for (const c of listCheckpoints(dir).filter((x) => x.step <= upToStep).slice(keep)) fs.rmSync(c.file, { force: true });
  for (const name of fs.readdirSync(dir)) {
    const m = /^\.checkpoint-\d+\.safetensors\.tmp-(\d+)-\d+$/.exec(name);
    if (m && !processAlive(Number(m[1]))) fs.rmSync(path.join(dir, name), { force: true });
  }
}

export interface LoadIntoOptions {
  /** names that must be present in the file (others of the session may be absent) */
  required: Set<string>;
  /** names the file may hold without them being an error (besides the session's tensors) */
  ignorable?: (name: string) => boolean;
  /** what the file is for, in messages ('--init-from', '--resume', '--weights') */
  purpose: string;
  /** load only these names (others of the session that the file holds, e.g. optimizer state, are left alone); default: all */
  only?: Set<string>;
  /** the spec of the model being loaded: on a mismatch, a file written for another spec (its spec_hash metadata) is named as such */
  spec?: { file: string; hash: string };
}

/**
 * Copy tensors of a file into the session by name. Missing required tensors, shape mismatches and
 * unexpected names are all collected and reported in one error listing the offending tensors.
 */
/** What loadIntoSession needs of its target: a Session, or a shape table checked before any backend is built. */
export type TensorTarget = Pick<Session, 'tensorNames' | 'tensorShape' | 'write'>;

/**
 * The persistent tensors of a ProgramSet (names and shapes, as every backend allocates them) with a
 * write that does nothing: loading a file into it checks names and shapes before a backend is
 * compiled, so a mismatched file fails at once.
 */
export function programTensorTable(programs: ProgramSet): TensorTarget {
  const shapes = new Map<string, number[]>();
  for (const p of programsOf(programs)) {
    for (const v of p.graph.values) if (isPersistent(v)) shapes.set(v.name, v.shape);
  }
  return {
    tensorNames: () => [...shapes.keys()].sort(),
    tensorShape: (name) => [...(shapes.get(name) ?? [])],
    write: () => {},
  };
}

export function loadIntoSession(session: TensorTarget, st: StFile, file: string, opts: LoadIntoOptions): string[] {
  const sessionNames = new Set(session.tensorNames());
  const missing: string[] = [];
  const badShape: string[] = [];
  const unexpected: string[] = [];
  const badDtype: string[] = [];
  for (const name of [...opts.required].sort()) {
    if (!st.tensors.has(name)) missing.push(sessionNames.has(name) ? `  ${name} [${session.tensorShape(name).join(', ')}]` : `  ${name}`);
  }
  const loads: [string, Float32Array][] = [];
  for (const [name, t] of [...st.tensors.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    if (!sessionNames.has(name)) {
      if (!(opts.ignorable?.(name) ?? false)) unexpected.push(`  ${name} [${t.shape.join(', ')}]`);
      continue;
    }
    if (opts.only && !opts.only.has(name)) continue;
    const want = session.tensorShape(name);
    const same = want.length === t.shape.length && want.every((d, i) => d === t.shape[i]);
    if (!same) {
      badShape.push(`  ${name}: file has [${t.shape.join(', ')}], model needs [${want.join(', ')}]`);
      continue;
    }
    if (t.dtype !== 'F32' && t.dtype !== 'F64' && t.dtype !== 'F16' && t.dtype !== 'BF16') {
      badDtype.push(`  ${name}: ${t.dtype} (a float tensor is needed)`);
      continue;
    }
    loads.push([name, tensorToF32(t)]);
  }
  if (missing.length || badShape.length || unexpected.length || badDtype.length) {
    const parts: string[] = [`${file}: error: ${opts.purpose}: the tensors do not match the model`];
    if (badShape.length) parts.push(`shape mismatch:\n${badShape.join('\n')}`);
    if (missing.length) parts.push(`missing from the file:\n${missing.join('\n')}`);
    if (unexpected.length) parts.push(`not in the model:\n${unexpected.join('\n')}`);
    if (badDtype.length) parts.push(`wrong dtype:\n${badDtype.join('\n')}`);
    const written = st.metadata.spec_hash;
    if (opts.spec && written && written !== opts.spec.hash) {
      parts.push(`  note: the file was written by mpsc train for another spec (spec hash ${written.slice(0, 12)}..., ${opts.spec.file} is ${opts.spec.hash.slice(0, 12)}...)${st.metadata.model ? `, model '${st.metadata.model}'` : ''}`);
    }
    parts.push('  help: the file must come from the same architecture (same layer names and sizes)' + (opts.spec && written && written !== opts.spec.hash ? '; --weights latest takes the newest run of the model name, whatever its spec: pass the run folder you meant' : ''));
    throw new UserError(parts.join('\n'));
  }
  for (const [name, data] of loads) session.write(name, data);
  return loads.map((l) => l[0]);
}
