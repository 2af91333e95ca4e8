/**
 * Settings: the optimizer, schedule and train lines (with the data source) validated
 * into OptimizerConfig / ScheduleConfig / TrainConfig. Relative data paths resolve
 * against the spec file's folder.
 */
import * as fs from 'node:fs';
import * as nodePath from 'node:path';
import type * as A from '../parser/ast.js';
import type { DataSource, EarlyStopConfig, OptimizerConfig, ScheduleConfig, TrainConfig } from '../model.js';
import { BATCH } from '../model.js';
import { errorAt, suggestion, type Diagnostic } from '../diagnostics.js';
import { bindArgs, constEval, type ArgSpec, type PositionalArg } from './args.js';
import type { FlatInput } from './expand_blocks.js';
import { fmtTensor } from './shape_util.js';
import { PRECISIONS, type Precision } from '../ir/precision.js';

const LR: ArgSpec = { name: 'lr', type: 'float', min: 0, minExclusive: true, doc: 'learning rate (required)' };
const ADAM = (wd: number): ArgSpec[] => [
  LR,
  { name: 'beta1', type: 'float', default: 0.9, min: 0, max: 1, maxExclusive: true, doc: 'first moment decay' },
  { name: 'beta2', type: 'float', default: 0.999, min: 0, max: 1, maxExclusive: true, doc: 'second moment decay' },
  { name: 'eps', type: 'float', default: 1e-8, min: 0, minExclusive: true, doc: 'denominator term' },
  { name: 'weight_decay', type: 'float', default: wd, min: 0, doc: wd ? 'decoupled weight decay' : 'L2 penalty added to the gradient' },
];

export const OPTIMIZERS: Record<string, { args: ArgSpec[]; doc: string }> = {
  sgd: {
    doc: 'torch.optim.SGD (dampening 0)',
    args: [
      LR,
      { name: 'momentum', type: 'float', default: 0, min: 0, max: 1, maxExclusive: true, doc: 'momentum factor' },
      { name: 'nesterov', type: 'bool', default: false, doc: 'Nesterov momentum (needs momentum > 0)' },
      { name: 'weight_decay', type: 'float', default: 0, min: 0, doc: 'L2 penalty added to the gradient' },
    ],
  },
  adam: { doc: 'torch.optim.Adam (amsgrad false)', args: ADAM(0) },
  adamw: { doc: 'torch.optim.AdamW (amsgrad false)', args: ADAM(0.01) },
};

const WARMUP: ArgSpec[] = [
  { name: 'warmup_steps', type: 'int', default: 0, min: 0, doc: 'linear warmup length in optimizer steps' },
  { name: 'warmup_start_factor', type: 'float', default: 1 / 3, min: 0, max: 1, minExclusive: true, doc: 'warmup starts at this fraction of lr' },
];
const GAMMA: ArgSpec = { name: 'gamma', type: 'float', default: 0.1, min: 0, minExclusive: true, doc: 'decay factor' };

export const SCHEDULES: Record<string, { args: ArgSpec[]; doc: string }> = {
  constant: { doc: 'lr stays fixed', args: [...WARMUP] },
  step: { doc: 'lr *= gamma every step_size steps (torch StepLR)', args: [{ name: 'step_size', type: 'int', min: 1, doc: 'steps between decays' }, GAMMA, ...WARMUP] },
  multistep: { doc: 'lr *= gamma at each milestone (torch MultiStepLR)', args: [{ name: 'milestones', type: 'ints', min: 1, doc: 'increasing step numbers' }, GAMMA, ...WARMUP] },
  exponential: { doc: 'lr *= gamma every step (torch ExponentialLR)', args: [{ ...GAMMA, default: undefined }, ...WARMUP] },
  cosine: {
    doc: 'cosine annealing from lr to eta_min over t_max steps (torch CosineAnnealingLR)',
    args: [
      { name: 't_max', type: 'int', min: 1, default: null, doc: 'period in steps (default: total steps minus warmup)' },
      { name: 'eta_min', type: 'float', min: 0, default: 0, doc: 'final learning rate' },
      ...WARMUP,
    ],
  },
};

export const DATA_SOURCES: Record<string, { args: ArgSpec[]; doc: string }> = {
  mnist: { doc: 'MNIST digits: bundled (no argument) or IDX files in a folder', args: [
      { name: 'dir', type: 'string', default: null, doc: 'folder with the four IDX files (default: the bundled digits)' },
      { name: 'normalize', type: 'bool', default: true, doc: 'standardise pixels with the MNIST mean 0.1307 and std 0.3081 (as torchvision.transforms.Normalize); false keeps them in [0, 1]' },
    ],
  },
  csv: {
    doc: 'CSV files with one sample per row',
    args: [
      { name: 'train', type: 'string', doc: 'training CSV file' },
      { name: 'test', type: 'string', default: null, doc: 'test CSV file' },
      { name: 'label_column', type: 'str_or_int', default: 'label', min: 0, doc: 'label column (name or index)' },
      { name: 'normalize', type: 'float', default: null, min: 0, minExclusive: true, doc: 'divide features by this' },
    ],
  },
  safetensors: {
    doc: 'tensors in .safetensors files, one per spec input',
    args: [
      { name: 'train', type: 'string', doc: 'training file' },
      { name: 'test', type: 'string', default: null, doc: 'test file' },
      { name: 'inputs', type: 'strmap', default: null, doc: 'map spec input name -> tensor name (default: the same names)' },
    ],
  },
  text: {
    doc: 'a text as token windows for a language model: text() is Moby Dick (bundled), text("file.txt") a UTF-8 file; first 90% trains, last 10% tests',
    args: [
      { name: 'file', type: 'string', default: null, doc: 'a UTF-8 text file (default: the bundled Moby Dick, 1,190,317 characters, 83 distinct)' },
      { name: 'tokenizer', type: 'string', default: 'char', doc: '"char" (the sorted distinct characters of the file) or "byte" (256 ids)' },
    ],
  },
  synthetic: {
    doc: 'random data of the inputs\' shapes (benchmarks)',
    args: [
      { name: 'train_size', type: 'int', default: 1024, min: 1, doc: 'training samples' },
      { name: 'test_size', type: 'int', default: 256, min: 0, doc: 'test samples' },
      { name: 'seed', type: 'int', default: 0, min: 0, doc: 'generator seed' },
    ],
  },
};

export const TRAIN_KEYS: ArgSpec[] = [
  { name: 'data', type: 'call', doc: 'the data source (required)' },
  { name: 'epochs', type: 'int', min: 1, default: null, doc: 'passes over the training data (default 1 unless steps is given)' },
  { name: 'steps', type: 'int', min: 1, default: null, doc: 'optimizer steps (instead of epochs)' },
  { name: 'batch', type: 'int', min: 1, max: 1 << 20, default: 32, doc: 'batch size N' },
  { name: 'shuffle', type: 'bool', default: true, doc: 'shuffle the training data each epoch' },
  { name: 'seed', type: 'int', min: 0, default: 0, doc: 'seed for initialisation, shuffling and dropout' },
  { name: 'drop_last', type: 'bool', default: false, doc: 'drop the last incomplete training batch' },
  { name: 'grad_clip', type: 'float', min: 0, minExclusive: true, default: null, doc: 'clip the global gradient L2 norm to this' },
  { name: 'grad_accum', type: 'int', min: 1, default: 1, doc: 'batches accumulated per optimizer step' },
  { name: 'eval_every', type: 'int', min: 1, default: null, doc: 'evaluate every this many optimizer steps (default: each epoch end)' },
  { name: 'checkpoint_every', type: 'int', min: 1, default: null, doc: 'checkpoint every this many optimizer steps (default: each epoch end)' },
  { name: 'val_split', type: 'float', min: 0, max: 1, maxExclusive: true, default: 0, doc: 'hold out this fraction of the training data (its last samples, unshuffled) as a validation set' },
  { name: 'early_stop', type: 'map', default: null, doc: 'stop when the monitored value stops improving: { monitor: "val_loss", patience: 3, min_delta: 0 }' },
  { name: 'sync_batchnorm', type: 'bool', default: false, doc: 'data-parallel runs (--gpus / --ranks): batch-norm statistics over all ranks instead of per replica (not supported yet: an error with more than one rank)' },
  { name: 'precision', type: 'string', default: 'fp32', doc: '"fp32", "fp16" (with dynamic loss scaling) or "bf16": 16-bit GEMM operands with f32 accumulation, everything else f32 (docs/language.md, Precision)' },
];

export const EARLY_STOP_KEYS: ArgSpec[] = [
  { name: 'monitor', type: 'string', default: null, doc: 'val_loss, val_<metric>, test_loss or test_<metric> (default: val_loss with a val_split, else test_loss)' },
  { name: 'patience', type: 'int', min: 1, default: 3, doc: 'evaluations without improvement before stopping' },
  { name: 'min_delta', type: 'float', min: 0, default: 0, doc: 'an improvement must beat the best value by more than this' },
  { name: 'mode', type: 'string', default: 'auto', doc: "'min', 'max' or 'auto' (max for accuracy and top_k, min for losses and other metrics)" },
];

/** the metrics of the spec (name and layer type), which early_stop may monitor */
export interface MetricInfo {
  name: string;
  type: string;
}

/** max for accuracy-like metrics, min for losses and everything else */
export function monitorMode(monitor: string, metrics: MetricInfo[]): 'min' | 'max' {
  const name = monitor.replace(/^(val|test)_/, '');
  const m = metrics.find((x) => x.name === name);
  return m && (m.type === 'accuracy' || m.type === 'top_k') ? 'max' : 'min';
}

function checkEarlyStop(e: A.MapExpr, valSplit: number, metrics: MetricInfo[], diags: Diagnostic[]): EarlyStopConfig | null {
  const named: A.Arg[] = e.entries.map((en) => ({ name: en.key, value: en.value }));
  const a = bindArgs({ what: 'early_stop', diags, evalExpr: (x) => constEval(x, diags), argWord: 'key' }, EARLY_STOP_KEYS, [], named, e.loc) as Record<string, any> | null;
  if (a === null) return null;
  const monitor: string = a.monitor ?? (valSplit > 0 ? 'val_loss' : 'test_loss');
  const at = e.entries.find((en) => en.key.name === 'monitor')?.value.loc ?? e.loc;
  const allowed = ['val', 'test'].flatMap((s) => ['loss', ...metrics.map((m) => m.name)].map((n) => `${s}_${n}`));
  if (!allowed.includes(monitor)) {
    diags.push(errorAt(at, `early_stop cannot monitor '${monitor}'`, suggestion(monitor, allowed) ?? `monitor one of: ${allowed.join(', ')}`));
    return null;
  }
  if (monitor.startsWith('val_') && valSplit === 0) {
    diags.push(errorAt(at, `early_stop monitors '${monitor}' but the train section has no val_split`, `add e.g. val_split: 0.1, or monitor test_${monitor.slice(4)}`));
    return null;
  }
  if (!['min', 'max', 'auto'].includes(a.mode)) {
    const mloc = e.entries.find((en) => en.key.name === 'mode')!.value.loc;
    diags.push(errorAt(mloc, `early_stop mode must be 'min', 'max' or 'auto', got '${a.mode}'`));
    return null;
  }
  const mode = a.mode === 'auto' ? monitorMode(monitor, metrics) : (a.mode as 'min' | 'max');
  return { monitor, patience: a.patience, min_delta: a.min_delta, mode };
}

function bindCall(c: A.CallExpr, table: Record<string, { args: ArgSpec[] }>, kind: string, diags: Diagnostic[]): { name: string; args: Record<string, unknown> } | null {
  const def = table[c.callee.name];
  if (!def) {
    diags.push(errorAt(c.callee.loc, `unknown ${kind} '${c.callee.name}'`, suggestion(c.callee.name, Object.keys(table)) ?? `${kind}s: ${Object.keys(table).join(', ')}`));
    return null;
  }
  const positional: PositionalArg[] = [];
  for (const a of c.args) {
    if (a.name) continue;
    const v = constEval(a.value, diags);
    if (v === null) return null;
    positional.push({ val: v, loc: a.value.loc });
  }
  const args = bindArgs({ what: `${kind} ${c.callee.name}`, diags, evalExpr: (e) => constEval(e, diags) }, def.args, positional, c.args.filter((a) => a.name), c.loc);
  return args === null ? null : { name: c.callee.name, args };
}

export function checkOptimizer(ast: A.ModelFile, diags: Diagnostic[]): OptimizerConfig | null {
  for (const o of ast.optimizer.slice(1)) diags.push(errorAt(o.loc, "duplicate 'optimizer' line"));
  if (ast.optimizer.length === 0) {
    diags.push(errorAt({ file: ast.file, line: 1, col: 1 }, 'the spec has no optimizer line', 'add e.g.: optimizer adam(lr: 1e-3)'));
    return null;
  }
  const c = ast.optimizer[0].value;
  const r = bindCall(c, OPTIMIZERS, 'optimizer', diags);
  if (!r) return null;
  const a = r.args as Record<string, number & boolean>;
  if (r.name === 'sgd') {
    if (a.nesterov && a.momentum === 0) {
      diags.push(errorAt(c.loc, 'nesterov needs momentum > 0', 'add e.g. momentum: 0.9'));
      return null;
    }
    return { kind: 'sgd', lr: a.lr, momentum: a.momentum, nesterov: a.nesterov, weight_decay: a.weight_decay };
  }
  return { kind: r.name as 'adam' | 'adamw', lr: a.lr, beta1: a.beta1, beta2: a.beta2, eps: a.eps, weight_decay: a.weight_decay };
}

export function checkSchedule(ast: A.ModelFile, diags: Diagnostic[]): ScheduleConfig | null {
  for (const o of ast.schedule.slice(1)) diags.push(errorAt(o.loc, "duplicate 'schedule' line"));
  if (ast.schedule.length === 0) return { kind: 'constant', warmup_steps: 0, warmup_start_factor: 1 / 3 };
  const c = ast.schedule[0].value;
  const r = bindCall(c, SCHEDULES, 'schedule', diags);
  if (!r) return null;
  const a = r.args as Record<string, any>;
  const w = { warmup_steps: a.warmup_steps as number, warmup_start_factor: a.warmup_start_factor as number };
  switch (r.name) {
    case 'constant':
      return { kind: 'constant', ...w };
    case 'step':
      return { kind: 'step', step_size: a.step_size, gamma: a.gamma, ...w };
    case 'multistep': {
      const m = a.milestones as number[];
      if (m.length === 0 || m.some((x, i) => i > 0 && x <= m[i - 1])) {
        diags.push(errorAt(c.loc, 'milestones must be a non-empty, strictly increasing list of steps'));
        return null;
      }
      return { kind: 'multistep', milestones: m, gamma: a.gamma, ...w };
    }
    case 'exponential':
      return { kind: 'exponential', gamma: a.gamma, ...w };
    default:
      return { kind: 'cosine', t_max: a.t_max, eta_min: a.eta_min, ...w };
  }
}

function describeInputs(inputs: FlatInput[]): string {
  return inputs.map((i) => `'${i.name}' ${fmtTensor(i)}`).join(', ');
}

/**
 * A data file or folder that does not exist (yet) is a warning, not an error: `mpsc check` still
 * checks the rest (the data may be fetched later) and `mpsc train` fails when it loads the data.
 */
function warnMissingFiles(c: A.CallExpr, files: [string, string | null][], diags: Diagnostic[]): void {
  for (const [arg, file] of files) {
    if (file !== null && !fs.existsSync(file)) diags.push({ severity: 'warning', loc: c.loc, message: `${c.callee.name}() ${arg} ${file} does not exist`, hint: `training will fail until it does; paths are relative to the spec's folder` });
  }
}

function checkData(c: A.CallExpr, specDir: string, inputs: FlatInput[], diags: Diagnostic[], inputErrors: boolean): DataSource | null {
  const r = bindCall(c, DATA_SOURCES, 'data source', diags);
  if (!r) return null;
  const a = r.args as Record<string, any>;
  const abs = (p: string | null) => (p === null ? null : nodePath.resolve(specDir, p));
  switch (r.name) {
    case 'mnist': {
      const img = inputs.filter((i) => i.dtype === 'f32');
      const lab = inputs.filter((i) => i.dtype === 'i32');
      const okImg = img.length === 1 && (img[0].shape.join() === [BATCH, 1, 28, 28].join() || img[0].shape.join() === [BATCH, 784].join());
      const okLab = lab.length === 1 && lab[0].shape.length === 1;
      if (!inputErrors && (!okImg || !okLab || inputs.length !== 2)) {
        diags.push(errorAt(c.loc, `mnist() provides images f32[N, 1, 28, 28] (or f32[N, 784]) and labels i32[N], but the inputs are ${describeInputs(inputs) || 'none'}`, 'declare: input image: f32[N, 1, 28, 28] and input label: i32[N]'));
        return null;
      }
      warnMissingFiles(c, [['dir', abs(a.dir)]], diags);
      return { kind: 'mnist', dir: abs(a.dir), normalize: a.normalize };
    }
    case 'csv':
      warnMissingFiles(c, [['train', abs(a.train)], ['test', abs(a.test)]], diags);
      return { kind: 'csv', train: abs(a.train)!, test: abs(a.test), label_column: a.label_column, normalize: a.normalize };
    case 'safetensors': {
      const map: Record<string, string> = a.inputs ?? Object.fromEntries(inputs.map((i) => [i.name, i.name]));
      for (const k of Object.keys(map)) {
        if (!inputs.some((i) => i.name === k)) {
          diags.push(errorAt(c.loc, `safetensors inputs map names '${k}', which is not an input`, suggestion(k, inputs.map((i) => i.name))));
          return null;
        }
      }
      const missing = inputs.filter((i) => !(i.name in map));
      if (missing.length) {
        diags.push(errorAt(c.loc, `safetensors inputs map has no tensor for input '${missing[0].name}'`, `add ${missing[0].name}: "tensor_name"`));
        return null;
      }
      warnMissingFiles(c, [['train', abs(a.train)], ['test', abs(a.test)]], diags);
      return { kind: 'safetensors', train: abs(a.train)!, test: abs(a.test), inputs: map };
    }
    case 'text': {
      if (a.tokenizer !== 'char' && a.tokenizer !== 'byte') {
        diags.push(errorAt(c.loc, `tokenizer must be "char" or "byte", got "${a.tokenizer}"`, suggestion(a.tokenizer, ['char', 'byte']) ?? 'char: one id per distinct character; byte: the 256 byte values'));
        return null;
      }
      const T = inputs[0]?.shape[1];
      if (!inputErrors && (inputs.length !== 2 || inputs.some((i) => i.dtype !== 'i32' || i.shape.length !== 2 || i.shape[1] !== T))) {
        diags.push(errorAt(c.loc, `text() provides token windows as two i32[N, T] inputs (tokens and targets), but the inputs are ${describeInputs(inputs) || 'none'}`, 'declare: input tokens: i32[N, 64] and input targets: i32[N, 64]'));
        return null;
      }
      return { kind: 'text', file: abs(a.file), tokenizer: a.tokenizer };
    }
    default:
      return { kind: 'synthetic', train_size: a.train_size, test_size: a.test_size, seed: a.seed };
  }
}

export function checkTrain(ast: A.ModelFile, specDir: string, inputs: FlatInput[], diags: Diagnostic[], inputErrors = false, metrics: MetricInfo[] = []): TrainConfig | null {
  for (const o of ast.train.slice(1)) diags.push(errorAt(o.loc, "duplicate 'train' section"));
  if (ast.train.length === 0) {
    diags.push(errorAt({ file: ast.file, line: 1, col: 1 }, 'the spec has no train section', 'add e.g.: train { data: mnist(), epochs: 1, batch: 64 }'));
    return null;
  }
  const m = ast.train[0].value;
  const named: A.Arg[] = m.entries.map((e) => ({ name: e.key, value: e.value }));
  const a = bindArgs({ what: 'train', diags, evalExpr: (e) => constEval(e, diags), argWord: 'key' }, TRAIN_KEYS, [], named, ast.train[0].loc) as Record<string, any> | null;
  if (a === null) return null;
  if (a.epochs !== null && a.steps !== null) {
    const loc = m.entries.find((e) => e.key.name === 'steps')!.key.loc;
    diags.push(errorAt(loc, "give either 'epochs' or 'steps', not both"));
    return null;
  }
  if (!(PRECISIONS as readonly string[]).includes(a.precision)) {
    const loc = m.entries.find((e) => e.key.name === 'precision')!.value.loc;
    const near = suggestion(a.precision, [...PRECISIONS]);
    const allowed = PRECISIONS.map((p) => `"${p}"`);
    diags.push(errorAt(loc, `precision must be ${allowed.slice(0, -1).join(', ')} or ${allowed[allowed.length - 1]}, got "${a.precision}"`, near ?? 'fp32: all f32; fp16: f16 GEMM operands with dynamic loss scaling; bf16: bf16 GEMM operands'));
    return null;
  }
  const data = checkData(a.data as A.CallExpr, specDir, inputs, diags, inputErrors);
  const earlyStop = a.early_stop === null ? null : checkEarlyStop(a.early_stop as A.MapExpr, a.val_split, metrics, diags);
  if (data === null || (a.early_stop !== null && earlyStop === null)) return null;
  return {
    data,
    epochs: a.steps === null ? (a.epochs ?? 1) : null,
    steps: a.steps,
    batch: a.batch,
    shuffle: a.shuffle,
    seed: a.seed,
    drop_last: a.drop_last,
    grad_clip: a.grad_clip,
    grad_accum: a.grad_accum,
    eval_every: a.eval_every,
    checkpoint_every: a.checkpoint_every,
    val_split: a.val_split,
    early_stop: earlyStop,
    precision: a.precision as Precision,
    ...(a.sync_batchnorm ? { sync_batchnorm: true } : {}),
  };
}
