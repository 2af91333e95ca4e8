/**
 * The graph IR: plain data shared by every pass and every backend.
 *
 * A Graph is a list of values (tensors with static shapes) and a list of nodes
 * in execution (topological) order. Every node reads input values and writes
 * output values; a node may also *mutate* some of its inputs in place (only
 * persistent values: parameters, state, optimizer state, gradient accumulators)
 * as listed by its op in ops.ts (`mutates`).
 *
 * Invariants (checked by verify.ts):
 *  - values[i].id === i; nodes[i].id === i
 *  - every non-persistent value is written by exactly one node (SSA), and is
 *    written before it is read (nodes are in topological order)
 *  - persistent values (kind param/state/optstate/gradacc) and inputs are never
 *    outputs of a node; they are changed only through `mutates`
 *  - shapes are fully static (the batch dimension is bound before a Graph exists)
 *  - everything is plain JSON-serialisable data (no classes, no functions)
 */

/** the 16-bit float types: f16 (IEEE binary16) and bf16 (bfloat16) */
export type HalfDType = 'f16' | 'bf16';

/**
 * A value's element type. The 16-bit types appear only under a `train { precision }` other than
 * fp32, and only on activations / gradients (never on inputs, persistent values or outputs, so
 * the host and the model ABI see f32 and i32 only; verify.ts checks it): compiler/ir/precision.ts
 * gives values autocast's types with `cast` nodes, which backends fold into their kernels (fuse.ts).
 */
export type DType = 'f32' | 'i32' | HalfDType;

export function isHalf(d: DType): d is HalfDType {
  return d === 'f16' || d === 'bf16';
}

export interface SourceLoc {
  file: string;
  line: number; // 1-based
  col: number; // 1-based
  endLine?: number;
  endCol?: number;
}

/**
 * What a value is, which decides where its memory lives:
 *  - input:      a data batch bound by the host each step (e.g. `image`, `label`)
 *  - param:      a trainable parameter (persistent, checkpointed, e.g. `fc1.weight`)
 *  - state:      a non-trainable persistent buffer (batchnorm running stats)
 *  - optstate:   optimizer state (persistent, checkpointed: `fc1.weight.exp_avg`)
 *  - gradacc:    gradient accumulator for grad_accum > 1 (persistent, `fc1.weight.grad`)
 *  - activation: produced and consumed within one program run (memory-planned)
 *  - grad:       a gradient produced within one program run (memory-planned)
 *  - output:     a scalar result the host reads after a run (loss, metrics, grad norm)
 */
export type ValueKind = 'input' | 'param' | 'state' | 'optstate' | 'gradacc' | 'activation' | 'grad' | 'output';

export const PERSISTENT_KINDS: readonly ValueKind[] = ['param', 'state', 'optstate', 'gradacc'];

export interface Value {
  id: number;
  /** Stable name. Persistent values and inputs: their path (`fc1.weight`, `image`). Others: a readable debug name (`fc1.out`, `d_fc1.out`). */
  name: string;
  dtype: DType;
  shape: number[]; // [] is a scalar
  kind: ValueKind;
}

export type AttrValue = number | boolean | string | number[];

export interface Node {
  id: number;
  op: string; // a key of OPS in ops.ts
  inputs: number[]; // value ids; -1 for an absent optional input
  outputs: number[]; // value ids
  attrs: Record<string, AttrValue>;
  /** Layer path this node came from (`stage1.conv2d0`), for messages and profiles. */
  path?: string;
  loc?: SourceLoc;
}

export interface Graph {
  values: Value[];
  nodes: Node[];
}

/**
 * Scalars every program receives each run (computed by the host, not the graph):
 *   lr      f32  learning rate for this optimizer step (the schedule is evaluated on the host)
 *   t       i32  1-based optimizer step number (bias correction in adam/adamw)
 *   seed    u32  run seed (dropout RNG key)
 *   counter u32  0-based count of train_step runs so far (dropout RNG counter)
 * Kernels that need them (see ops.ts `scalars`) read them from one small struct.
 */
export interface StepScalars {
  lr: number;
  t: number;
  seed: number;
  counter: number;
}

export type ProgramName = 'train_step' | 'apply_update' | 'eval' | 'eval_tail';

/**
 * A program: what one backend call runs. Built by compiler/ir/programs.ts.
 *  - train_step:   forward + loss + backward + (when grad_accum == 1) clip + optimizer update
 *  - apply_update: (only when grad_accum > 1) clip + optimizer update from gradacc values, then zero them
 *  - eval:         forward in eval mode + loss + metrics, no gradients
 *  - eval_tail:    the same as eval for the smaller last batch of the test split (when it does not divide)
 */
export interface Program {
  name: ProgramName;
  batch: number;
  graph: Graph;
  /** value ids of data inputs, in a fixed order (names are the spec's input names) */
  inputs: number[];
  /** value ids of scalar outputs the host reads: loss first (if any), then metrics in spec order */
  outputs: { name: string; value: number }[];
  /** Memory plan (memory_plan.ts): where each non-persistent, non-input value lives. */
  plan?: MemoryPlan;
}

export interface MemoryPlan {
  /** arena offset in bytes per value id (activation / grad / output kinds only); -1 if not arena-allocated */
  offsets: number[];
  arenaBytes: number;
  /** bytes of persistent values (params, state, optstate, gradacc) */
  persistentBytes: number;
  /** bytes of the input batch buffers */
  inputBytes: number;
  /** arenaBytes + persistentBytes + inputBytes */
  peakBytes: number;
}

/** the element types the host sees (inputs, persistent tensors, outputs) */
export type HostDType = 'f32' | 'i32';

/** the element type of a value the host sees (an input, persistent tensor or output): never 16-bit */
export function hostDType(v: Value): HostDType {
  if (isHalf(v.dtype)) throw new Error(`internal: value '${v.name}' (${v.kind}) is ${v.dtype}, but inputs, persistent values and outputs are f32 or i32`);
  return v.dtype;
}

export function dtypeBytes(d: DType): number {
  return isHalf(d) ? 2 : 4;
}

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const s of shape) n *= s;
  return n;
}

export function valueBytes(v: Value): number {
  return numel(v.shape) * dtypeBytes(v.dtype);
}

export function isPersistent(v: Value): boolean {
  return PERSISTENT_KINDS.includes(v.kind);
}

/** Small mutable helper to build a Graph; the result is plain data. */
export class GraphBuilder {
  readonly graph: Graph = { values: [], nodes: [] };

  value(name: string, dtype: DType, shape: number[], kind: ValueKind): number {
    const id = this.graph.values.length;
    this.graph.values.push({ id, name, dtype, shape: [...shape], kind });
    return id;
  }

  node(op: string, inputs: number[], outputs: number[], attrs: Record<string, AttrValue> = {}, path?: string, loc?: SourceLoc): number {
    const id = this.graph.nodes.length;
    const n: Node = { id, op, inputs, outputs, attrs };
    if (path !== undefined) n.path = path;
    if (loc !== undefined) n.loc = loc;
    this.graph.nodes.push(n);
    return id;
  }

  /** Create the output value(s) and the node in one call; returns the output ids. */
  emit(op: string, inputs: number[], outs: { name: string; dtype?: DType; shape: number[]; kind?: ValueKind }[], attrs: Record<string, AttrValue> = {}, path?: string, loc?: SourceLoc): number[] {
    const ids = outs.map((o) => this.value(o.name, o.dtype ?? 'f32', o.shape, o.kind ?? 'activation'));
    this.node(op, inputs, ids, attrs, path, loc);
    return ids;
  }

  get(id: number): Value {
    return this.graph.values[id];
  }
}

/**
 * Everything one model instance runs. Programs share persistent values by *name*
 * (a backend allocates one buffer per persistent name, zero-filled, and every program
 * binds it); the host writes initial values through Session.write.
 */
export interface ProgramSet {
  model: string; // model name
  train_step: Program;
  apply_update?: Program; // present iff grad_accum > 1
  eval: Program;
  eval_tail?: Program;
  /** train { precision } when not fp32 (compiler/ir/precision.ts); backends without 16-bit kernels refuse such a set */
  precision?: 'fp16' | 'bf16';
}

/** the program names in run order: the one list every part iterates */
export const PROGRAM_NAMES: readonly ProgramName[] = ['train_step', 'apply_update', 'eval', 'eval_tail'];

/** the programs a set holds, in PROGRAM_NAMES order */
export function programsOf(set: ProgramSet): Program[] {
  return PROGRAM_NAMES.map((n) => set[n]).filter((p): p is Program => p !== undefined);
}
