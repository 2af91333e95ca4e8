/**
 * Op rules, fused attention (issue 13): attention, attention_grad and their packed forms
 * attention_qkv, attention_qkv_grad (see ops.ts for what each field means). The per-head core is
 * softmax(q k^T * scale) v with the causal rule of masked_fill (tensor.ts). `attention` takes q, k,
 * v as [N,H,T,D] tensors; `attention_qkv` reads them in place from one in_proj output [N,T,3C]
 * (= [N,T,3,H,D], nn.MultiheadAttention's q, k, v order) and writes o as [N,T,C] (= [N,T,H,D]),
 * its gradient one d(qkv) [N,T,3C]: the multi-head `attention(heads, ...)` layer (dropout 0) lowers
 * to linear (in_proj) -> attention_qkv -> linear (out_proj), with no head split / merge copies.
 * `attnLayout` says where each operand's rows lie in its buffer: every backend's kernels are one
 * kernel per op pair, indexed through it (a layout is strides, not a second kernel).
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

/** the rows of one operand's heads in its buffer: element (n, h, t, d) at base + n*sn + h*sh + t*st + d */
export interface HeadRows { base: number; sn: number; sh: number; st: number }

/**
 * The geometry and operand layouts of an attention-family node: N samples x H heads of T queries and
 * S keys of width D; q, k, v (and dq, dk, dv) and o (and do) as HeadRows in their buffers; lse is
 * always [N,H,T] (contiguous). Shapes are the node's input shapes (checked by the shape rules).
 */
export interface AttnLayout {
  N: number; H: number; T: number; S: number; D: number;
  causal: boolean; scale: number;
  /** q, k, v (and dq, dk, dv) in one buffer: the packed [N,T,3C] layout */
  packed: boolean;
  q: HeadRows; k: HeadRows; v: HeadRows; o: HeadRows;
}

export function attnLayout(op: string, inShapes: readonly (readonly number[])[], attrs: Readonly<Record<string, unknown>>): AttnLayout {
  const causal = attrs.causal === true, scale = Number(attrs.scale);
  const base = op === 'attention_grad' || op === 'attention_qkv_grad' ? 1 : 0;
  if (op === 'attention_qkv' || op === 'attention_qkv_grad') {
    const [N, T, C3] = inShapes[base], H = Number(attrs.heads), C = C3 / 3, D = C / H;
    const row = (b: number): HeadRows => ({ base: b, sn: T * C3, sh: D, st: C3 });
    return { N, H, T, S: T, D, causal, scale, packed: true, q: row(0), k: row(C), v: row(2 * C), o: { base: 0, sn: T * C, sh: D, st: C } };
  }
  if (op !== 'attention' && op !== 'attention_grad') throw new Error(`internal: attnLayout of op '${op}'`);
  const [N, H, T, D] = inShapes[base], S = inShapes[base + 1][2];
  const heads = (L: number): HeadRows => ({ base: 0, sn: H * L * D, sh: L * D, st: D });
  return { N, H, T, S, D, causal, scale, packed: false, q: heads(T), k: heads(S), v: heads(S), o: heads(T) };
}

/** qkv [N,T,3C] with attr heads: returns [N, H, T, D] (NaNs when malformed: shapes then fail to match) */
function packed(c: ShapeCtx, k: number): [number, number, number, number] {
  const x = c.in(k), H = c.attrs.heads;
  c.want(typeof H === 'number' && Number.isInteger(H) && H >= 1, `attr heads must be a positive integer, got ${String(H)}`);
  c.want(x.length === 3 && x[2] % 3 === 0 && x[2] / 3 % Number(H) === 0, `qkv must be [N,T,3C] with C divisible by heads ${String(H)}, got ${fmt(x)}`);
  const sc = c.attrs.scale;
  c.want(typeof sc === 'number' && Number.isFinite(sc), `attr scale must be a finite number, got ${String(sc)}`);
  const [N, T, C3] = x;
  return [N, Number(H), T, C3 / 3 / Number(H)];
}

const PACKED_DOC =
  'qkv [N,T,3C] is the in_proj output viewed as [N,T,3,H,D] (D = C / heads; q, k, v in that order, ' +
  "nn.MultiheadAttention's layout); head h of q at channels [h*D, h*D + D), of k at C + h*D, of v at 2C + h*D. ";

/** qkv [N,T,3C]: passes x T x T x C multiply-adds x 2 (N H T T D each) */
const packedFlops = (x: readonly number[], passes: number) => 2 * passes * x[0] * x[1] * x[1] * (x[2] / 3);

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
  attention_qkv: {
    inputs: ['qkv'],
    halfInputs: [0],
    outputs: ['o', 'lse'],
    attrs: { heads: 'number of heads H (3C divides into 3 x H heads of D = C / H features)', causal: 'bool (default false): mask ' + CAUSAL_DOC, scale: 'the score scale (the layer uses 1/sqrt(D))' },
    doc:
      'Multi-head self-attention read in place from a packed projection: ' + PACKED_DOC +
      '-> o [N,T,C] (= [N,T,H,D]: head h at channels [h*D, h*D + D), the out_proj input), lse [N,H,T]. ' +
      'Per (n, h) exactly `attention` of that head\'s q, k, v [T,D] (S = T).',
    category: 'forward',
    shape(c) {
      const [N, H, T, D] = packed(c, 0);
      return [[N, T, H * D], [N, H, T]];
    },
    vjp(c) {
      if (c.hasDy(1)) throw new Error('internal: autodiff: gradient reaches the saved logsumexp of attention_qkv');
      if (!c.need(0)) return;
      const a = c.node.attrs;
      c.acc(0, c.emit('attention_qkv_grad', [c.dy(), c.x(0), c.y(0), c.y(1)], c.x(0), { heads: a.heads, causal: a.causal === true, scale: a.scale }));
    },
    flops: { gemm: (s) => packedFlops(s(0), 2) },
  },
  attention_qkv_grad: {
    inputs: ['do', 'qkv', 'o', 'lse'],
    halfInputs: [0, 1, 2],
    outputs: ['dqkv'],
    attrs: { heads: '', causal: '', scale: '' },
    doc:
      'Backward of attention_qkv from its saved o and lse: attention_grad per (n, h), with do and o [N,T,C] and ' +
      'dq, dk, dv written in place into dqkv [N,T,3C] (the layout of qkv).',
    category: 'backward',
    shape(c) {
      const [N, H, T, D] = packed(c, 1);
      c.sameAs(0, [N, T, H * D], 'do');
      c.sameAs(2, [N, T, H * D], 'o');
      c.sameAs(3, [N, H, T], 'lse');
      return [[N, T, 3 * H * D]];
    },
    flops: { gemm: (s) => packedFlops(s(1), 5) },
  },
} satisfies Record<string, OpDef>;
