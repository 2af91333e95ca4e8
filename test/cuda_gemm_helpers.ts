// Shared by the cuBLASLt tests (cuda_cublaslt.test.ts, cuda_tf32x3.test.ts): a one-GEMM graph and its lowering
// context, deterministic data, a column-major
// BLAS interpreter of a LibraryGemm call description (what cublasLtMatmul computes, in float64) and the
// row-major product a linear / matmul node means, to check one against the other.
import type { DType, Graph, Node, Value } from '../compiler/ir/graph.js';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import type { LibraryGemm, LowerCtx } from '../compiler/kernels/kernel_types.js';

/** a lowering context in the CUDA dialect */
export function ctxOf(): LowerCtx {
  let k = 0;
  return { next: () => `k${k++}`, helpers: new Set(), d: CUDA };
}

/** a graph of one GEMM node over fresh values of these shapes (the last one is the output) */
export function graphOf(op: string, shapes: number[][], attrs: Node['attrs'] = {}, dtype: DType = 'f32'): { g: Graph; n: Node } {
  const values: Value[] = shapes.map((s, i) => ({ id: i, name: `v${i}`, dtype: i < 2 ? dtype : 'f32', shape: s, kind: i === shapes.length - 1 ? 'activation' : 'input' }));
  const n: Node = { id: 0, op, inputs: shapes.slice(0, -1).map((_, i) => i), outputs: [shapes.length - 1], attrs };
  return { g: { values, nodes: [n] }, n };
}

/** deterministic values in [-1, 1) */
export function data(count: number, seed: number): Float64Array {
  const out = new Float64Array(count);
  let s = seed >>> 0;
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 31 - 1;
  }
  return out;
}

/** D = op(A) op(B) (+ bias per row), column-major, strided batches: what cublasLtMatmul computes for the description */
export function blas(L: LibraryGemm, A: Float64Array, B: Float64Array, bias: Float64Array | null): Float64Array {
  const D = new Float64Array(L.batch * L.strideD || L.m * L.n);
  // op(X)[i][j] of a column-major rows x cols matrix with leading dimension ld
  const at = (X: Float64Array, base: number, ld: number, t: boolean, i: number, j: number) => (t ? X[base + j + i * ld] : X[base + i + j * ld]);
  for (let g = 0; g < L.batch; g++)
    for (let i = 0; i < L.m; i++)
      for (let j = 0; j < L.n; j++) {
        let acc = 0;
        for (let k = 0; k < L.k; k++) acc += at(A, g * L.strideA, L.lda, L.transA, i, k) * at(B, g * L.strideB, L.ldb, L.transB, k, j);
        D[g * L.strideD + i + j * L.ldd] = acc + (L.epilogue === 'bias' ? bias![i] : 0);
      }
  return D;
}

/** BGRADB's bias gradient of a LibraryGemm (one product): op(B) summed over k, per column j of D */
export function blasBgradB(L: LibraryGemm, B: Float64Array): Float64Array {
  const s = new Float64Array(L.n);
  for (let j = 0; j < L.n; j++) for (let k = 0; k < L.k; k++) s[j] += L.transB ? B[j + k * L.ldb] : B[k + j * L.ldb];
  return s;
}

/** the row-major product the node means: y[g] = op(a[g]) op(b[g]) with leading-dim broadcast (shape rules of matmul) */
export function rowMajor(as: number[], bs: number[], ta: boolean, tb: boolean, a: Float64Array, b: Float64Array): Float64Array {
  const [M, K] = ta ? [as.at(-1)!, as.at(-2)!] : [as.at(-2)!, as.at(-1)!];
  const N = tb ? bs.at(-2)! : bs.at(-1)!;
  const ab = as.slice(0, -2), bb = bs.slice(0, -2);
  const G = Math.max(ab.reduce((x, y) => x * y, 1), bb.reduce((x, y) => x * y, 1));
  const ga = ab.reduce((x, y) => x * y, 1) === 1 ? 0 : 1, gb = bb.reduce((x, y) => x * y, 1) === 1 ? 0 : 1;
  const y = new Float64Array(G * M * N);
  for (let g = 0; g < G; g++)
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) {
        let acc = 0;
        for (let k = 0; k < K; k++) {
          const av = a[g * ga * M * K + (ta ? k * M + m : m * K + k)];
          const bv = b[g * gb * K * N + (tb ? n * K + k : k * N + n)];
          acc += av * bv;
        }
        y[g * M * N + m * N + n] = acc;
      }
  return y;
}

export const maxDiff = (x: Float64Array, y: Float64Array) => x.reduce((m, v, i) => Math.max(m, Math.abs(v - y[i])), 0);
