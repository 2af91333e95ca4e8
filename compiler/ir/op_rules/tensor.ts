/**
 * Op rules, tensor-algebra family (issue 13): permute, pad, broadcast_to, reduce (+ the max
 * gradient), masked_fill (with the causal mask), positions (see ops.ts for what each field
 * means). slice lives with concat in gather.ts; matmul in gemm_conv.ts. Shapes use
 * shapes.ts's broadcasting.
 */
import type { AttrValue } from '../graph.js';
import type { OpDef, ShapeCtx, VjpCtx } from '../ops.js';
import { broadcastShapes } from '../shapes.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;
const eq = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);
const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

/** perm is a permutation of 0..rank-1 */
export function isPermutation(perm: readonly number[], rank: number): boolean {
  return perm.length === rank && perm.every(isInt) && new Set(perm).size === rank && perm.every((p) => p >= 0 && p < rank);
}

/** the reduced axes: distinct, in range, increasing */
function axesOk(axes: readonly number[], rank: number): boolean {
  return axes.length >= 1 && axes.every((a, i) => isInt(a) && a >= 0 && a < rank && (i === 0 || a > axes[i - 1]));
}

/** the output shape of reduce over `axes` (size 1 there when keepdim, else dropped) */
export function reducedShape(x: readonly number[], axes: readonly number[], keepdim: boolean): number[] {
  return keepdim ? x.map((d, i) => (axes.includes(i) ? 1 : d)) : x.filter((_, i) => !axes.includes(i));
}

function reduceShape(c: ShapeCtx): (readonly number[])[] {
  const x = c.in(0), axes = c.shapeAttr('axes');
  c.want(axesOk(axes, x.length), `reduce axes ${fmt(axes)} must be distinct, increasing and within rank ${x.length}`);
  return [reducedShape(x, axes, c.attrs.keepdim === true)];
}

const REDUCE_FNS = ['sum', 'mean', 'max'] as const;

/** the causal mask of masked_fill / attention: key s is hidden from query t when s > t + (S - T) */
export const CAUSAL_DOC = 'over the last two dims [T, S]: element (t, s) is masked when s > t + (S - T) (query t sees keys 0..t+S-T; S = T gives the usual lower triangle)';

function maskedFillVjp(c: VjpCtx) {
  if (!c.need(0)) return;
  const a = c.node.attrs;
  const attrs: Record<string, AttrValue> = { value: 0, causal: a.causal === true, invert: a.invert === true };
  const g = c.emit('masked_fill', [c.dy(), c.x(1)], c.x(0), attrs, c.shape(c.y(0)));
  c.acc(0, c.unbroadcast(g, 0));
}

export const TENSOR_OPS = {
  permute: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { perm: 'a permutation of 0..rank-1' },
    doc: 'y.shape[i] = x.shape[perm[i]], y[j0, ..., jr] = x at index i[perm[k]] = jk (torch.permute; transpose(d0, d1) is the permutation that swaps two dims).',
    category: 'forward',
    shape(c) {
      const x = c.in(0), perm = c.shapeAttr('perm');
      c.want(isPermutation(perm, x.length), `perm ${fmt(perm)} is not a permutation of the ${x.length} dims of ${fmt(x)}`);
      return [perm.map((p) => x[p])];
    },
    vjp(c) {
      const perm = c.node.attrs.perm as number[], inv = new Array<number>(perm.length);
      perm.forEach((p, i) => { inv[p] = i; });
      if (c.need(0)) c.acc(0, c.emit('permute', [c.dy()], c.x(0), { perm: inv }));
    },
    flops: { perElement: 0 },
  },
  pad: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { pads: '[before0, after0, before1, after1, ...]: one pair per dim of x, in dim order (not F.pad\'s last-dim-first order), each >= 0', value: 'the fill (default 0)' },
    doc: 'Constant padding: y.shape[d] = before_d + x.shape[d] + after_d, y = value outside the copy of x (torch.nn.functional.pad, mode "constant", non-negative pads).',
    category: 'forward',
    shape(c) {
      const x = c.in(0), pads = c.shapeAttr('pads');
      c.want(pads.length === 2 * x.length && pads.every((p) => isInt(p) && p >= 0), `pads ${fmt(pads)} must be 2 non-negative integers per dim of ${fmt(x)}`);
      return [x.map((d, i) => d + (pads[2 * i] ?? 0) + (pads[2 * i + 1] ?? 0))];
    },
    vjp(c) {
      if (!c.need(0)) return;
      const pads = c.node.attrs.pads as number[], xs = c.shape(c.x(0));
      // one slice per padded dim, back to x's shape
      let g = c.dy();
      const cur = c.shape(c.y(0));
      xs.forEach((d, axis) => {
        if (pads[2 * axis] === 0 && pads[2 * axis + 1] === 0) return;
        cur[axis] = d;
        g = c.emit('slice', [g], c.x(0), { axis, start: pads[2 * axis], length: d }, [...cur]);
      });
      c.acc(0, g);
    },
    flops: { perElement: 0 },
  },
  broadcast_to: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { shape: 'target shape (x broadcasts to it: aligned at the right, size-1 dims stretch)' },
    doc: 'y = x expanded to shape (torch.broadcast_to / expand), materialised.',
    category: 'forward',
    shape(c) {
      const x = c.in(0), y = c.shapeAttr('shape'), b = broadcastShapes(x, y);
      c.want(b !== null && eq(b, y), `${fmt(x)} does not broadcast to ${fmt(y)}`);
      return [y];
    },
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('sum_to', [c.dy()], c.x(0), { shape: c.shape(c.x(0)) }));
    },
    flops: { perElement: 0 },
  },
  reduce: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { fn: REDUCE_FNS.join('|'), axes: 'increasing distinct axes to reduce', keepdim: 'bool (default false): keep the reduced dims with size 1' },
    doc:
      'sum / mean / max over axes (torch.sum / torch.mean / torch.amax(x, axes, keepdim)). ' +
      'max propagates NaN (a NaN in a group makes its max NaN, as torch).',
    category: 'forward',
    shape(c) {
      c.want((REDUCE_FNS as readonly string[]).includes(String(c.attrs.fn)), `unknown reduce fn '${String(c.attrs.fn)}'`);
      return reduceShape(c);
    },
    vjp(c) {
      if (!c.need(0)) return;
      const a = c.node.attrs, xs = c.shape(c.x(0)), axes = a.axes as number[], keep = a.keepdim === true;
      if (a.fn === 'max') {
        c.acc(0, c.emit('reduce_max_grad', [c.dy(), c.x(0)], c.x(0), { axes, keepdim: keep }));
        return;
      }
      let g = c.dy();
      if (a.fn === 'mean') {
        const count = axes.reduce((p, i) => p * xs[i], 1);
        g = c.emit('unary', [g], c.x(0), { fn: 'affine', scale: 1 / count, shift: 0 }, c.shape(g));
      }
      if (!keep) g = c.emit('reshape', [g], c.x(0), { shape: reducedShape(xs, axes, true) }, reducedShape(xs, axes, true));
      c.acc(0, c.emit('broadcast_to', [g], c.x(0), { shape: xs }));
    },
  },
  reduce_max_grad: {
    inputs: ['dy', 'x'],
    outputs: ['dx'],
    attrs: { axes: '', keepdim: '' },
    doc:
      'Gradient of reduce max: dx = 0 except, in each reduced group, at its FIRST maximal element (row-major order ' +
      'over the reduced axes; a NaN counts as the maximum), which gets dy: torch.max(x, dim) semantics. ' +
      '(torch.amax would split dy evenly among tied maxima; ties have measure zero for real data.)',
    category: 'backward',
    shape(c) {
      const [y] = reduceShape({ ...c, in: (k) => c.in(k === 0 ? 1 : k) });
      c.sameAs(0, y, 'dy');
      return [c.in(1)];
    },
  },
  masked_fill: {
    inputs: ['x', 'mask?'],
    outputs: ['y'],
    attrs: {
      value: 'the fill, any float including -inf',
      causal: 'bool (default false): also mask ' + CAUSAL_DOC,
      invert: 'bool (default false): mask where the mask input is zero instead',
    },
    doc:
      'y = masked ? value : x, masked = (mask present and (mask != 0) xor invert) or (causal and the causal rule). ' +
      'mask (i32 or f32) broadcasts with x; y has their broadcast shape (torch.masked_fill; ' +
      'where(m, a, b) = masked_fill(a, m, value 0, invert) + masked_fill(b, m, value 0)). The gradient reaches x only.',
    category: 'forward',
    shape(c) {
      const x = c.in(0);
      if (c.attrs.causal === true) c.want(x.length >= 2 && x[x.length - 1] >= x[x.length - 2], `causal masking needs [.., T, S] with S >= T, got ${fmt(x)}`);
      if (!c.has(1)) {
        c.want(c.attrs.causal === true, 'masked_fill needs a mask input or causal: true');
        return [x];
      }
      const y = broadcastShapes(x, c.in(1));
      c.want(y !== null, `mask ${fmt(c.in(1))} does not broadcast with ${fmt(x)}`);
      return [y ?? []];
    },
    vjp: maskedFillVjp,
  },
  positions: {
    inputs: ['ids'],
    outputs: ['pos'],
    attrs: {},
    doc: 'ids [N, T, ...] (any dtype, values unread) -> i32 [N, T] with pos[n, t] = t (the position index; no gradient).',
    category: 'forward',
    shape(c) {
      const x = c.in(0);
      c.want(x.length >= 2, `positions needs [N, T, ...], got ${fmt(x)}`);
      return [x.slice(0, 2)];
    },
    flops: { perElement: 0 },
  },
} satisfies Record<string, OpDef>;
