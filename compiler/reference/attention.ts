/**
 * Fused scaled dot-product attention in float64 (the oracle for every backend's blocked /
 * fused kernels): attention (o and the saved logsumexp) and attention_grad, exactly as
 * compiler/ir/op_rules/attention.ts states. Plain two-pass softmax over the whole row.
 */
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr } from './kernel.js';

function dims(c: OpCtx, base: number): { N: number; H: number; T: number; S: number; D: number; scale: number; causal: boolean } {
  const qs = inShape(c, base), ks = inShape(c, base + 1);
  if (qs.length !== 4 || ks.length !== 4) fail(c, 'q and k must be [N,H,T,D] / [N,H,S,D]');
  const [N, H, T, D] = qs, S = ks[2];
  expectShape(c, 'k', ks, [N, H, S, D]);
  expectShape(c, 'v', inShape(c, base + 2), [N, H, S, D]);
  const causal = c.attrs.causal === true;
  if (causal && S < T) fail(c, `causal needs S >= T (T ${T}, S ${S})`);
  return { N, H, T, S, D, scale: numAttr(c, 'scale'), causal };
}

/** row t of the scores of head (n, h) into s (length S); masked keys get -inf */
function scores(q: Float64Array, k: Float64Array, qOff: number, kOff: number, t: number, d: ReturnType<typeof dims>, s: Float64Array): void {
  for (let u = 0; u < d.S; u++) {
    if (d.causal && u > t + d.S - d.T) { s[u] = -Infinity; continue; }
    let acc = 0;
    for (let j = 0; j < d.D; j++) acc += q[qOff + t * d.D + j] * k[kOff + u * d.D + j];
    s[u] = acc * d.scale;
  }
}

function logsumexp(s: Float64Array): number {
  let m = -Infinity;
  for (const v of s) m = Math.max(m, v);
  let sum = 0;
  for (const v of s) sum += Math.exp(v - m);
  return m + Math.log(sum);
}

export const attention: OpImpl = (c: OpCtx) => {
  const q = input(c, 0), k = input(c, 1), v = input(c, 2), d = dims(c, 0);
  expectShape(c, 'o', c.outShapes[0], [d.N, d.H, d.T, d.D]);
  expectShape(c, 'lse', c.outShapes[1], [d.N, d.H, d.T]);
  const [o, lse] = c.outputs, s = new Float64Array(d.S);
  for (let nh = 0; nh < d.N * d.H; nh++) {
    const qOff = nh * d.T * d.D, kOff = nh * d.S * d.D;
    for (let t = 0; t < d.T; t++) {
      scores(q, k, qOff, kOff, t, d, s);
      const l = logsumexp(s);
      lse[nh * d.T + t] = l;
      for (let u = 0; u < d.S; u++) {
        const p = Math.exp(s[u] - l);
        if (p === 0) continue;
        for (let j = 0; j < d.D; j++) o[qOff + t * d.D + j] += p * v[kOff + u * d.D + j];
      }
    }
  }
};

export const attention_grad: OpImpl = (c: OpCtx) => {
  const dO = input(c, 0), q = input(c, 1), k = input(c, 2), v = input(c, 3), o = input(c, 4), lse = input(c, 5), d = dims(c, 1);
  expectShape(c, 'do', inShape(c, 0), [d.N, d.H, d.T, d.D]);
  expectShape(c, 'o', inShape(c, 4), [d.N, d.H, d.T, d.D]);
  expectShape(c, 'lse', inShape(c, 5), [d.N, d.H, d.T]);
  const [dq, dk, dv] = c.outputs, s = new Float64Array(d.S);
  for (let nh = 0; nh < d.N * d.H; nh++) {
    const qOff = nh * d.T * d.D, kOff = nh * d.S * d.D;
    for (let t = 0; t < d.T; t++) {
      scores(q, k, qOff, kOff, t, d, s);
      let delta = 0;
      for (let j = 0; j < d.D; j++) delta += dO[qOff + t * d.D + j] * o[qOff + t * d.D + j];
      for (let u = 0; u < d.S; u++) {
        const p = Math.exp(s[u] - lse[nh * d.T + t]);
        if (p === 0) continue;
        let dp = 0;
        for (let j = 0; j < d.D; j++) {
          dv[kOff + u * d.D + j] += p * dO[qOff + t * d.D + j];
          dp += dO[qOff + t * d.D + j] * v[kOff + u * d.D + j];
        }
        const ds = p * (dp - delta) * d.scale;
        for (let j = 0; j < d.D; j++) {
          dq[qOff + t * d.D + j] += ds * k[kOff + u * d.D + j];
          dk[kOff + u * d.D + j] += ds * q[qOff + t * d.D + j];
        }
      }
    }
  }
};
