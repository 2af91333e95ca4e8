/**
 * cpu_fallback: the per-op CPU fallback of the Metal backend. A fallback step runs the CPU
 * backend's kernel for the node (compiler/codegen-cpu/kernels) directly on the shared
 * buffers (arena, persistent block, inputs) between two command buffers. Its pointers are
 * the step's plan bindings, in order (the node's present inputs, then its outputs).
 *
 * This is the one file of codegen-metal that imports codegen-cpu (its kernel registry, the
 * kernel context and the kernels header the fallback code and the bridge project include);
 * the rest of the backend reaches the CPU backend only through the exports below.
 */
import type { Graph, Node } from '../ir/graph.js';
import { isOpName } from '../ir/ops.js';
import { CPU_KERNELS } from '../codegen-cpu/kernels/index.js';
import { attrReaders, type KernelCtx } from '../codegen-cpu/kernel_ctx.js';
import { kernelsHeader } from '../codegen-cpu/emit_program.js';
import { withWidenedInputs } from '../codegen-cpu/kernels/precision.js';

/** `mpsc_kernels.hpp` as the CPU backend ships it: included by the fallback code (emulator and bridge) */
export const cpuKernelsHeader = (): string => kernelsHeader();
import type { LoweredProgram } from './lower_program.js';

/** the value ids a fallback step binds, in binding order */
export function fallbackValues(n: Node): number[] {
  return [...n.inputs.filter((v) => v >= 0), ...n.outputs];
}

function ctxFor(g: Graph, n: Node): KernelCtx {
  const order = fallbackValues(n);
  const fail = (msg: string): never => {
    throw new Error(`internal: Metal CPU fallback, node ${n.id} (${n.op}): ${msg}`);
  };
  const ptr = (id: number) => {
    const k = order.indexOf(id);
    if (k < 0) fail(`value ${id} is not bound`);
    const dt = g.values[id].dtype;
    // 16-bit values are raw bit patterns for the CPU kernels (runtime/cpp/mpsc_half.hpp)
    return `((${dt === 'i32' ? 'int32_t' : dt === 'f32' ? 'float' : 'uint16_t'}*)ptrs[${k}])`;
  };
  return {
    graph: g,
    node: n,
    inPtr: (i) => (n.inputs[i] === undefined || n.inputs[i] < 0 ? 'nullptr' : ptr(n.inputs[i])),
    outPtr: (i) => ptr(n.outputs[i]),
    hasInput: (i) => n.inputs[i] !== undefined && n.inputs[i] >= 0,
    inShape: (i) => g.values[n.inputs[i]].shape,
    inDtype: (i) => g.values[n.inputs[i]].dtype,
    outShape: (i) => g.values[n.outputs[i]].shape,
    samePlace: (a, b) => a === b,
    fail,
    ...attrReaders(n, fail),
  };
}

/** C++ of `static int NAME(mpsc_ctx* ctx, void* const* ptrs, const mpsc_scalars* sc)` running the CPU kernel of the node. */
export function cpuFallbackFunction(lp: LoweredProgram, node: number, fnName: string): string {
  const g = lp.program.graph;
  const n = g.nodes[node];
  const emit = isOpName(n.op) ? CPU_KERNELS[n.op] : undefined;
  if (!emit) throw new Error(`internal: neither a Metal nor a CPU kernel exists for op '${n.op}'`);
  // 16-bit GEMM operands are widened as the CPU backend widens them (codegen-cpu/kernels/precision.ts)
  const body = withWidenedInputs(ctxFor(g, n), emit);
  return `// CPU fallback: node ${n.id} (${n.op})\nstatic int ${fnName}(mpsc_ctx* ctx, void* const* ptrs, const mpsc_scalars* sc) {\n  const void* const* in = nullptr;\n  (void)ctx; (void)ptrs; (void)sc; (void)in;\n${body}  return 0;\n}\n`;
}
