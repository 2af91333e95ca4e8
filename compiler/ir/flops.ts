/**
 * flops: the floating-point work of a Program, counted from its nodes' static shapes.
 *
 * Consumes: a Program (compiler/ir/graph.ts). Produces: { total, gemm, elementwise, byOp }.
 * Each op's count is its `flops` rule in the op catalogue (ops.ts, op_rules/*.ts):
 *  - GEMM-like ops count 2 flops per multiply-add: linear / matmul 2*M*N*K; conv2d,
 *    conv2d_grad_input and conv2d_grad_weight 2*N*O*OH*OW*(C/groups)*KH*KW each;
 *  - every other op is a rough count: a fixed number of flops per element it touches
 *    (the largest of its inputs and outputs), e.g. 1 for relu, ~10 for adam per parameter.
 * Used by `mpsc bench` for achieved GFLOP/s; the GEMM part is the one that matters.
 */
import { type Graph, type Node, type Program, numel } from './graph.js';
import { opDef } from './ops.js';

export interface FlopCount {
  /** gemm + elementwise */
  total: number;
  /** linear, matmul and the three conv passes */
  gemm: number;
  /** everything else (rough) */
  elementwise: number;
  /** flops per op name */
  byOp: Record<string, number>;
}

/** flops of one node (its op's `flops` rule in the catalogue); `gemm` says whether it is GEMM-like */
export function nodeFlops(g: Graph, n: Node): { flops: number; gemm: boolean } {
  const shape = (k: number): readonly number[] => {
    const id = n.inputs[k];
    return id !== undefined && id >= 0 && g.values[id] ? g.values[id].shape : [];
  };
  const rule = opDef(n.op).flops ?? { perElement: 1 };
  if ('gemm' in rule) return { flops: rule.gemm(shape, n.attrs), gemm: true };
  let elems = 0;
  for (const id of [...n.inputs, ...n.outputs]) if (id >= 0 && g.values[id]) elems = Math.max(elems, numel(g.values[id].shape));
  return { flops: elems * rule.perElement, gemm: false };
}

export function countFlops(p: Program): FlopCount {
  const out: FlopCount = { total: 0, gemm: 0, elementwise: 0, byOp: {} };
  for (const n of p.graph.nodes) {
    const { flops, gemm } = nodeFlops(p.graph, n);
    if (gemm) out.gemm += flops;
    else out.elementwise += flops;
    out.byOp[n.op] = (out.byOp[n.op] ?? 0) + flops;
  }
  out.total = out.gemm + out.elementwise;
  return out;
}
