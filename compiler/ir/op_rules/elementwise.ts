/**
 * Op rules, element-wise family: unary / unary_grad / binary (formulas in scalar_fns.ts),
 * reshape, sum_to, dropout / dropout_grad (see ops.ts for what each field means).
 */
import type { OpDef, ShapeCtx } from '../ops.js';
import { BINARY_FNS, BINARY_FNS_TABLE, UNARY_FNS, UNARY_FNS_TABLE, isBinaryFn, isUnaryFn } from '../scalar_fns.js';
import { broadcastShapes } from '../shapes.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;
const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);
const eq = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);

/** the numeric attrs of the unary fns, each with the fns that read it and their defaults */
function unaryAttrDocs(): Record<string, string> {
  const uses = new Map<string, string[]>();
  for (const fn of UNARY_FNS) {
    for (const [name, dflt] of Object.entries(UNARY_FNS_TABLE[fn].attrs as Record<string, number>)) {
      uses.set(name, [...(uses.get(name) ?? []), `${fn} (default ${dflt})`]);
    }
  }
  return Object.fromEntries([...uses].map(([name, fns]) => [name, fns.join(', ')]));
}

/** the fn is in the table and each of its attrs, when given, is a number */
function checkUnaryAttrs(c: ShapeCtx): void {
  const fn = String(c.attrs.fn);
  c.want(isUnaryFn(fn), `unknown unary fn '${fn}'`);
  if (!isUnaryFn(fn)) return;
  for (const name of Object.keys(UNARY_FNS_TABLE[fn].attrs)) {
    c.want(c.attrs[name] === undefined || typeof c.attrs[name] === 'number', `attr '${name}' of ${fn} must be a number, got ${JSON.stringify(c.attrs[name])}`);
  }
}

function unaryFnOf(a: Readonly<Record<string, unknown>>) {
  const fn = String(a.fn);
  if (!isUnaryFn(fn)) throw new Error(`internal: unknown unary fn '${fn}'`);
  return UNARY_FNS_TABLE[fn];
}

export const ELEMENTWISE_OPS = {
  reshape: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { shape: 'output shape (same element count)' },
    doc: 'Same elements in the same row-major order, new shape. flatten lowers to this.',
    category: 'forward',
    shape(c) {
      const y = c.shapeAttr('shape');
      c.want(numel(c.in(0)) === numel(y), `${fmt(c.in(0))} -> ${fmt(y)} changes the element count`);
      return [y];
    },
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('reshape', [c.dy()], c.x(0), { shape: c.shape(c.x(0)) }));
    },
    flops: { perElement: 0 },
  },
  unary: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { fn: UNARY_FNS.join('|'), ...unaryAttrDocs() },
    doc: 'Element-wise y = f(x), f from compiler/ir/scalar_fns.ts: ' + UNARY_FNS.map((f) => `${f}: ${UNARY_FNS_TABLE[f].doc}`).join('; ') + '.',
    category: 'forward',
    shape(c) {
      checkUnaryAttrs(c);
      return [c.in(0)];
    },
    vjp(c) {
      // the fn and all its attrs: the gradient formula reads the same attrs
      if (c.need(0)) c.acc(0, c.emit('unary_grad', [c.dy(), c.x(0)], c.x(0), { ...c.node.attrs }));
    },
    elementwise: true,
    scalar: (a) => unaryFnOf(a).fwd,
  },
  unary_grad: {
    inputs: ['dy', 'x'],
    outputs: ['dx'],
    attrs: { fn: '', ...unaryAttrDocs() },
    doc: "dx = dy * f'(x) with x the forward input, f' as PyTorch's backward computes it (scalar_fns.ts `grad`, kinks included).",
    category: 'backward',
    shape(c) {
      checkUnaryAttrs(c);
      c.sameAs(1, c.in(0), 'second input');
      return [c.in(0)];
    },
    elementwise: true,
    scalar: (a) => unaryFnOf(a).grad,
  },
  binary: {
    inputs: ['a', 'b'],
    outputs: ['y'],
    attrs: { fn: BINARY_FNS.join('|') },
    doc: 'Element-wise with numpy/PyTorch broadcasting (shapes aligned at the right, size-1 dims stretch). y shape is the broadcast shape.',
    category: 'forward',
    shape(c) {
      c.want(isBinaryFn(String(c.attrs.fn)), `unknown binary fn '${String(c.attrs.fn)}'`);
      const y = broadcastShapes(c.in(0), c.in(1));
      c.want(y !== null, `shapes ${fmt(c.in(0))} and ${fmt(c.in(1))} do not broadcast`);
      return [y ?? []];
    },
    vjp(c) {
      const fn = c.node.attrs.fn;
      if (c.isSeed) {
        // a scalar loss = add(loss_a, loss_b): both receive the seed
        if (fn !== 'add') c.dy(); // reports that the loss is not a loss op
        if (c.need(0)) c.passSeed(0);
        if (c.need(1)) c.passSeed(1);
        return;
      }
      const dy = c.dy(), yShape = c.shape(c.y(0));
      if (fn === 'add' || fn === 'sub') {
        if (c.need(0)) c.acc(0, c.unbroadcast(dy, 0));
        if (c.need(1)) c.acc(1, c.unbroadcast(fn === 'add' ? dy : c.emit('unary', [dy], c.x(1), { fn: 'neg' }, yShape), 1));
      } else if (fn === 'mul') {
        if (c.need(0)) c.acc(0, c.unbroadcast(c.emit('binary', [dy, c.x(1)], c.x(0), { fn: 'mul' }, yShape), 0));
        if (c.need(1)) c.acc(1, c.unbroadcast(c.emit('binary', [dy, c.x(0)], c.x(1), { fn: 'mul' }, yShape), 1));
      } else {
        throw new Error(`internal: autodiff: no gradient rule for binary fn '${String(fn)}'`);
      }
    },
    elementwise: true,
    scalar(a) {
      const fn = String(a.fn);
      if (!isBinaryFn(fn)) throw new Error(`internal: unknown binary fn '${fn}'`);
      return BINARY_FNS_TABLE[fn].fwd;
    },
  },
  sum_to: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { shape: 'target shape' },
    doc:
      'Reduce-sum x to shape (the inverse of broadcasting: target aligned at the right, summing dims that were stretched ' +
      'or prepended). Also used for bias gradients: attrs.axes (optional number[]) sums exactly those axes instead, y shape = x shape without them.',
    category: 'backward',
    shape(c) {
      const x = c.in(0), y = c.shapeAttr('shape'), axes = c.attrs.axes;
      if (Array.isArray(axes)) c.want(eq(y, x.filter((_, i) => !axes.includes(i))), `summing axes [${axes}] of ${fmt(x)} does not give ${fmt(y)}`);
      else {
        const b = broadcastShapes(y, x);
        c.want(b !== null && eq(b, x), `${fmt(x)} cannot be summed to ${fmt(y)}`);
      }
      return [y];
    },
  },
  dropout: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { p: 'drop probability in [0,1)', stream: 'int, unique per dropout node in the model' },
    scalars: ['seed', 'counter'],
    doc:
      'Training only (eval programs contain no dropout node). keep(i) = philox_uniform(seed, counter, stream, i) >= p; ' +
      'y[i] = keep(i) ? x[i] / (1-p) : 0. philox_uniform is defined in compiler/ir/philox.ts: Philox4x32-10 with ' +
      'key = (seed, stream), counter = (i, counter, 0, 0); the first 32-bit output / 2^32.',
    category: 'forward',
    shape: (c) => [c.in(0)],
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('dropout_grad', [c.dy()], c.x(0), { p: c.node.attrs.p, stream: c.node.attrs.stream }));
    },
    flops: { perElement: 3 },
    elementwise: true,
    evalMode: 'identity',
  },
  dropout_grad: {
    inputs: ['dy'],
    outputs: ['dx'],
    attrs: { p: '', stream: '' },
    scalars: ['seed', 'counter'],
    doc: 'dx[i] = keep(i) ? dy[i]/(1-p) : 0 with the same mask as the forward dropout.',
    category: 'backward',
    shape: (c) => [c.in(0)],
    elementwise: true,
  },
} satisfies Record<string, OpDef>;
