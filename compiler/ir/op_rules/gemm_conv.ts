/**
 * Op rules, GEMM family: linear, matmul, conv2d and its two gradients (see ops.ts for what
 * each field means). Shapes use shapes.ts's conv2dOutShape (the one conv output-size formula).
 */
import type { OpDef, ShapeCtx } from '../ops.js';
import { type ConvGeometry, conv2dOutShape, matmulDims, windowOut } from '../shapes.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;

function geometry(c: ShapeCtx): ConvGeometry {
  return { stride: c.pairAttr('stride'), padding: c.pairAttr('padding'), dilation: c.pairAttr('dilation') };
}

/** checks x [N,C,H,W], weight [O,C/g,KH,KW] and groups; returns the conv2d output shape */
function convShape(c: ShapeCtx, x: readonly number[], w: readonly number[]): number[] {
  const g = c.attrs.groups as number;
  c.want(x.length === 4 && w.length === 4, 'x and weight must be 4-D');
  c.want(Number.isInteger(g) && g >= 1 && x[1] % g === 0 && w[0] % g === 0 && w[1] * g === x[1], `channels: x ${fmt(x)}, weight ${fmt(w)}, groups ${g}`);
  return conv2dOutShape(x, w, geometry(c));
}

/** 2 * N * O * OH * OW * (C/g) * KH * KW for x [N,C,H,W] and weight [O,C/g,KH,KW] */
export function convFlops(xs: readonly number[], ws: readonly number[], attrs: Readonly<Record<string, unknown>>): number {
  if (xs.length !== 4 || ws.length !== 4) return 0;
  const pr = (v: unknown, d: number): [number, number] => (Array.isArray(v) ? [v[0], v[1]] : typeof v === 'number' ? [v, v] : [d, d]);
  const [sh, sw] = pr(attrs.stride, 1), [ph, pw] = pr(attrs.padding, 0), [dh, dw] = pr(attrs.dilation, 1);
  const [N, , H, W] = xs, [O, Cg, KH, KW] = ws;
  return 2 * N * O * windowOut(H, KH, sh, ph, dh) * windowOut(W, KW, sw, pw, dw) * Cg * KH * KW;
}

const CONV_ATTRS = ['stride', 'padding', 'dilation', 'groups'] as const;

/** the fused epilogue attrs every GEMM-family op may carry (fuse.ts, checked by verify.ts) */
const EPILOGUE = { epilogue: 'fused unary fn (fuse.ts): the output is fn(result); its attrs as epilogue_<name>' };
/** fuse.ts rule 13 (linear, matmul) */
const PRE_OUT = { pre_out: 'with an epilogue (fuse.ts rule 13): the result before fn as an extra last output' };
/** fuse.ts rule 12 (matmul) */
const GRAD_FN = { grad_fn: "fused unary gradient (fuse.ts rule 12): the output is fn's gradient, at x (an extra last input), of the result; its attrs as grad_fn_<name>" };

/**
 * conv2d_grad_input (wrt = 'x': inputs dy, weight; attr x_shape) and conv2d_grad_weight
 * (wrt = 'weight': inputs dy, x; attr w_shape): the output has the shape the attr repeats,
 * and dy must be the conv2d output for x and weight. conv2d_grad_input may carry a fused relu-grad
 * (fuse.ts rule 2: `relu_grad: true` and the optional last input `mask`, applied in its store).
 */
function convGrad(wrt: 'x' | 'weight'): OpDef {
  const isX = wrt === 'x', attr = isX ? 'x_shape' : 'w_shape';
  const xw = (own: readonly number[], other: readonly number[]) => (isX ? [own, other] : [other, own]);
  return {
    inputs: isX ? ['dy', 'weight', 'mask?'] : ['dy', 'x'],
    halfInputs: [0, 1],
    outputs: [isX ? 'dx' : 'dw'],
    attrs: {
      stride: '', padding: '', dilation: '', groups: '', [attr]: `shape of ${wrt}`, ...EPILOGUE,
      ...(isX ? { relu_grad: 'fused relu-grad (fuse.ts): dx = mask > 0 ? dx : 0' } : {}),
    },
    doc: `Gradient of conv2d with respect to ${wrt}.`,
    category: 'backward',
    shape(c) {
      const own = c.shapeAttr(attr), [x, w] = xw(own, c.in(1));
      c.sameAs(0, convShape(c, x, w), 'dy');
      return [own];
    },
    flops: {
      gemm: (s, a) => {
        const [x, w] = xw(Array.isArray(a[attr]) ? (a[attr] as number[]) : [], s(1));
        return convFlops(x, w, a);
      },
    },
  };
}

export const GEMM_CONV_OPS = {
  linear: {
    inputs: ['x', 'weight', 'bias?'],
    // (the bias too: autocast rounds it to the operands' type, and cuBLASLt adds a bias of D's type)
    halfInputs: [0, 1, 2],
    outputs: ['y'],
    attrs: { ...EPILOGUE, ...PRE_OUT },
    doc: 'x [..., K], weight [N,K], bias [N] -> y [..., N] = x @ weight^T + bias over the last dim (torch.nn.functional.linear).',
    category: 'forward',
    shape(c) {
      const x = c.in(0), w = c.in(1);
      c.want(x.length >= 1 && w.length === 2 && x[x.length - 1] === w[1], `x ${fmt(x)} and weight ${fmt(w)} do not match ([..., K] and [N,K])`);
      if (c.has(2)) c.sameAs(2, [w[0]], 'bias');
      return [[...x.slice(0, -1), w[0]]];
    },
    vjp(c) {
      const dy = c.dy(), xs = c.shape(c.x(0)), [N, K] = c.shape(c.x(1));
      const M = xs.reduce((a, b) => a * b, 1) / K;
      if (c.need(0)) c.acc(0, c.emit('matmul', [dy, c.x(1)], c.x(0), { transA: false, transB: false }));
      if (c.need(1)) {
        // dW = dy^T x with the leading dims flattened into rows (reshapes are free views on every backend)
        const flat = xs.length > 2;
        const dy2 = flat ? c.emit('reshape', [dy], c.x(1), { shape: [M, N] }, [M, N]) : dy;
        const x2 = flat ? c.emit('reshape', [c.x(0)], c.x(1), { shape: [M, K] }, [M, K]) : c.x(0);
        c.acc(1, c.emit('matmul', [dy2, x2], c.x(1), { transA: true, transB: false }));
      }
      if (c.need(2)) c.acc(2, c.emit('sum_to', [dy], c.x(2), { shape: c.shape(c.x(2)), axes: xs.slice(0, -1).map((_, i) => i) }));
    },
    flops: { gemm: (s) => 2 * (s(0).reduce((a, b) => a * b, 1) / s(1)[1]) * s(1)[0] * s(1)[1] },
  },
  conv2d: {
    inputs: ['x', 'weight', 'bias?'],
    halfInputs: [0, 1],
    outputs: ['y'],
    attrs: { stride: '[sh,sw]', padding: '[ph,pw] (zeros)', dilation: '[dh,dw]', groups: 'int', ...EPILOGUE },
    doc:
      'x [N,C,H,W], weight [O,C/groups,KH,KW], bias [O] -> y [N,O,OH,OW], ' +
      'OH = floor((H + 2ph - dh*(KH-1) - 1)/sh) + 1 (same for OW). Cross-correlation as torch.nn.functional.conv2d.',
    category: 'forward',
    shape(c) {
      const y = convShape(c, c.in(0), c.in(1));
      if (c.has(2)) c.sameAs(2, [c.in(1)[0]], 'bias');
      return [y];
    },
    vjp(c) {
      const dy = c.dy(), a = c.node.attrs;
      const conv = Object.fromEntries(CONV_ATTRS.map((k) => [k, a[k]]));
      if (c.need(0)) c.acc(0, c.emit('conv2d_grad_input', [dy, c.x(1)], c.x(0), { ...conv, x_shape: c.shape(c.x(0)) }));
      if (c.need(1)) c.acc(1, c.emit('conv2d_grad_weight', [dy, c.x(0)], c.x(1), { ...conv, w_shape: c.shape(c.x(1)) }));
      if (c.need(2)) c.acc(2, c.emit('sum_to', [dy], c.x(2), { shape: c.shape(c.x(2)), axes: [0, 2, 3] }));
    },
    flops: { gemm: (s, a) => convFlops(s(0), s(1), a) },
  },
  matmul: {
    inputs: ['a', 'b'],
    halfInputs: [0, 1],
    outputs: ['y'],
    attrs: { transA: 'bool: op(a) swaps the last two dims of a', transB: 'bool: the same for b', ...EPILOGUE, ...PRE_OUT, ...GRAD_FN },
    doc:
      'a [..., M, K] (transA: [..., K, M]), b [..., K, N] (transB: [..., N, K]) -> y [..., M, N] = op(a) @ op(b), ' +
      'one product per batch index; the leading (batch) dims broadcast numpy-style (torch.matmul for rank >= 2, ' +
      'a rank-2 operand is shared by every batch). Rank >= 2 each. Linear backward and attention use it.',
    category: 'forward',
    shape(c) {
      const r = matmulDims(c.in(0), c.in(1), c.attrs.transA === true, c.attrs.transB === true);
      c.want(r !== null, `matmul: ${fmt(c.in(0))}${c.attrs.transA === true ? '^T' : ''} @ ${fmt(c.in(1))}${c.attrs.transB === true ? '^T' : ''}: inner dims or batch dims do not match`);
      return [r ? [...r.batch, r.M, r.N] : []];
    },
    vjp(c) {
      const dy = c.dy(), tA = c.node.attrs.transA === true, tB = c.node.attrs.transB === true;
      const a = c.x(0), b = c.x(1), ys = c.shape(c.y(0)), batch = ys.slice(0, -2);
      const as = c.shape(a), bs = c.shape(b);
      // y = op(a) op(b): d op(a) = dy op(b)^T, d op(b) = op(a)^T dy, transposed back when the flag is set
      if (c.need(0)) {
        const s = [...batch, as[as.length - 2], as[as.length - 1]];
        const g = tA ? c.emit('matmul', [b, dy], a, { transA: tB, transB: true }, s) : c.emit('matmul', [dy, b], a, { transA: false, transB: !tB }, s);
        c.acc(0, c.unbroadcast(g, 0));
      }
      if (c.need(1)) {
        const s = [...batch, bs[bs.length - 2], bs[bs.length - 1]];
        const g = tB ? c.emit('matmul', [dy, a], b, { transA: true, transB: tA }, s) : c.emit('matmul', [a, dy], b, { transA: !tA, transB: false }, s);
        c.acc(1, c.unbroadcast(g, 1));
      }
    },
    flops: {
      gemm: (s, at) => {
        const r = matmulDims(s(0), s(1), at.transA === true, at.transB === true);
        return r ? 2 * r.batch.reduce((x, y) => x * y, 1) * r.M * r.N * r.K : 0;
      },
    },
  },
  conv2d_grad_input: convGrad('x'),
  conv2d_grad_weight: convGrad('weight'),
} satisfies Record<string, OpDef>;
