/**
 * pdl: programmatic dependent launch (Hopper, sm_90+) between consecutive kernels of a CUDA graph. A launch-
 * bound step (gpt_tiny: ~110 graph nodes in ~0.7 ms, the MNIST MLP's ~20 in ~0.08 ms) pays each node's launch
 * and block scheduling after the previous kernel has drained; with PDL the next kernel's blocks are scheduled
 * while the previous kernel still runs and wait on the GPU for its completion instead.
 * Consumes the build switch and a CudaPlan's lanes; produces the plan's mode (`pdlFor`, CudaPlan.pdl) and the host helper text.
 * The contract, on both sides:
 *  - kernel side (cuda_dialect.ts CUDA_PDL): the first statement of every generated kernel is
 *    `griddepcontrol.wait` (the grids before it in the stream complete, their writes visible: the same
 *    guarantee as plain stream order, since nothing, not even the step scalars, is read or written before
 *    it), then `griddepcontrol.launch_dependents` (the next grid may be scheduled);
 *  - host side (host.ts): a generated kernel is launched with cudaLaunchAttributeProgrammaticStreamSerialization
 *    only when the operation before it on its stream is another generated kernel (mode 'gen'), or also a
 *    cuBLASLt call (mode 'all': its last operation is then taken to be a kernel; cuBLASLt's own kernels may or
 *    may not trigger early, and a launch after one that does not behaves as without the attribute). Never
 *    after a memcpy, an event or an NCCL bucket, never in a profiled step (events between kernels), never on
 *    more than one lane (lanes.ts). Stream capture turns each such launch into a programmatic graph edge.
 * Correctness does not depend on the mode: every kernel waits before touching memory, so results are the same
 * bits with and without PDL (30-step trainings on the GPU compared them, bench/NOTES.md v14). MPSC_CUDA_PDL=off|gen|all
 * at build time; default off: measured 2% slower on gpt_tiny (bench/NOTES.md v14).
 */
import { envChoice } from '../env_switch.js';

export type PdlMode = 'off' | 'gen' | 'all';

/** the build's PDL mode (MPSC_CUDA_PDL at generation time) */
export function cudaPdl(): PdlMode {
  return envChoice('MPSC_CUDA_PDL', ['off', 'gen', 'all'], 'off');
}

/** the mode a plan with this many lanes uses: off on more than one lane (a node's stream predecessor is then not its plan predecessor) */
export function pdlFor(mode: PdlMode, lanes: number): PdlMode {
  return lanes > 1 ? 'off' : mode;
}

/**
 * host text: mpsc_launch(pdl, kernel, grid, block, dynamic shared bytes, stream, args...): cudaLaunchKernelEx with
 * the programmatic-serialization attribute when `pdl`, a plain launch otherwise
 */
export function pdlHostHelper(): string {
  return `// programmatic dependent launch (pdl.ts): with pdl, the kernel may be scheduled while the previous kernel of
// its stream still runs (its first statement waits for that kernel's completion on the GPU)
template <typename... P, typename... A>
static cudaError_t mpsc_launch(bool pdl, void (*k)(P...), dim3 grid, dim3 block, size_t dyn, cudaStream_t st, A... args) {
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = dyn;
  cfg.stream = st;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
}
`;
}
