/**
 * Fused scaled dot-product attention in float64 (the oracle for every backend's blocked /
 * fused kernels): attention and attention_qkv (o and the saved logsumexp), attention_grad and
 * attention_qkv_grad, exactly as compiler/ir/op_rules/attention.ts states. Plain two-pass softmax
 * over the whole row. Both forms run the same loops; op_rules' attnLayout says where each head's
 * rows of q, k, v (dq, dk, dv) and o (do) lie in their buffers (separate [N,H,T,D] tensors, or
 * packed [N,T,3C] / [N,T,C]).
 */
import { attnLayout, type AttnLayout, type HeadRows } from '../ir/op_rules/attention.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape } from './kernel.js';

function layoutOf(c: OpCtx): AttnLayout {
  const shapes = c.node.inputs.map((_, i) => inShape(c, i));
  const L = attnLayout(c.node.op, shapes, c.attrs);
  if (!Number.isFinite(L.scale)) fail(c, 'attr scale must be a finite number');
  if (L.causal && L.S < L.T) fail(c, `causal needs S >= T (T ${L.T}, S ${L.S})`);
  if (!Number.isInteger(L.D) || L.D < 1) fail(c, `malformed attention shapes ${shapes.map((s) => `[${s.join(',')}]`).join(' ')}`);
  return L;
}

/** [N,H,T,D] shape of separate operands, or the packed qkv / o shapes */
function checkShapes(c: OpCtx, L: AttnLayout, base: number): void {
  const { N, H, T, S, D } = L;
  if (L.packed) {
    expectShape(c, 'qkv', inShape(c, base), [N, T, 3 * H * D]);
    return;
  }
  expectShape(c, 'k', inShape(c, base + 1), [N, H, S, D]);
  expectShape(c, 'v', inShape(c, base + 2), [N, H, S, D]);
}

/** element offset of row t of head (n, h) */
const at = (r: HeadRows, n: number, h: number, t: number) => r.base + n * r.sn + h * r.sh + t * r.st;

/** row t of the scores of head (n, h) into s (length S); masked keys get -inf */
function scores(q: Float64Array, k: Float64Array, L: AttnLayout, n: number, h: number, t: number, s: Float64Array): void {
  const qo = at(L.q, n, h, t);
  for (let u = 0; u < L.S; u++) {
    if (L.causal && u > t + L.S - L.T) { s[u] = -Infinity; continue; }
    const ko = at(L.k, n, h, u);
    let acc = 0;
    for (let j = 0; j < L.D; j++) acc += q[qo + j] * k[ko + j];
    s[u] = acc * L.scale;
  }
}

function logsumexp(s: Float64Array): number {
  let m = -Infinity;
  for (const v of s) m = Math.max(m, v);
  let sum = 0;
  for (const v of s) sum += Math.exp(v - m);
  return m + Math.log(sum);
}

function forward(c: OpCtx): void {
  const L = layoutOf(c);
  checkShapes(c, L, 0);
  const q = input(c, 0), k = L.packed ? q : input(c, 1), v = L.packed ? q : input(c, 2);
  const { N, H, T, S, D } = L;
  expectShape(c, 'o', c.outShapes[0], L.packed ? [N, T, H * D] : [N, H, T, D]);
  expectShape(c, 'lse', c.outShapes[1], [N, H, T]);
  const [o, lse] = c.outputs, s = new Float64Array(S);
  for (let n = 0; n < N; n++)
    for (let h = 0; h < H; h++)
      for (let t = 0; t < T; t++) {
        scores(q, k, L, n, h, t, s);
        const l = logsumexp(s);
        lse[(n * H + h) * T + t] = l;
        const oo = at(L.o, n, h, t);
        for (let u = 0; u < S; u++) {
          const p = Math.exp(s[u] - l);
          if (p === 0) continue;
          const vo = at(L.v, n, h, u);
          for (let j = 0; j < D; j++) o[oo + j] += p * v[vo + j];
        }
      }
}

function backward(c: OpCtx): void {
  const L = layoutOf(c);
  checkShapes(c, L, 1);
  const { N, H, T, S, D } = L;
  const dO = input(c, 0), q = input(c, 1), k = L.packed ? q : input(c, 2), v = L.packed ? q : input(c, 3);
  const o = input(c, L.packed ? 2 : 4), lse = input(c, L.packed ? 3 : 5);
  const oShape = L.packed ? [N, T, H * D] : [N, H, T, D];
  expectShape(c, 'do', inShape(c, 0), oShape);
  expectShape(c, 'o', inShape(c, L.packed ? 2 : 4), oShape);
  expectShape(c, 'lse', inShape(c, L.packed ? 3 : 5), [N, H, T]);
  // packed: dq, dk, dv are the three parts of the one output
  const [dq, dk, dv] = L.packed ? [c.outputs[0], c.outputs[0], c.outputs[0]] : c.outputs;
  const s = new Float64Array(S);
  for (let n = 0; n < N; n++)
    for (let h = 0; h < H; h++)
      for (let t = 0; t < T; t++) {
        scores(q, k, L, n, h, t, s);
        const qo = at(L.q, n, h, t), oo = at(L.o, n, h, t);
        let delta = 0;
        for (let j = 0; j < D; j++) delta += dO[oo + j] * o[oo + j];
        for (let u = 0; u < S; u++) {
          const p = Math.exp(s[u] - lse[(n * H + h) * T + t]);
          if (p === 0) continue;
          const ko = at(L.k, n, h, u), vo = at(L.v, n, h, u);
          let dp = 0;
          for (let j = 0; j < D; j++) {
            dv[vo + j] += p * dO[oo + j];
            dp += dO[oo + j] * v[vo + j];
          }
          const ds = p * (dp - delta) * L.scale;
          for (let j = 0; j < D; j++) {
            dq[qo + j] += ds * k[ko + j];
            dk[ko + j] += ds * q[qo + j];
          }
        }
      }
}

export const attention: OpImpl = forward;
export const attention_qkv: OpImpl = forward;
export const attention_grad: OpImpl = backward;
export const attention_qkv_grad: OpImpl = backward;
