/**
 * Op rules, losses and metrics: cross_entropy, nll, mse, bce_with_logits (+ their gradient
 * ops), accuracy, top_k (see ops.ts for what each field means). Loss outputs are scalars;
 * their gradient ops include the 1/N of the mean and take no dy (the vjp multiplies by dy
 * unless the loss is the program's loss itself).
 */
import type { AttrValue } from '../graph.js';
import type { OpDef, ShapeCtx, VjpCtx } from '../ops.js';

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;

/**
 * logits [N, ..., C] (class dim last) and i32 labels [N, ...]; the output is a scalar, or
 * dlogits for the gradient ops. ignore_index, when present, is an integer.
 */
function classShape(grad: boolean) {
  return (c: ShapeCtx): (readonly number[])[] => {
    const x = c.in(0), ii = c.attrs.ignore_index;
    c.want(x.length >= 2, `logits must be [N, ..., C], got ${fmt(x)}`);
    c.want(c.dtype(1) === 'i32', 'label must be i32');
    c.sameAs(1, x.slice(0, -1), 'label');
    c.want(ii === undefined || (typeof ii === 'number' && Number.isInteger(ii)), `ignore_index must be an integer, got ${String(ii)}`);
    return [grad ? x : []];
  };
}

const IGNORE = {
  ignore_index: 'optional integer: positions whose label equals it are left out of the mean (PyTorch\'s; absent: none). All positions ignored: the mean is 0/0 = NaN, as torch',
};
/** the attrs a class loss hands its gradient op */
const classAttrs = (a: Readonly<Record<string, AttrValue>>, extra: Record<string, AttrValue> = {}): Record<string, AttrValue> =>
  (a.ignore_index === undefined ? extra : { ...extra, ignore_index: a.ignore_index });
const ROWS = 'Logits [N, ..., C] with the class dim last and i32 labels [N, ...]: every position (row of C) counts; ';

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
    attrs: { label_smoothing: 'in [0,1), default 0', ...IGNORE },
    doc:
      ROWS + 'with logp = log_softmax over C: loss = mean over the non-ignored positions n of ( -(1-ls)*logp[n,label[n]] - ls/C * sum_c logp[n,c] ) ' +
      '(torch.nn.functional.cross_entropy with label_smoothing and ignore_index, the logits permuted to [N, C, ...]).',
    category: 'loss',
    shape: classShape(false),
    vjp: lossVjp('cross_entropy_grad', (a) => classAttrs(a, { label_smoothing: a.label_smoothing ?? 0 }), false),
    flops: { perElement: 5 },
  },
  nll: {
    inputs: ['logp', 'label'],
    outputs: ['loss'],
    attrs: { ...IGNORE },
    doc: ROWS + 'loss = mean over the non-ignored positions n of -logp[n,label[n]] (torch.nn.functional.nll_loss).',
    category: 'loss',
    shape: classShape(false),
    vjp: lossVjp('nll_grad', (a) => classAttrs(a), false),
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
    attrs: { ...IGNORE },
    doc: ROWS + 'the fraction of non-ignored positions whose argmax (first maximum on ties) equals the label.',
    category: 'metric',
    shape: classShape(false),
  },
  top_k: {
    inputs: ['logits', 'label'],
    outputs: ['acc'],
    attrs: { k: 'int >= 1', ...IGNORE },
    doc: ROWS + 'the fraction of non-ignored positions where the label logit is strictly greater than all but fewer than k other logits (count of c with logits[c] > logits[label] is < k).',
    category: 'metric',
    shape: classShape(false),
  },
  cross_entropy_grad: {
    inputs: ['logits', 'label'],
    outputs: ['dlogits'],
    attrs: { label_smoothing: '', ignore_index: '' },
    doc: 'd loss / d logits for cross_entropy (includes the 1/count of the mean; ignored positions get 0).',
    category: 'backward',
    shape: classShape(true),
    flops: { perElement: 5 },
    // each row's kernel reads all of its logits (max, sum) before it writes any of that row's
    // gradient, element c read before c is written: the gradient may take the dead logits' bytes
    // (memory_plan.ts; the GPT-2 logits are 16384 x 50304)
    inPlace: () => [0],
  },
  nll_grad: {
    inputs: ['logp', 'label'], outputs: ['dlogp'], attrs: { ignore_index: '' }, doc: 'dlogp[n,label[n]] = -1/count (count = non-ignored positions), 0 elsewhere and at ignored positions.',
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
