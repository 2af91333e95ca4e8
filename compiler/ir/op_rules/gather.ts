/**
 * Op rules, gather / layout family: embedding and its gradient, concat and slice (concat's
 * gradient; its own is pad) (see ops.ts for what each field means).
 */
import type { OpDef } from '../ops.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;

export const GATHER_OPS = {
  embedding: {
    inputs: ['ids', 'weight'],
    outputs: ['y'],
    attrs: {},
    doc: 'ids i32 [...], weight [V,D] -> y [..., D] = weight[ids]. Ids are validated on the host (0 <= id < V).',
    category: 'forward',
    shape(c) {
      c.want(c.dtype(0) === 'i32', 'ids must be i32');
      return [[...c.in(0), c.in(1)[1]]];
    },
    vjp(c) {
      if (c.need(1)) c.acc(1, c.emit('embedding_grad', [c.dy(), c.x(0)], c.x(1), { w_shape: c.shape(c.x(1)) }));
    },
    flops: { perElement: 0 },
  },
  concat: {
    inputs: ['x0', 'x1', '...'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis' },
    doc: 'Variadic (2 or more inputs); all dims but axis equal.',
    category: 'forward',
    shape(c) {
      const axis = c.attrs.axis as number, first = c.in(0);
      let total = 0;
      for (let k = 0; k < c.count; k++) {
        const s = c.in(k);
        c.want(s.length === first.length && s.every((d, i) => i === axis || d === first[i]), `input ${fmt(s)} does not match ${fmt(first)} outside axis ${axis}`);
        total += s[axis] ?? 0;
      }
      return [first.map((d, i) => (i === axis ? total : d))];
    },
    vjp(c) {
      const axis = c.node.attrs.axis as number;
      let start = 0;
      c.node.inputs.forEach((id, k) => {
        const length = c.shape(id)[axis];
        if (c.need(k)) c.acc(k, c.emit('slice', [c.dy()], id, { axis, start, length }));
        start += length;
      });
    },
    flops: { perElement: 0 },
  },
  embedding_grad: {
    inputs: ['dy', 'ids'],
    outputs: ['dweight'],
    attrs: { w_shape: '[V,D]' },
    doc: 'dweight = zeros; dweight[ids[j]] += dy[j] for every position j.',
    category: 'backward',
    shape(c) {
      c.want(c.dtype(1) === 'i32', 'ids must be i32');
      return [c.shapeAttr('w_shape')];
    },
  },
  slice: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis', start: '>= 0', length: '>= 1' },
    doc: 'y = x[..., start:start+length, ...] along axis (torch.narrow; split / chunk lower to slices; concat backward).',
    category: 'forward',
    shape(c) {
      const x = c.in(0), axis = c.attrs.axis as number, start = c.attrs.start as number, len = c.attrs.length as number;
      c.want(start >= 0 && start + len <= (x[axis] ?? 0), `slice ${start}+${len} out of range of ${fmt(x)} on axis ${axis}`);
      return [x.map((d, i) => (i === axis ? len : d))];
    },
    vjp(c) {
      // dy placed at [start, start + length) along axis: a pad, or with the other slices of x one concat
      c.accPart(0, c.dy(), c.node.attrs.axis as number, c.node.attrs.start as number);
    },
    flops: { perElement: 0 },
  },
} satisfies Record<string, OpDef>;
