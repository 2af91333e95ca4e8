/**
 * Op rules, fused attention (issue 13): attention and attention_grad (see ops.ts for what
 * each field means). The multi-head `attention(heads, ...)` layer of the language lowers to
 * linear (in_proj) -> reshape / permute to heads -> `attention` -> permute / reshape ->
 * linear (out_proj); this op is the per-head core softmax(q k^T * scale) v. Its causal rule
 * is the one of masked_fill (tensor.ts).
 */
import type { OpDef, ShapeCtx } from '../ops.js';
import { CAUSAL_DOC } from './tensor.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;

/** q [N,H,T,D], k and v [N,H,S,D]: returns [N, H, T, S, D] (NaNs when malformed: shapes then fail to match) */
function qkv(c: ShapeCtx, base: number): [number, number, number, number, number] {
  const q = c.in(base), k = c.in(base + 1), v = c.in(base + 2);
  c.want(q.length === 4, `q must be [N,H,T,D], got ${fmt(q)}`);
  const [N, H, T, D] = q, S = k[2];
  c.want(k.length === 4 && k[0] === N && k[1] === H && k[3] === D, `k ${fmt(k)} does not match q ${fmt(q)} ([N,H,S,D])`);
  c.sameAs(base + 2, [N, H, S, D], 'v');
  c.want(v.length === 4, 'v must be 4-D');
  const sc = c.attrs.scale;
  c.want(typeof sc === 'number' && Number.isFinite(sc), `attr scale must be a finite number, got ${String(sc)}`);
  if (c.attrs.causal === true) c.want(S >= T, `causal attention needs S >= T (every query sees a key), got T ${T}, S ${S}`);
  return [N, H, T, S, D];
}

const attnFlops = (s: (k: number) => readonly number[], base: number, passes: number) => {
  const [N, H, T, D] = s(base), S = s(base + 1)[2];
  return 2 * passes * N * H * T * S * D;
};

export const ATTENTION_OPS = {
  attention: {
    inputs: ['q', 'k', 'v'],
    halfInputs: [0, 1, 2],
    outputs: ['o', 'lse'],
    attrs: { causal: 'bool (default false): mask ' + CAUSAL_DOC, scale: 'the score scale (the layer uses 1/sqrt(D))' },
    doc:
      'Scaled dot-product attention per (n, h): q [N,H,T,D], k, v [N,H,S,D] -> o [N,H,T,D], lse [N,H,T]. ' +
      's[t,u] = scale * q[t].k[u] (masked to -inf by the causal rule), p = softmax_u(s), o[t] = sum_u p[t,u] v[u]; ' +
      'lse[t] = log sum_u exp(s[t,u]) (saved for the backward). ' +
      'torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal, scale) with dropout 0 ' +
      '(its causal mask is the upper-left aligned one, which equals this rule when S = T).',
    category: 'forward',
    shape(c) {
      const [N, H, T, , D] = qkv(c, 0);
      return [[N, H, T, D], [N, H, T]];
    },
    vjp(c) {
      if (c.hasDy(1)) throw new Error('internal: autodiff: gradient reaches the saved logsumexp of attention');
      if (!(c.need(0) || c.need(1) || c.need(2))) return;
      const a = c.node.attrs;
      const outs = c.emitN('attention_grad', [c.dy(), c.x(0), c.x(1), c.x(2), c.y(0), c.y(1)], [c.x(0), c.x(1), c.x(2)], { causal: a.causal === true, scale: a.scale });
      for (let j = 0; j < 3; j++) if (c.need(j)) c.acc(j, outs[j]);
    },
    flops: { gemm: (s) => attnFlops(s, 0, 2) },
  },
  attention_grad: {
    inputs: ['do', 'q', 'k', 'v', 'o', 'lse'],
    halfInputs: [0, 1, 2, 3, 4],
    outputs: ['dq', 'dk', 'dv'],
    attrs: { causal: '', scale: '' },
    doc:
      'Backward of attention from its saved o and lse: p = exp(s - lse), dv = p^T do, dp = do v^T, ' +
      'delta[t] = sum_d do[t,d] o[t,d], ds = p * (dp - delta), dq = scale * ds k, dk = scale * ds^T q.',
    category: 'backward',
    shape(c) {
      const [N, H, T, S, D] = qkv(c, 1);
      c.sameAs(0, [N, H, T, D], 'do');
      c.sameAs(4, [N, H, T, D], 'o');
      c.sameAs(5, [N, H, T], 'lse');
      return [[N, H, T, D], [N, H, S, D], [N, H, S, D]];
    },
    flops: { gemm: (s) => attnFlops(s, 1, 5) },
  },
} satisfies Record<string, OpDef>;
