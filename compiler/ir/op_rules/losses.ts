/**
 * Op rules, losses and metrics: cross_entropy, nll, mse, bce_with_logits (+ their gradient
 * ops), accuracy, top_k (see ops.ts for what each field means). Loss outputs are scalars;
 * their gradient ops include the 1/N of the mean and take no dy (the vjp multiplies by dy
 * unless the loss is the program's loss itself).
 */
import type { AttrValue } from '../graph.js';
import type { OpDef, ShapeCtx, VjpCtx } from '../ops.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;

/** logits [N,C] and i32 labels [N]; the output is a scalar, or dlogits for the gradient ops */
function classShape(grad: boolean) {
  return (c: ShapeCtx): (readonly number[])[] => {
    const x = c.in(0);
    c.want(x.length === 2, `logits must be [N,C], got ${fmt(x)}`);
    c.want(c.dtype(1) === 'i32', 'label must be i32');
    c.sameAs(1, [x[0]], 'label');
    return [grad ? x : []];
  };
}

/** prediction and an f32 target of the same shape */
function pairShape(grad: boolean) {
  return (c: ShapeCtx): (readonly number[])[] => {
    c.want(c.dtype(1) === 'f32', 'target must be f32');
    c.sameAs(1, c.in(0), 'target');
    return [grad ? c.in(0) : []];
  };
}

/**
 * d loss / d prediction = gradOp(prediction, target) (times dy); `targetGrad`: the loss is
 * symmetric in its inputs up to sign (mse), so d/dtarget = -d/dprediction.
 */
function lossVjp(gradOp: string, attrsOf: (a: Readonly<Record<string, AttrValue>>) => Record<string, AttrValue>, targetGrad: boolean) {
  return (c: VjpCtx) => {
    const attrs = attrsOf(c.node.attrs);
    let dpred = -1;
    if (c.need(0)) {
      dpred = c.emit(gradOp, [c.x(0), c.x(1)], c.x(0), attrs);
      c.acc(0, c.timesDy(dpred, c.x(0)));
    }
    if (c.need(1)) {
      if (!targetGrad) throw new Error(`internal: autodiff: no gradient for the target of ${c.node.op}`);
      const dp = dpred >= 0 ? dpred : c.emit(gradOp, [c.x(0), c.x(1)], c.x(0), attrs);
      c.acc(1, c.timesDy(c.emit('unary', [dp], c.x(1), { fn: 'neg' }), c.x(1)));
    }
  };
}

const none = () => ({});

export const LOSS_OPS = {
  cross_entropy: {
    inputs: ['logits', 'label'],
    outputs: ['loss'],
    attrs: { label_smoothing: 'in [0,1), default 0' },
    doc:
      'logits [N,C], label i32 [N]. With logp = log_softmax(logits): loss = mean_n( -(1-ls)*logp[n,label[n]] - ls/C * sum_c logp[n,c] ) ' +
      '(torch.nn.functional.cross_entropy with label_smoothing).',
    category: 'loss',
    shape: classShape(false),
    vjp: lossVjp('cross_entropy_grad', (a) => ({ label_smoothing: a.label_smoothing ?? 0 }), false),
    flops: { perElement: 5 },
  },
  nll: {
    inputs: ['logp', 'label'],
    outputs: ['loss'],
    attrs: {},
    doc: 'logp [N,C], label i32 [N]: loss = mean_n(-logp[n,label[n]]).',
    category: 'loss',
    shape: classShape(false),
    vjp: lossVjp('nll_grad', none, false),
  },
  mse: {
    inputs: ['pred', 'target'],
    outputs: ['loss'],
    attrs: {},
    doc: 'pred, target same shape (f32): loss = mean((pred-target)^2).',
    category: 'loss',
    shape: pairShape(false),
    vjp: lossVjp('mse_grad', none, true),
    flops: { perElement: 3 },
  },
  bce_with_logits: {
    inputs: ['logits', 'target'],
    outputs: ['loss'],
    attrs: {},
    doc: 'Same shape (f32 targets in [0,1]): loss = mean(max(x,0) - x*t + log(1+exp(-|x|))).',
    category: 'loss',
    shape: pairShape(false),
    vjp: lossVjp('bce_with_logits_grad', none, false),
    flops: { perElement: 6 },
  },
  accuracy: {
    inputs: ['logits', 'label'],
    outputs: ['acc'],
    attrs: {},
    doc: 'logits [N,C], label i32 [N]: fraction of rows whose argmax (first maximum on ties) equals label.',
    category: 'metric',
    shape: classShape(false),
  },
  top_k: {
    inputs: ['logits', 'label'],
    outputs: ['acc'],
    attrs: { k: 'int >= 1' },
    doc: 'Fraction of rows where the label logit is strictly greater than all but fewer than k other logits (count of c with logits[c] > logits[label] is < k).',
    category: 'metric',
    shape: classShape(false),
  },
  cross_entropy_grad: {
    inputs: ['logits', 'label'],
    outputs: ['dlogits'],
    attrs: { label_smoothing: '' },
    doc: 'd loss / d logits for cross_entropy (includes the 1/N of the mean).',
    category: 'backward',
    shape: classShape(true),
    flops: { perElement: 5 },
  },
  nll_grad: {
    inputs: ['logp', 'label'], outputs: ['dlogp'], attrs: {}, doc: 'dlogp[n,label[n]] = -1/N, 0 elsewhere.',
    category: 'backward', shape: classShape(true),
  },
  mse_grad: {
    inputs: ['pred', 'target'], outputs: ['dpred'], attrs: {}, doc: 'dpred = 2*(pred-target)/numel.',
    category: 'backward', shape: pairShape(true), flops: { perElement: 2 },
  },
  bce_with_logits_grad: {
    inputs: ['logits', 'target'], outputs: ['dlogits'], attrs: {}, doc: '(sigmoid(x) - t)/numel.',
    category: 'backward', shape: pairShape(true), flops: { perElement: 5 },
  },
} satisfies Record<string, OpDef>;
