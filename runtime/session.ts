/**
 * The device-independent runtime interface. Every backend implements it:
 *  - 'reference': the float64 interpreter (compiler/reference), the oracle
 *  - 'cpu':       generated C++ built into a node-addon-api module
 *  - 'metal-emu': generated MSL executed by the emulator (Linux)
 *  - 'metal':     generated MSL on a real Apple GPU (macOS only)
 * The host side (data, schedule, checkpoints, CLI) only talks to this interface.
 */
import type { ProgramName, StepScalars } from '../compiler/ir/graph.js';

export type Batch = (Float32Array | Int32Array)[];

export interface RunOptions {
  /** false: outputs not needed now (no wait for an asynchronous device); default true */
  read?: boolean;
}

export interface Session {
  readonly device: string;
  /** names of persistent tensors (params, state, optimizer state, grad accumulators), sorted */
  tensorNames(): string[];
  tensorShape(name: string): number[];
  /** a copy of a persistent tensor's current contents */
  read(name: string): Float32Array;
  /** overwrite a persistent tensor (length must match) */
  write(name: string, data: Float32Array): void;
  /** true when this session has the program (apply_update exists only when grad_accum > 1) */
  hasProgram(program: ProgramName): boolean;
  /**
   * Run one program. `inputs` follows Program.inputs order; lengths/dtypes must match
   * (checked before any native code runs). Returns the program's scalar outputs
   * (Program.outputs order: loss first, then metrics).
   * `opts.read === false`: the caller does not need the outputs of this step; a device backend
   * (cuda) then returns without waiting for the step, and the outputs are NaN. Backends that run
   * synchronously ignore it and return the outputs.
   */
  run(program: ProgramName, inputs: Batch, scalars: StepScalars, opts?: RunOptions): Float64Array;
  /**
   * Data-parallel training (runtime/ddp): the backend's own collective library, when it has one (cuda:
   * NCCL); absent on the others, whose gradients the host all-reduces through read / write.
   */
  collective?: DeviceCollective;
  close(): void;
}

/** A device's collective (runtime/ddp/collective.ts drives it). */
export interface DeviceCollective {
  /** what it is, for messages ("NCCL") */
  readonly name: string;
  /** rank 0: a new unique id for the group (shared with the other ranks by the launcher) */
  uniqueId(): Uint8Array;
  /** join the group (blocks until every rank joined) */
  init(nranks: number, rank: number, id: Uint8Array): void;
  /** average every gradient accumulator over the ranks in place, after the runs so far (asynchronous) */
  allreduceGrads(): void;
}
