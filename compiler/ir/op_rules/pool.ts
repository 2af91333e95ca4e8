/**
 * Op rules, pooling family: maxpool2d, avgpool2d, global_avgpool and their gradients (see
 * ops.ts for what each field means). Shapes use shapes.ts's pool2dOutShape.
 */
import type { OpDef, ShapeCtx } from '../ops.js';
import { pool2dOutShape } from '../shapes.js';

/** checks x is 4-D; returns the pool output shape */
function poolShape(c: ShapeCtx, x: readonly number[]): number[] {
  c.want(x.length === 4, 'x must be 4-D');
  return pool2dOutShape(x, c.pairAttr('kernel'), c.pairAttr('stride'), c.pairAttr('padding'));
}

const windowAttrs = (a: Readonly<Record<string, unknown>>) => ({ kernel: a.kernel, stride: a.stride, padding: a.padding }) as Record<string, number[]>;

export const POOL_OPS = {
  maxpool2d: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { kernel: '[kh,kw]', stride: '[sh,sw]', padding: '[ph,pw] (-inf padding)' },
    doc: 'x [N,C,H,W] -> y [N,C,OH,OW], OH = floor((H + 2ph - kh)/sh) + 1. ceil_mode=false, dilation 1.',
    category: 'forward',
    shape: (c) => [poolShape(c, c.in(0))],
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('maxpool2d_grad', [c.dy(), c.x(0)], c.x(0), windowAttrs(c.node.attrs)));
    },
  },
  avgpool2d: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { kernel: '[kh,kw]', stride: '[sh,sw]', padding: '[ph,pw]' },
    doc: 'Like maxpool2d but the mean; padded zeros count in the divisor (count_include_pad=true, divisor kh*kw).',
    category: 'forward',
    shape: (c) => [poolShape(c, c.in(0))],
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('avgpool2d_grad', [c.dy()], c.x(0), { ...windowAttrs(c.node.attrs), x_shape: c.shape(c.x(0)) }));
    },
  },
  global_avgpool: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { relu_in: 'fused relu (fuse.ts): the mean of relu(x)' },
    doc: 'x [N,C,H,W] -> y [N,C,1,1], mean over H and W (torch AdaptiveAvgPool2d(1)).',
    category: 'forward',
    shape(c) {
      const x = c.in(0);
      c.want(x.length === 4, 'x must be 4-D');
      return [[x[0], x[1], 1, 1]];
    },
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('global_avgpool_grad', [c.dy()], c.x(0), { x_shape: c.shape(c.x(0)) }));
    },
  },
  maxpool2d_grad: {
    inputs: ['dy', 'x', 'mask?'],
    outputs: ['dx'],
    attrs: { kernel: '', stride: '', padding: '', relu_grad: 'fused relu-grad (fuse.ts): dx = mask > 0 ? dx : 0' },
    doc: 'Routes dy to the first maximum of each window (row-major scan order); overlapping windows add.',
    category: 'backward',
    shape(c) {
      c.sameAs(0, poolShape(c, c.in(1)), 'dy');
      return [c.in(1)];
    },
    // the fused 2x2 form reads each window of x (= mask) before it writes that window of dx
    inPlace: (n) => (n.attrs.relu_grad === true && n.inputs[2] === n.inputs[1] ? [1, 2] : []),
  },
  avgpool2d_grad: {
    inputs: ['dy'],
    outputs: ['dx'],
    attrs: { kernel: '', stride: '', padding: '', x_shape: '' },
    doc: 'dx[window] += dy / (kh*kw).',
    category: 'backward',
    shape(c) {
      const xs = c.shapeAttr('x_shape');
      c.sameAs(0, poolShape(c, xs), 'dy');
      return [xs];
    },
  },
  global_avgpool_grad: {
    inputs: ['dy', 'mask?'],
    outputs: ['dx'],
    attrs: { x_shape: '', relu_grad: 'fused relu-grad (fuse.ts): dx = mask > 0 ? dx : 0' },
    doc: 'dx[n,c,h,w] = dy[n,c,0,0] / (H*W).',
    category: 'backward',
    shape(c) {
      const xs = c.shapeAttr('x_shape');
      c.sameAs(0, [xs[0], xs[1], 1, 1], 'dy');
      return [xs];
    },
    // element-wise in the mask: dx[i] = mask[i] > 0 ? dy[plane] / HW : 0
    inPlace: (n) => (n.attrs.relu_grad === true ? [1] : []),
  },
} satisfies Record<string, OpDef>;
