/**
 * autodiff: for small hand-built forward graphs covering every forward op and loss,
 * the gradients computed by the train graph in the float64 reference interpreter
 * match central finite differences of the loss (forward graph only) with respect to
 * every parameter element (relative error < 1e-6).
 */
import { describe, expect, it } from 'vitest';
import { GraphBuilder, type Graph } from '../compiler/ir/graph.js';
import { autodiff } from '../compiler/ir/autodiff.js';
import { bindBatch } from '../compiler/ir/bind_batch.js';
import { BATCH } from '../compiler/model.js';
import { OPS, OP_NAMES } from '../compiler/ir/ops.js';
import { GRAD_CHECKED_OPS, gradCheck } from './ir_helpers.js';

function params(g: Graph): string[] {
  return g.values.filter((v) => v.kind === 'param').map((v) => v.name).sort();
}

describe('autodiff: finite-difference gradient checks (float64)', () => {
  it('MLP: linear, relu, linear, cross_entropy with label smoothing (odd sizes, accuracy metric ignored)', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [BATCH, 7], 'input');
    const y = b.value('label', 'i32', [BATCH], 'input');
    const w1 = b.value('fc1.weight', 'f32', [6, 7], 'param');
    const b1 = b.value('fc1.bias', 'f32', [6], 'param');
    const w2 = b.value('fc2.weight', 'f32', [4, 6], 'param');
    const b2 = b.value('fc2.bias', 'f32', [4], 'param');
    const [h] = b.emit('linear', [x, w1, b1], [{ name: 'fc1.out', shape: [BATCH, 6] }]);
    const [a] = b.emit('unary', [h], [{ name: 'relu.out', shape: [BATCH, 6] }], { fn: 'relu' });
    const [z] = b.emit('linear', [a, w2, b2], [{ name: 'fc2.out', shape: [BATCH, 4] }]);
    const [loss] = b.emit('cross_entropy', [z, y], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0.1 });
    b.emit('accuracy', [z, y], [{ name: 'acc', shape: [], kind: 'output' }]);
    const g = bindBatch(b.graph, 5);
    expect(gradCheck({ graph: g, loss, ints: { [y]: 4 } })).toEqual(params(g));
    // no gradients for inputs or labels
    const ad = autodiff(g, loss);
    expect(ad.graph.values.filter((v) => v.kind === 'grad').map((v) => v.name)).not.toContain('d_x');
    expect(ad.grads.map((p) => ad.graph.values[p.grad].name).sort()).toEqual(['fc1.bias.grad', 'fc1.weight.grad', 'fc2.bias.grad', 'fc2.weight.grad']);
    // the first layer's input gradient is not computed (x is an input)
    const matmulsOnX = ad.graph.nodes.filter((n) => n.op === 'matmul' && n.inputs.includes(w1));
    expect(matmulsOnX).toEqual([]);
  });

  it('conv + pools: conv2d stride 2 / padding, maxpool, grouped dilated conv, avgpool with padding, global_avgpool, flatten, mse', () => {
    const b = new GraphBuilder();
    const x = b.value('image', 'f32', [2, 4, 9, 7], 'input');
    const t = b.value('target', 'f32', [2, 3], 'input');
    const w1 = b.value('c1.weight', 'f32', [6, 4, 3, 3], 'param');
    const b1 = b.value('c1.bias', 'f32', [6], 'param');
    const [c1] = b.emit('conv2d', [x, w1, b1], [{ name: 'c1.out', shape: [2, 6, 5, 4] }], { stride: [2, 2], padding: [1, 1], dilation: [1, 1], groups: 1 });
    const [p1] = b.emit('maxpool2d', [c1], [{ name: 'pool.out', shape: [2, 6, 4, 3] }], { kernel: [2, 2], stride: [1, 1], padding: [0, 0] });
    // groups 3, dilation [2,1], kernel 2x3, padding [1,1]: OH = (4+2-2*1-1)/1+1 = 4, OW = (3+2-2-1)+1 = 3
    const w2 = b.value('c2.weight', 'f32', [6, 2, 2, 3], 'param');
    const [c2] = b.emit('conv2d', [p1, w2, -1], [{ name: 'c2.out', shape: [2, 6, 4, 3] }], { stride: [1, 1], padding: [1, 1], dilation: [2, 1], groups: 3 });
    const [r2] = b.emit('unary', [c2], [{ name: 'act', shape: [2, 6, 4, 3] }], { fn: 'tanh' });
    // avgpool 3x2 stride 2 padding 1: OH = (4+2-3)/2+1 = 2, OW = (3+2-2)/2+1 = 2
    const [a2] = b.emit('avgpool2d', [r2], [{ name: 'avg.out', shape: [2, 6, 2, 2] }], { kernel: [3, 2], stride: [2, 2], padding: [1, 1] });
    const [gp] = b.emit('global_avgpool', [a2], [{ name: 'gap.out', shape: [2, 6, 1, 1] }]);
    const [fl] = b.emit('reshape', [gp], [{ name: 'flat', shape: [2, 6] }], { shape: [2, 6] });
    const w3 = b.value('fc.weight', 'f32', [3, 6], 'param');
    const b3 = b.value('fc.bias', 'f32', [3], 'param');
    const [o] = b.emit('linear', [fl, w3, b3], [{ name: 'fc.out', shape: [2, 3] }]);
    const [loss] = b.emit('mse', [o, t], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(gradCheck({ graph: b.graph, loss })).toEqual(params(b.graph));
  });

  it('conv2d with groups 2, stride [2,1], padding [1,0], dilation [1,2], non-square kernel, odd sizes', () => {
    const b = new GraphBuilder();
    const x = b.value('image', 'f32', [3, 4, 7, 9], 'input');
    const lab = b.value('label', 'i32', [3], 'input');
    const w = b.value('c.weight', 'f32', [6, 2, 3, 2], 'param');
    const bias = b.value('c.bias', 'f32', [6], 'param');
    // OH = (7+2-1*(3-1)-1)/2+1 = 4, OW = (9+0-2*(2-1)-1)/1+1 = 7
    const [c] = b.emit('conv2d', [x, w, bias], [{ name: 'c.out', shape: [3, 6, 4, 7] }], { stride: [2, 1], padding: [1, 0], dilation: [1, 2], groups: 2 });
    const [f] = b.emit('reshape', [c], [{ name: 'flat', shape: [3, 168] }], { shape: [3, 168] });
    const wf = b.value('fc.weight', 'f32', [5, 168], 'param');
    const [z] = b.emit('linear', [f, wf, -1], [{ name: 'fc.out', shape: [3, 5] }]);
    const [loss] = b.emit('cross_entropy', [z, lab], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
    expect(gradCheck({ graph: b.graph, loss, ints: { [lab]: 5 } })).toEqual(params(b.graph));
  });

  it('residual: a value used twice and a weight shared by two layers accumulate their gradients', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [4, 5], 'input');
    const lab = b.value('label', 'i32', [4], 'input');
    const w = b.value('shared.weight', 'f32', [5, 5], 'param');
    const w2 = b.value('fc2.weight', 'f32', [5, 5], 'param');
    const bias = b.value('fc2.bias', 'f32', [5], 'param');
    const [h] = b.emit('linear', [x, w, -1], [{ name: 'h', shape: [4, 5] }]);
    const [a] = b.emit('unary', [h], [{ name: 'a', shape: [4, 5] }], { fn: 'gelu' });
    const [u] = b.emit('linear', [a, w2, bias], [{ name: 'u', shape: [4, 5] }]);
    const [s] = b.emit('binary', [h, u], [{ name: 'res', shape: [4, 5] }], { fn: 'add' }); // h used twice
    const [v] = b.emit('linear', [s, w, -1], [{ name: 'v', shape: [4, 5] }]); // shared weight used twice
    const [lp] = b.emit('log_softmax', [v], [{ name: 'logp', shape: [4, 5] }], { axis: 1 });
    const [loss] = b.emit('nll', [lp, lab], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(gradCheck({ graph: b.graph, loss, ints: { [lab]: 5 } })).toEqual(params(b.graph));
    const ad = autodiff(b.graph, loss);
    // the shared weight's gradient is a sum of two contributions
    const gw = ad.grads.find((p) => p.param === w)!;
    const sumNode = ad.graph.nodes.find((n) => n.outputs.includes(gw.grad))!;
    expect(sumNode.op).toBe('binary');
    expect(sumNode.attrs.fn).toBe('add');
    expect(ad.graph.values[gw.grad].name).toBe('shared.weight.grad');
  });

  it('batchnorm (training mode, 4-D and 2-D) with leaky_relu', () => {
    const b = new GraphBuilder();
    const x = b.value('image', 'f32', [BATCH, 2, 5, 3], 'input');
    const lab = b.value('label', 'i32', [BATCH], 'input');
    const w = b.value('c.weight', 'f32', [3, 2, 3, 3], 'param');
    const [c] = b.emit('conv2d', [x, w, -1], [{ name: 'c.out', shape: [BATCH, 3, 5, 3] }], { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 });
    const bw = b.value('bn.weight', 'f32', [3], 'param');
    const bb = b.value('bn.bias', 'f32', [3], 'param');
    const rm = b.value('bn.running_mean', 'f32', [3], 'state');
    const rv = b.value('bn.running_var', 'f32', [3], 'state');
    const [y] = b.emit('batchnorm_train', [c, bw, bb, rm, rv], [{ name: 'bn.out', shape: [BATCH, 3, 5, 3] }, { name: 'bn.mean', shape: [3] }, { name: 'bn.invstd', shape: [3] }], { eps: 1e-5, momentum: 0.1 });
    const [a] = b.emit('unary', [y], [{ name: 'act', shape: [BATCH, 3, 5, 3] }], { fn: 'leaky_relu', alpha: 0.2 });
    const [f] = b.emit('reshape', [a], [{ name: 'flat', shape: [BATCH, 45] }], { shape: [BATCH, 45] });
    const fw = b.value('fc.weight', 'f32', [4, 45], 'param');
    const [z] = b.emit('linear', [f, fw, -1], [{ name: 'fc.out', shape: [BATCH, 4] }]);
    const b2w = b.value('bn2.weight', 'f32', [4], 'param');
    const b2b = b.value('bn2.bias', 'f32', [4], 'param');
    const rm2 = b.value('bn2.running_mean', 'f32', [4], 'state');
    const rv2 = b.value('bn2.running_var', 'f32', [4], 'state');
    const [z2] = b.emit('batchnorm_train', [z, b2w, b2b, rm2, rv2], [{ name: 'bn2.out', shape: [BATCH, 4] }, { name: 'bn2.mean', shape: [4] }, { name: 'bn2.invstd', shape: [4] }], { eps: 1e-5, momentum: 0.1 });
    const [loss] = b.emit('cross_entropy', [z2, lab], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
    const g = bindBatch(b.graph, 3);
    expect(gradCheck({ graph: g, loss, ints: { [lab]: 4 } })).toEqual(params(g));
  });

  it('embedding (repeated ids) + layernorm on [N,T,D] + flatten + linear', () => {
    const b = new GraphBuilder();
    const ids = b.value('tokens', 'i32', [3, 4], 'input');
    const lab = b.value('label', 'i32', [3], 'input');
    const e = b.value('emb.weight', 'f32', [5, 6], 'param');
    const [em] = b.emit('embedding', [ids, e], [{ name: 'emb.out', shape: [3, 4, 6] }]);
    const lw = b.value('ln.weight', 'f32', [6], 'param');
    const lb = b.value('ln.bias', 'f32', [6], 'param');
    const [ln] = b.emit('layernorm', [em, lw, lb], [{ name: 'ln.out', shape: [3, 4, 6] }, { name: 'ln.mean', shape: [3, 4] }, { name: 'ln.rstd', shape: [3, 4] }], { eps: 1e-5 });
    const [f] = b.emit('reshape', [ln], [{ name: 'flat', shape: [3, 24] }], { shape: [3, 24] });
    const fw = b.value('fc.weight', 'f32', [3, 24], 'param');
    const fb = b.value('fc.bias', 'f32', [3], 'param');
    const [z] = b.emit('linear', [f, fw, fb], [{ name: 'fc.out', shape: [3, 3] }]);
    const [loss] = b.emit('cross_entropy', [z, lab], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0.2 });
    expect(gradCheck({ graph: b.graph, loss, ints: { [ids]: 5, [lab]: 3 } })).toEqual(params(b.graph));
  });

  it('concat + broadcasting add/sub/mul + sigmoid/neg + bce_with_logits', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [4, 3], 'input');
    const t = b.value('target', 'f32', [4, 7], 'input');
    const w1 = b.value('a.weight', 'f32', [4, 3], 'param');
    const w2 = b.value('b.weight', 'f32', [3, 3], 'param');
    const sc = b.value('scale', 'f32', [7], 'param');
    const sh = b.value('shift', 'f32', [4, 1], 'param');
    const one = b.value('one', 'f32', [1, 1], 'param');
    const [a] = b.emit('linear', [x, w1, -1], [{ name: 'a', shape: [4, 4] }]);
    const [c] = b.emit('linear', [x, w2, -1], [{ name: 'b', shape: [4, 3] }]);
    const [cat] = b.emit('concat', [a, c], [{ name: 'cat', shape: [4, 7] }], { axis: 1 });
    const [m] = b.emit('binary', [cat, sc], [{ name: 'm', shape: [4, 7] }], { fn: 'mul' });
    const [s] = b.emit('binary', [sh, m], [{ name: 's', shape: [4, 7] }], { fn: 'sub' });
    const [sg] = b.emit('unary', [s], [{ name: 'sig', shape: [4, 7] }], { fn: 'sigmoid' });
    const [n] = b.emit('unary', [cat], [{ name: 'neg', shape: [4, 7] }], { fn: 'neg' });
    const [u] = b.emit('binary', [sg, n], [{ name: 'u', shape: [4, 7] }], { fn: 'add' });
    const [v] = b.emit('binary', [u, one], [{ name: 'v', shape: [4, 7] }], { fn: 'mul' });
    const [loss] = b.emit('bce_with_logits', [v, t], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(gradCheck({ graph: b.graph, loss, unit: [t] })).toEqual(params(b.graph));
  });

  it('concat along axis 0 and 3 inputs; add of same-shape operands', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 3], 'input');
    const t = b.value('target', 'f32', [5, 3], 'input');
    const p1 = b.value('p1', 'f32', [2, 3], 'param');
    const p2 = b.value('p2', 'f32', [1, 3], 'param');
    const [s] = b.emit('binary', [x, p1], [{ name: 's', shape: [2, 3] }], { fn: 'add' });
    const [cat] = b.emit('concat', [s, p2, s], [{ name: 'cat', shape: [5, 3] }], { axis: 0 });
    const [loss] = b.emit('mse', [cat, t], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(gradCheck({ graph: b.graph, loss })).toEqual(['p1', 'p2']);
  });

  it('slice gradients: slices tiling their input along one axis (in any order) are one concat; a gap, an overlap or a second reader keeps pads and adds', () => {
    /** x [2,6,3] (a param, through a tanh) read by slices along axis 1 at these [start, length), each weighted, plus `extra` */
    const run = (ranges: [number, number][], extra = false) => {
      const b = new GraphBuilder();
      const x = b.value('x', 'f32', [2, 6, 3], 'param');
      const [h] = b.emit('unary', [x], [{ name: 'h', shape: [2, 6, 3] }], { fn: 'tanh' });
      let acc = -1;
      ranges.forEach(([start, length], i) => {
        const [sl] = b.emit('slice', [h], [{ name: `s${i}`, shape: [2, length, 3] }], { axis: 1, start, length });
        const [r] = b.emit('reduce', [sl], [{ name: `r${i}`, shape: [2, 1, 3] }], { fn: 'sum', axes: [1], keepdim: true });
        const [w] = b.emit('unary', [r], [{ name: `w${i}`, shape: [2, 1, 3] }], { fn: 'affine', scale: i + 1.5, shift: 0 });
        acc = acc < 0 ? w : b.emit('binary', [acc, w], [{ name: `a${i}`, shape: [2, 1, 3] }], { fn: 'add' })[0];
      });
      if (extra) {
        const [e] = b.emit('reduce', [h], [{ name: 'e', shape: [2, 1, 3] }], { fn: 'mean', axes: [1], keepdim: true });
        acc = b.emit('binary', [acc, e], [{ name: 'ae', shape: [2, 1, 3] }], { fn: 'add' })[0];
      }
      const t = b.value('target', 'f32', [2, 1, 3], 'input');
      const [loss] = b.emit('mse', [acc, t], [{ name: 'loss', shape: [], kind: 'output' }]);
      expect(gradCheck({ graph: b.graph, loss })).toEqual(['x']);
      const back = autodiff(b.graph, loss).graph.nodes.slice(b.graph.nodes.length);
      const count = (op: string) => back.filter((n) => n.op === op && (op !== 'binary' || n.attrs.fn === 'add')).length;
      return { concat: count('concat'), pad: count('pad'), add: count('binary'), cat: back.find((n) => n.op === 'concat') };
    };
    // q, k, v of unequal lengths, read in the order k, v, q: one concat in order, no pads
    const qkv = run([[2, 1], [3, 3], [0, 2]]);
    expect([qkv.concat, qkv.pad]).toEqual([1, 0]);
    expect(qkv.cat!.attrs).toEqual({ axis: 1 });
    expect(qkv.cat!.inputs).toHaveLength(3);
    // one slice covering the whole axis: its gradient is the input's, nothing added
    expect(run([[0, 6]])).toMatchObject({ concat: 0, pad: 0 });
    // a gap (rows 4..5 unread): each part padded, then added
    expect(run([[0, 2], [2, 2]])).toMatchObject({ concat: 0, pad: 2 });
    // an overlap (rows 2..3 read twice)
    expect(run([[0, 4], [2, 4]])).toMatchObject({ concat: 0, pad: 2 });
    // tiling slices plus another reader of the same value: the concat, then one add with the other contribution
    const mixed = run([[0, 3], [3, 3]], true);
    expect([mixed.concat, mixed.pad]).toEqual([1, 0]);
  });

  it('dropout (same seed/counter in backward) + softmax + mse', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [BATCH, 6], 'input');
    const t = b.value('target', 'f32', [BATCH, 3], 'input');
    const w1 = b.value('fc1.weight', 'f32', [8, 6], 'param');
    const w2 = b.value('fc2.weight', 'f32', [3, 8], 'param');
    const [h] = b.emit('linear', [x, w1, -1], [{ name: 'h', shape: [BATCH, 8] }]);
    const [d] = b.emit('dropout', [h], [{ name: 'drop', shape: [BATCH, 8] }], { p: 0.4, stream: 0 });
    const [a] = b.emit('unary', [d], [{ name: 'a', shape: [BATCH, 8] }], { fn: 'tanh' });
    const [z] = b.emit('linear', [a, w2, -1], [{ name: 'z', shape: [BATCH, 3] }]);
    const [sm] = b.emit('softmax', [z], [{ name: 'prob', shape: [BATCH, 3] }], { axis: 1 });
    const [loss] = b.emit('mse', [sm, t], [{ name: 'loss', shape: [], kind: 'output' }]);
    const g = bindBatch(b.graph, 5);
    expect(gradCheck({ graph: g, loss })).toEqual(params(g));
    const ad = autodiff(g, loss);
    const dg = ad.graph.nodes.find((n) => n.op === 'dropout_grad')!;
    expect(dg.attrs).toEqual({ p: 0.4, stream: 0 });
  });

  for (const lossOp of ['cross_entropy', 'nll', 'mse', 'bce_with_logits'] as const) {
    it(`loss ${lossOp} on a non-square linear output`, () => {
      const b = new GraphBuilder();
      const x = b.value('x', 'f32', [3, 5], 'input');
      const intLabel = lossOp === 'cross_entropy' || lossOp === 'nll';
      const t = b.value('target', intLabel ? 'i32' : 'f32', intLabel ? [3] : [3, 4], 'input');
      const w = b.value('fc.weight', 'f32', [4, 5], 'param');
      const bias = b.value('fc.bias', 'f32', [4], 'param');
      let [z] = b.emit('linear', [x, w, bias], [{ name: 'z', shape: [3, 4] }]);
      if (lossOp === 'nll') [z] = b.emit('log_softmax', [z], [{ name: 'logp', shape: [3, 4] }], { axis: 1 });
      const attrs: Record<string, number> = lossOp === 'cross_entropy' ? { label_smoothing: 0.3 } : {};
      const [loss] = b.emit(lossOp, [z, t], [{ name: 'loss', shape: [], kind: 'output' }], attrs);
      expect(gradCheck({ graph: b.graph, loss, ints: { [t]: 4 }, unit: [t] })).toEqual(['fc.bias', 'fc.weight']);
    });
  }

  it('mse whose target also depends on a parameter; a parameter that does not reach the loss gets no gradient', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [3, 2], 'input');
    const w = b.value('p.weight', 'f32', [2, 2], 'param');
    const q = b.value('q.weight', 'f32', [2, 2], 'param');
    const unused = b.value('unused.weight', 'f32', [2, 2], 'param');
    const [pp] = b.emit('linear', [x, w, -1], [{ name: 'pred', shape: [3, 2] }]);
    const [tt] = b.emit('linear', [x, q, -1], [{ name: 'tgt', shape: [3, 2] }]);
    b.emit('linear', [x, unused, -1], [{ name: 'side', shape: [3, 2] }]);
    const [loss] = b.emit('mse', [pp, tt], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(gradCheck({ graph: b.graph, loss })).toEqual(['p.weight', 'q.weight']);
  });

  it('maxpool with padding and overlapping windows; softmax / log_softmax over a middle axis of a 3-D tensor', () => {
    const b = new GraphBuilder();
    const x = b.value('image', 'f32', [2, 3, 7, 6], 'input');
    const lab = b.value('label', 'i32', [2], 'input');
    const w = b.value('c.weight', 'f32', [4, 3, 2, 2], 'param');
    const [c] = b.emit('conv2d', [x, w, -1], [{ name: 'c.out', shape: [2, 4, 6, 5] }], { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 });
    // kernel 3, stride 2, padding 1: OH = (6+2-3)/2+1 = 3, OW = (5+2-3)/2+1 = 3
    const [p] = b.emit('maxpool2d', [c], [{ name: 'pool', shape: [2, 4, 3, 3] }], { kernel: [3, 3], stride: [2, 2], padding: [1, 1] });
    const [r] = b.emit('reshape', [p], [{ name: 'r', shape: [2, 4, 9] }], { shape: [2, 4, 9] });
    const [sm] = b.emit('softmax', [r], [{ name: 'sm', shape: [2, 4, 9] }], { axis: 1 });
    const [ls] = b.emit('log_softmax', [sm], [{ name: 'ls', shape: [2, 4, 9] }], { axis: 1 });
    const [f] = b.emit('reshape', [ls], [{ name: 'flat', shape: [2, 36] }], { shape: [2, 36] });
    const fw = b.value('fc.weight', 'f32', [3, 36], 'param');
    const [z] = b.emit('linear', [f, fw, -1], [{ name: 'z', shape: [2, 3] }]);
    const [loss] = b.emit('cross_entropy', [z, lab], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
    expect(gradCheck({ graph: b.graph, loss, ints: { [lab]: 3 } })).toEqual(['c.weight', 'fc.weight']);
  });

  it('a value used as both operands of one node (x*x, x+x)', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [3, 4], 'input');
    const t = b.value('t', 'f32', [3, 2], 'input');
    const w = b.value('w', 'f32', [2, 4], 'param');
    const [h] = b.emit('linear', [x, w, -1], [{ name: 'h', shape: [3, 2] }]);
    const [sq] = b.emit('binary', [h, h], [{ name: 'sq', shape: [3, 2] }], { fn: 'mul' });
    const [dbl] = b.emit('binary', [sq, sq], [{ name: 'dbl', shape: [3, 2] }], { fn: 'add' });
    const [loss] = b.emit('mse', [dbl, t], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(gradCheck({ graph: b.graph, loss })).toEqual(['w']);
  });

  it('a scalar loss that is the sum of two losses', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [3, 2], 'input');
    const t = b.value('t', 'f32', [3, 2], 'input');
    const w = b.value('w', 'f32', [2, 2], 'param');
    const [p] = b.emit('linear', [x, w, -1], [{ name: 'pred', shape: [3, 2] }]);
    const [l1] = b.emit('mse', [p, t], [{ name: 'l1', shape: [] }]);
    const [l2] = b.emit('bce_with_logits', [p, t], [{ name: 'l2', shape: [] }]);
    const [loss] = b.emit('binary', [l1, l2], [{ name: 'loss', shape: [], kind: 'output' }], { fn: 'add' });
    expect(gradCheck({ graph: b.graph, loss, unit: [t] })).toEqual(['w']);
  });

  it('transformer block: embeddings + positions, layernorm, linear on [N,T,C], heads by reshape / permute / slice, fused causal attention, residual, layernorm without affine, tied-free head, cross_entropy over [N,T,V] with ignore_index', () => {
    const b = new GraphBuilder();
    const N = 2, T = 5, C = 8, H = 2, D = 4, V = 7;
    const tok = b.value('tokens', 'i32', [N, T], 'input');
    const tgt = b.value('targets', 'i32', [N, T], 'input');
    const te = b.value('tok.weight', 'f32', [V, C], 'param');
    const pe = b.value('pos.weight', 'f32', [T, C], 'param');
    const [e1] = b.emit('embedding', [tok, te], [{ name: 'tok.out', shape: [N, T, C] }]);
    const [pos] = b.emit('positions', [tok], [{ name: 'pos.ids', shape: [N, T], dtype: 'i32' }]);
    const [e2] = b.emit('embedding', [pos, pe], [{ name: 'pos.out', shape: [N, T, C] }]);
    const [h0] = b.emit('binary', [e1, e2], [{ name: 'h0', shape: [N, T, C] }], { fn: 'add' });
    const lw = b.value('ln1.weight', 'f32', [C], 'param');
    const lb = b.value('ln1.bias', 'f32', [C], 'param');
    const [ln] = b.emit('layernorm', [h0, lw, lb], [{ name: 'ln1.out', shape: [N, T, C] }, { name: 'ln1.mean', shape: [N, T] }, { name: 'ln1.rstd', shape: [N, T] }], { eps: 1e-5 });
    const wi = b.value('attn.in_proj_weight', 'f32', [3 * C, C], 'param');
    const bi = b.value('attn.in_proj_bias', 'f32', [3 * C], 'param');
    const [qkv] = b.emit('linear', [ln, wi, bi], [{ name: 'qkv', shape: [N, T, 3 * C] }]);
    const [r5] = b.emit('reshape', [qkv], [{ name: 'qkv5', shape: [N, T, 3, H, D] }], { shape: [N, T, 3, H, D] });
    const [pm] = b.emit('permute', [r5], [{ name: 'qkvp', shape: [3, N, H, T, D] }], { perm: [2, 0, 3, 1, 4] });
    const parts = [0, 1, 2].map((i) => {
      const [sl] = b.emit('slice', [pm], [{ name: `s${i}`, shape: [1, N, H, T, D] }], { axis: 0, start: i, length: 1 });
      return b.emit('reshape', [sl], [{ name: `h${i}`, shape: [N, H, T, D] }], { shape: [N, H, T, D] })[0];
    });
    const [o] = b.emit('attention', parts, [{ name: 'att.o', shape: [N, H, T, D] }, { name: 'att.lse', shape: [N, H, T] }], { causal: true, scale: 1 / Math.sqrt(D) });
    const [op] = b.emit('permute', [o], [{ name: 'att.t', shape: [N, T, H, D] }], { perm: [0, 2, 1, 3] });
    const [om] = b.emit('reshape', [op], [{ name: 'att.m', shape: [N, T, C] }], { shape: [N, T, C] });
    const wo = b.value('attn.out_proj.weight', 'f32', [C, C], 'param');
    const [ao] = b.emit('linear', [om, wo, -1], [{ name: 'attn.out', shape: [N, T, C] }]);
    const [h1] = b.emit('binary', [h0, ao], [{ name: 'h1', shape: [N, T, C] }], { fn: 'add' });
    const [lf] = b.emit('layernorm', [h1, -1, -1], [{ name: 'ln_f.out', shape: [N, T, C] }, { name: 'ln_f.mean', shape: [N, T] }, { name: 'ln_f.rstd', shape: [N, T] }], { eps: 1e-5 });
    const wh = b.value('head.weight', 'f32', [V, C], 'param');
    const [logits] = b.emit('linear', [lf, wh, -1], [{ name: 'logits', shape: [N, T, V] }]);
    const [loss] = b.emit('cross_entropy', [logits, tgt], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0, ignore_index: 3 });
    b.emit('accuracy', [logits, tgt], [{ name: 'acc', shape: [], kind: 'output' }], { ignore_index: 3 });
    expect(gradCheck({ graph: b.graph, loss, ints: { [tok]: V, [tgt]: V } })).toEqual(params(b.graph));
  });

  it('packed attention: attention_qkv reads q, k, v in place from one [N,T,3C] projection (causal and not), one d(qkv) [N,T,3C]', () => {
    for (const causal of [true, false]) {
      const b = new GraphBuilder();
      const N = 2, T = 5, H = 2, D = 3, C = H * D;
      const x = b.value('x', 'f32', [N, T, 4], 'input');
      const t = b.value('t', 'f32', [N, T, C], 'input');
      const w = b.value('in_proj_weight', 'f32', [3 * C, 4], 'param');
      const [qkv] = b.emit('linear', [x, w, -1], [{ name: 'qkv', shape: [N, T, 3 * C] }]);
      const [o] = b.emit('attention_qkv', [qkv], [{ name: 'o', shape: [N, T, C] }, { name: 'lse', shape: [N, H, T] }], { heads: H, causal, scale: 1 / Math.sqrt(D) });
      const [loss] = b.emit('mse', [o, t], [{ name: 'loss', shape: [], kind: 'output' }]);
      expect(gradCheck({ graph: b.graph, loss, unit: [t] })).toEqual(['in_proj_weight']);
    }
  });

  it('hand-written attention and tensor algebra: batched matmul (transB, broadcast batch), affine, causal masked_fill -inf, softmax, where via masked_fill, reduce sum/mean/max, pad, broadcast_to, div, exp/log/sqrt/rsqrt/abs/pow, nll over [N,T,C]', () => {
    const b = new GraphBuilder();
    const N = 2, H = 2, T = 4, D = 3;
    const q = b.value('q', 'f32', [N, H, T, D], 'param');
    const k = b.value('k', 'f32', [N, H, T, D], 'param');
    const v = b.value('v', 'f32', [H, T, D], 'param'); // broadcast over N
    const [sc] = b.emit('matmul', [q, k], [{ name: 'scores', shape: [N, H, T, T] }], { transA: false, transB: true });
    const [ss] = b.emit('unary', [sc], [{ name: 'scaled', shape: [N, H, T, T] }], { fn: 'affine', scale: 0.5, shift: 0 });
    const [mf] = b.emit('masked_fill', [ss, -1], [{ name: 'masked', shape: [N, H, T, T] }], { value: -Infinity, causal: true });
    const [pr] = b.emit('softmax', [mf], [{ name: 'probs', shape: [N, H, T, T] }], { axis: 3 });
    const [av] = b.emit('matmul', [pr, v], [{ name: 'av', shape: [N, H, T, D] }], { transA: false, transB: false });
    // where(mask, av, alt) = masked_fill(av, mask, 0, invert) + masked_fill(alt, mask, 0)
    const mask = b.value('mask', 'i32', [T, 1], 'input');
    const alt = b.value('alt', 'f32', [N, H, T, D], 'param');
    const [wa] = b.emit('masked_fill', [av, mask], [{ name: 'wa', shape: [N, H, T, D] }], { value: 0, invert: true });
    const [wb] = b.emit('masked_fill', [alt, mask], [{ name: 'wb', shape: [N, H, T, D] }], { value: 0 });
    const [wh] = b.emit('binary', [wa, wb], [{ name: 'where', shape: [N, H, T, D] }], { fn: 'add' });
    const [ex] = b.emit('unary', [wh], [{ name: 'ex', shape: [N, H, T, D] }], { fn: 'exp' });
    const [sm] = b.emit('reduce', [ex], [{ name: 'sum', shape: [N, 1, T, 1] }], { fn: 'sum', axes: [1, 3], keepdim: true });
    const [dv] = b.emit('binary', [ex, sm], [{ name: 'div', shape: [N, H, T, D] }], { fn: 'div' });
    const [lg] = b.emit('unary', [dv], [{ name: 'log', shape: [N, H, T, D] }], { fn: 'log' });
    const [sq] = b.emit('unary', [ex], [{ name: 'sqrt', shape: [N, H, T, D] }], { fn: 'sqrt' });
    const [ab] = b.emit('unary', [wh], [{ name: 'abs', shape: [N, H, T, D] }], { fn: 'abs' });
    const [ab1] = b.emit('unary', [ab], [{ name: 'abs1', shape: [N, H, T, D] }], { fn: 'affine', scale: 1, shift: 0.5 });
    const [rs] = b.emit('unary', [ab1], [{ name: 'rsqrt', shape: [N, H, T, D] }], { fn: 'rsqrt' });
    const [pw] = b.emit('unary', [ab1], [{ name: 'pow', shape: [N, H, T, D] }], { fn: 'pow', p: 1.5 });
    const [s1] = b.emit('binary', [lg, sq], [{ name: 's1', shape: [N, H, T, D] }], { fn: 'add' });
    const [s2] = b.emit('binary', [rs, pw], [{ name: 's2', shape: [N, H, T, D] }], { fn: 'sub' });
    const [s3] = b.emit('binary', [s1, s2], [{ name: 's3', shape: [N, H, T, D] }], { fn: 'mul' });
    const [mx] = b.emit('reduce', [s3], [{ name: 'max', shape: [N, T, D] }], { fn: 'max', axes: [1], keepdim: false });
    const [mn] = b.emit('reduce', [s3], [{ name: 'mean', shape: [N, T] }], { fn: 'mean', axes: [1, 3], keepdim: false });
    const [mb] = b.emit('broadcast_to', [b.emit('reshape', [mn], [{ name: 'mn3', shape: [N, T, 1] }], { shape: [N, T, 1] })[0]], [{ name: 'mb', shape: [N, T, D] }], { shape: [N, T, D] });
    const [cb] = b.emit('binary', [mx, mb], [{ name: 'cb', shape: [N, T, D] }], { fn: 'add' });
    const [pd] = b.emit('pad', [cb], [{ name: 'pd', shape: [N, T, D + 3] }], { pads: [0, 0, 0, 0, 1, 2], value: 0.25 });
    const [lsm] = b.emit('log_softmax', [pd], [{ name: 'logp', shape: [N, T, D + 3] }], { axis: 2 });
    const lab = b.value('label', 'i32', [N, T], 'input');
    const [loss] = b.emit('nll', [lsm, lab], [{ name: 'loss', shape: [], kind: 'output' }], {});
    expect(gradCheck({ graph: b.graph, loss, ints: { [lab]: D + 3, [mask]: 2 } })).toEqual(['alt', 'k', 'q', 'v']);
  });

  // last in the file: every gradient rule of the op catalogue ran in a check above
  it('covers every op with a gradient rule', () => {
    const withRule = OP_NAMES.filter((op) => OPS[op].vjp !== undefined);
    expect(withRule.filter((op) => !GRAD_CHECKED_OPS.has(op))).toEqual([]);
  });
});
