/**
 * flops: the floating-point work of a Program, counted from its nodes' static shapes.
 *
 * Consumes: a Program (compiler/ir/graph.ts). Produces: { total, gemm, elementwise, byOp }.
 *  - GEMM-like ops count 2 flops per multiply-add: linear / matmul 2*M*N*K; conv2d,
 *    conv2d_grad_input and conv2d_grad_weight 2*N*O*OH*OW*(C/groups)*KH*KW each;
 *  - every other op is a rough count: a fixed number of flops per element it touches
 *    (the largest of its inputs and outputs), e.g. 1 for relu, ~10 for adam per parameter.
 * Used by `mpsc bench` for achieved GFLOP/s; the GEMM part is the one that matters.
 */
import { type Graph, type Node, type Program, numel } from './graph.js';

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

/** rough flops per touched element for the non-GEMM ops (default 1) */
const PER_ELEMENT: Record<string, number> = {
  softmax: 5, log_softmax: 5, softmax_grad: 3, log_softmax_grad: 3,
  cross_entropy: 5, cross_entropy_grad: 5, nll: 1, nll_grad: 1, mse: 3, mse_grad: 2,
  bce_with_logits: 6, bce_with_logits_grad: 5,
  batchnorm_train: 8, batchnorm_eval: 2, batchnorm_grad: 10, layernorm: 8, layernorm_grad: 10,
  dropout: 3, dropout_grad: 1, grad_norm: 2,
  sgd_update: 5, adam_update: 12, grad_accumulate: 1, reshape: 0, zero: 0, slice: 0, concat: 0,
  embedding: 0, embedding_grad: 1, maxpool2d: 1, maxpool2d_grad: 1,
};

function pair(v: unknown, d: [number, number]): [number, number] {
  if (typeof v === 'number') return [v, v];
  if (Array.isArray(v) && v.length === 2) return [Number(v[0]), Number(v[1])];
  return d;
}

/** 2 * N * O * OH * OW * (C/g) * KH * KW from x shape [N,C,H,W] and weight shape [O,C/g,KH,KW] */
export function convFlops(node: Node, xs: readonly number[], ws: readonly number[]): number {
  if (xs.length !== 4 || ws.length !== 4) return 0;
  const [N, , H, W] = xs;
  const [O, Cg, KH, KW] = ws;
  const [sh, sw] = pair(node.attrs.stride, [1, 1]);
  const [ph, pw] = pair(node.attrs.padding, [0, 0]);
  const [dh, dw] = pair(node.attrs.dilation, [1, 1]);
  const OH = Math.floor((H + 2 * ph - dh * (KH - 1) - 1) / sh) + 1;
  const OW = Math.floor((W + 2 * pw - dw * (KW - 1) - 1) / sw) + 1;
  return 2 * N * O * OH * OW * Cg * KH * KW;
}

/** flops of one node; `gemm` says whether it is GEMM-like */
export function nodeFlops(g: Graph, n: Node): { flops: number; gemm: boolean } {
  const shape = (id: number) => (id >= 0 && g.values[id] ? g.values[id].shape : []);
  switch (n.op) {
    case 'linear': {
      const ws = shape(n.inputs[1]);
      const [N, K] = ws;
      const M = numel(shape(n.inputs[0])) / K;
      return { flops: 2 * M * N * K, gemm: true };
    }
    case 'matmul': {
      const a = shape(n.inputs[0]), b = shape(n.inputs[1]);
      const tA = n.attrs.transA === true, tB = n.attrs.transB === true;
      const M = tA ? a[1] : a[0], K = tA ? a[0] : a[1], N = tB ? b[0] : b[1];
      return { flops: 2 * M * N * K, gemm: true };
    }
    case 'conv2d':
      return { flops: convFlops(n, shape(n.inputs[0]), shape(n.inputs[1])), gemm: true };
    case 'conv2d_grad_input':
      return { flops: convFlops(n, (n.attrs.x_shape as number[]) ?? [], shape(n.inputs[1])), gemm: true };
    case 'conv2d_grad_weight':
      return { flops: convFlops(n, shape(n.inputs[1]), (n.attrs.w_shape as number[]) ?? []), gemm: true };
    default: {
      let elems = 0;
      for (const id of [...n.inputs, ...n.outputs]) if (id >= 0) elems = Math.max(elems, numel(shape(id)));
      return { flops: elems * (PER_ELEMENT[n.op] ?? 1), gemm: false };
    }
  }
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
