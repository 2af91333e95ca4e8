/**
 * The layer table: every layer, loss and metric the language knows, with its arguments
 * (types, defaults), its shape rule, its parameters (PyTorch names, layouts and default
 * initialisation) and the IR op it lowers to. docs/language.md documents this table
 * (a test checks that every entry is documented).
 */
import type { AttrValue, DType } from '../ir/graph.js';
import { type UnaryFn, UNARY_FNS_TABLE } from '../ir/scalar_fns.js';
import { BATCH, type InitSpec } from '../model.js';
import type { ArgSpec } from './args.js';
import { broadcastShapes, windowOut } from '../ir/shapes.js';
import { fmtDims, fmtTensor, sameShapeHint, sampleNumel, type TensorInfo } from './shape_util.js';

export interface ParamPlan {
  name: string; // `weight`, `bias`, `running_mean`
  shape: number[];
  kind: 'param' | 'state';
  init: InitSpec;
}

export interface LayerPlan {
  op: string;
  attrs: Record<string, AttrValue>;
  out: TensorInfo;
  /** node inputs after the tensor inputs, in op order; null = absent optional input (-1) */
  params: (ParamPlan | null)[];
  /** outputs after the first (saved statistics), named `<path>.<suffix>` */
  extra?: { suffix: string; shape: number[] }[];
}

export interface LayerCtx {
  /** `linear 'fc1'` */
  what: string;
  /** dropout stream allocator */
  nextStream(): number;
  /** record a shape error and return null */
  fail(message: string, hint?: string): null;
}

export type LayerRole = 'layer' | 'loss' | 'metric';

export interface LayerDef {
  name: string;
  role: LayerRole;
  /** number of tensor inputs: a fixed count, or 'many' (2 or more) */
  inputs: number | 'many';
  /** names of the tensor inputs, for docs */
  inputNames: string[];
  args: ArgSpec[];
  doc: string;
  shapeRule: string;
  infer(x: TensorInfo[], a: Record<string, any>, ctx: LayerCtx): LayerPlan | null;
  /** internal: produced by operators, not callable by name */
  internal?: boolean;
}

const f32 = (shape: number[]): TensorInfo => ({ dtype: 'f32', shape });
const INIT: ArgSpec = { name: 'init', type: 'init', default: null, doc: 'weight initializer (default: PyTorch default)' };
const BIAS: ArgSpec = { name: 'bias', type: 'bool', default: true, doc: 'learn an additive bias' };

function needF32(x: TensorInfo, ctx: LayerCtx): boolean {
  if (x.dtype === 'f32') return true;
  ctx.fail(`${ctx.what} expects f32 input, got ${fmtTensor(x)}`, 'i32 tensors are class labels or token ids: feed them to embedding, cross_entropy, nll, accuracy or top_k');
  return false;
}

interface ActivationOpts {
  /** the layer's argument name for a fn attr, where PyTorch's differs from the IR attr name */
  argNames?: Record<string, string>;
  /** one line per argument, by argument name */
  argDocs?: Record<string, string>;
  /** a rule over the argument values: the problem and how to fix it, or null when they are fine */
  check?: (a: Record<string, number>) => [problem: string, hint: string] | null;
  /** the layer's doc line, where the table's (written with IR attr names) would mislead */
  doc?: string;
  internal?: boolean;
}

/**
 * An element-wise activation layer lowered to `unary {fn}`: its arguments are the fn's attrs
 * (compiler/ir/scalar_fns.ts) with the table's defaults, under PyTorch's argument names.
 */
function activation(fn: UnaryFn, opts: ActivationOpts = {}): LayerDef {
  const attrs = Object.entries(UNARY_FNS_TABLE[fn].attrs as Record<string, number>);
  const argName = (attr: string) => opts.argNames?.[attr] ?? attr;
  return {
    name: fn,
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: attrs.map(([attr, dflt]) => ({ name: argName(attr), type: 'float', default: dflt, doc: opts.argDocs?.[argName(attr)] ?? attr })),
    doc: opts.doc ?? UNARY_FNS_TABLE[fn].doc,
    shapeRule: 'output shape = input shape',
    internal: opts.internal,
    infer(x, a, ctx) {
      if (!needF32(x[0], ctx)) return null;
      for (const [attr] of attrs) {
        const v = a[argName(attr)] as number;
        if (!Number.isFinite(Math.fround(v))) return ctx.fail(`${ctx.what}: ${argName(attr)} = ${v} is outside the f32 range`, 'use a value of magnitude below 3.4e38');
      }
      const problem = opts.check?.(a);
      if (problem) return ctx.fail(`${ctx.what}: ${problem[0]}`, problem[1]);
      const out: Record<string, AttrValue> = { fn };
      for (const [attr] of attrs) out[attr] = a[argName(attr)] as number;
      return { op: 'unary', attrs: out, out: f32(x[0].shape), params: [] };
    },
  };
}

function pool(name: string, op: string, doc: string): LayerDef {
  return {
    name,
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'kernel', type: 'pair', min: 1, doc: 'window size: k or [kh, kw]' },
      { name: 'stride', type: 'pair', min: 1, default: null, doc: 'step: s or [sh, sw] (default: the kernel)' },
      { name: 'padding', type: 'pair', min: 0, default: [0, 0], doc: 'padding on each side: p or [ph, pw]' },
    ],
    doc,
    shapeRule: '[N, C, H, W] -> [N, C, floor((H + 2*ph - kh)/sh) + 1, floor((W + 2*pw - kw)/sw) + 1]',
    infer(x, a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      if (s.shape.length !== 4) return ctx.fail(`${ctx.what} expects [N, C, H, W], got ${fmtTensor(s)}`);
      const k = a.kernel as number[];
      const st = (a.stride as number[] | null) ?? k;
      const p = a.padding as number[];
      if (p[0] * 2 > k[0] || p[1] * 2 > k[1]) return ctx.fail(`${ctx.what}: padding ${fmtDims(p)} must be at most half the kernel ${fmtDims(k)}`);
      const oh = windowOut(s.shape[2], k[0], st[0], p[0], 1);
      const ow = windowOut(s.shape[3], k[1], st[1], p[1], 1);
      if (oh < 1 || ow < 1) return ctx.fail(`${ctx.what}: kernel ${fmtDims(k)} is larger than its padded input ${fmtTensor(s)}`);
      return { op, attrs: { kernel: k, stride: st, padding: p }, out: f32([s.shape[0], s.shape[1], oh, ow]), params: [] };
    },
  };
}

function classLoss(name: string, role: LayerRole, op: string, doc: string, args: ArgSpec[], xName: string): LayerDef {
  return {
    name,
    role,
    inputs: 2,
    inputNames: [xName, 'label'],
    args,
    doc,
    shapeRule: `${xName} f32[N, C], label i32[N] -> scalar`,
    infer(x, a, ctx) {
      const [lg, lb] = x;
      if (lg.dtype !== 'f32' || lg.shape.length !== 2) return ctx.fail(`${ctx.what} expects ${xName} f32[N, classes], got ${fmtTensor(lg)}`, lg.shape.length > 2 ? "insert 'flatten' and a 'linear' layer before it" : undefined);
      if (lb.dtype !== 'i32' || lb.shape.length !== 1) return ctx.fail(`${ctx.what} expects label i32[N], got ${fmtTensor(lb)}`, lb.dtype !== 'i32' ? 'declare the label input as i32[N] (class indices)' : undefined);
      if (a.k !== undefined && a.k > lg.shape[1]) return ctx.fail(`${ctx.what}: k = ${a.k} is larger than the number of classes ${lg.shape[1]}`);
      const attrs: Record<string, AttrValue> = {};
      for (const [k, v] of Object.entries(a)) attrs[k] = v as AttrValue;
      return { op, attrs, out: f32([]), params: [] };
    },
  };
}

function sameShapeLoss(name: string, doc: string, names: [string, string]): LayerDef {
  return {
    name,
    role: 'loss',
    inputs: 2,
    inputNames: names,
    args: [],
    doc,
    shapeRule: `${names[0]} and ${names[1]}: the same shape, f32 -> scalar`,
    infer(x, _a, ctx) {
      const [p, t] = x;
      if (p.dtype !== 'f32' || t.dtype !== 'f32' || fmtDims(p.shape) !== fmtDims(t.shape))
        return ctx.fail(`${ctx.what} expects ${names[0]} and ${names[1]} of the same shape (f32), got ${fmtTensor(p)} and ${fmtTensor(t)}`, sameShapeHint(p, t, names));
      return { op: name, attrs: {}, out: f32([]), params: [] };
    },
  };
}

const binary = (name: string, fn: string, sym: string): LayerDef => ({
  name,
  role: 'layer',
  inputs: 2,
  inputNames: ['a', 'b'],
  args: [],
  doc: `\`a ${sym} b\`: element-wise with broadcasting (written with the operator)`,
  shapeRule: 'numpy broadcasting (shapes aligned at the right, size-1 dims stretch)',
  internal: true,
  infer(x, _a, ctx) {
    const [l, r] = x;
    if (l.dtype !== 'f32' || r.dtype !== 'f32') return ctx.fail(`${ctx.what} expects f32 operands, got ${fmtTensor(l)} and ${fmtTensor(r)}`);
    const s = broadcastShapes(l.shape, r.shape);
    if (s === null) return ctx.fail(`${ctx.what}: shapes ${fmtTensor(l)} and ${fmtTensor(r)} do not broadcast`, 'each dim must be equal or 1 (aligned at the right)');
    return { op: 'binary', attrs: { fn }, out: f32(s), params: [] };
  },
});

const LIST: LayerDef[] = [
  {
    name: 'linear',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [{ name: 'out_features', type: 'int', min: 1, doc: 'output features' }, BIAS, INIT],
    doc: 'Fully connected layer y = x W^T + b (torch.nn.Linear). Parameters: weight [out, in], bias [out].',
    shapeRule: '[N, in] -> [N, out_features]',
    infer(x, a, ctx) {
      const s = x[0];
      if (s.shape.length !== 2) return ctx.fail(`${ctx.what} expects [N, features], got ${fmtTensor(s)}`, s.shape.length > 2 ? "insert 'flatten' before it" : undefined);
      if (!needF32(s, ctx)) return null;
      const inF = s.shape[1];
      const out = a.out_features as number;
      return {
        op: 'linear',
        attrs: {},
        out: f32([s.shape[0], out]),
        params: [
          { name: 'weight', shape: [out, inF], kind: 'param', init: (a.init as InitSpec | null) ?? { kind: 'default_weight' } },
          a.bias ? { name: 'bias', shape: [out], kind: 'param', init: { kind: 'default_bias', fan_in: inF } } : null,
        ],
      };
    },
  },
  {
    name: 'conv2d',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'out_channels', type: 'int', min: 1, doc: 'output channels' },
      { name: 'kernel', type: 'pair', min: 1, doc: 'kernel size: k or [kh, kw]' },
      { name: 'stride', type: 'pair', min: 1, default: [1, 1], doc: 's or [sh, sw]' },
      { name: 'padding', type: 'pair', min: 0, default: [0, 0], doc: 'zero padding on each side: p or [ph, pw]' },
      { name: 'dilation', type: 'pair', min: 1, default: [1, 1], doc: 'd or [dh, dw]' },
      { name: 'groups', type: 'int', min: 1, default: 1, doc: 'channel groups (in and out channels must divide by it)' },
      BIAS,
      INIT,
    ],
    doc: '2-D convolution (torch.nn.Conv2d). Parameters: weight [out, in/groups, kh, kw], bias [out].',
    shapeRule: '[N, C, H, W] -> [N, out_channels, floor((H + 2*ph - dh*(kh-1) - 1)/sh) + 1, (same for W)]',
    infer(x, a, ctx) {
      const s = x[0];
      if (s.shape.length !== 4) return ctx.fail(`${ctx.what} expects [N, channels, height, width], got ${fmtTensor(s)}`, s.shape.length === 2 ? "use 'reshape' to give it channels, height and width" : undefined);
      if (!needF32(s, ctx)) return null;
      const [, c, h, w] = s.shape;
      const o = a.out_channels as number;
      const g = a.groups as number;
      const k = a.kernel as number[];
      const st = a.stride as number[];
      const p = a.padding as number[];
      const d = a.dilation as number[];
      if (c % g !== 0 || o % g !== 0) return ctx.fail(`${ctx.what}: groups = ${g} must divide both the input channels (${c}) and out_channels (${o})`);
      const oh = windowOut(h, k[0], st[0], p[0], d[0]);
      const ow = windowOut(w, k[1], st[1], p[1], d[1]);
      if (oh < 1 || ow < 1) return ctx.fail(`${ctx.what}: kernel ${fmtDims(k)} is larger than its padded input ${fmtTensor(s)}`, 'add padding or use a smaller kernel');
      const fanIn = (c / g) * k[0] * k[1];
      return {
        op: 'conv2d',
        attrs: { stride: st, padding: p, dilation: d, groups: g },
        out: f32([s.shape[0], o, oh, ow]),
        params: [
          { name: 'weight', shape: [o, c / g, k[0], k[1]], kind: 'param', init: (a.init as InitSpec | null) ?? { kind: 'default_weight' } },
          a.bias ? { name: 'bias', shape: [o], kind: 'param', init: { kind: 'default_bias', fan_in: fanIn } } : null,
        ],
      };
    },
  },
  pool('maxpool', 'maxpool2d', 'Max pooling (torch.nn.MaxPool2d, ceil_mode false).'),
  pool('avgpool', 'avgpool2d', 'Average pooling (torch.nn.AvgPool2d, count_include_pad true).'),
  {
    name: 'global_avgpool',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [],
    doc: 'Mean over height and width (torch.nn.AdaptiveAvgPool2d(1)).',
    shapeRule: '[N, C, H, W] -> [N, C, 1, 1]',
    infer(x, _a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      if (s.shape.length !== 4) return ctx.fail(`${ctx.what} expects [N, C, H, W], got ${fmtTensor(s)}`);
      return { op: 'global_avgpool', attrs: {}, out: f32([s.shape[0], s.shape[1], 1, 1]), params: [] };
    },
  },
  {
    name: 'flatten',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [],
    doc: 'Flatten every dim after the batch dim (torch.nn.Flatten).',
    shapeRule: '[N, d1, d2, ...] -> [N, d1*d2*...]',
    infer(x, _a, ctx) {
      const s = x[0];
      if (s.shape.length < 2) return ctx.fail(`${ctx.what} expects [N, ...] with at least 2 dims, got ${fmtTensor(s)}`);
      const shape = [BATCH, sampleNumel(s.shape)];
      return { op: 'reshape', attrs: { shape }, out: { dtype: s.dtype, shape }, params: [] };
    },
  },
  {
    name: 'reshape',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [{ name: 'shape', type: 'ints', variadic: true, doc: 'the per-sample dims (the batch dim N stays first); one may be -1 (inferred)' }],
    doc: 'Reshape each sample: `reshape(64, 7, 7)` turns [N, 3136] into [N, 64, 7, 7].',
    shapeRule: '[N, ...] -> [N, shape...] with the same element count per sample',
    infer(x, a, ctx) {
      const s = x[0];
      const dims = [...(a.shape as number[])];
      const total = sampleNumel(s.shape);
      const infer = dims.filter((d) => d === -1).length;
      if (dims.length === 0) return ctx.fail(`${ctx.what} needs at least one dim`);
      if (infer > 1 || dims.some((d) => d === 0 || d < -1)) return ctx.fail(`${ctx.what}: dims must be positive (one may be -1), got ${fmtDims(dims)}`);
      const known = dims.filter((d) => d !== -1).reduce((p, d) => p * d, 1);
      if (infer === 1) {
        if (total % known !== 0) return ctx.fail(`${ctx.what} cannot reshape ${fmtTensor(s)} into [N, ${dims.join(', ')}]`);
        dims[dims.indexOf(-1)] = total / known;
      } else if (known !== total) return ctx.fail(`${ctx.what} cannot reshape ${fmtTensor(s)} (${total} elements per sample) into [N, ${dims.join(', ')}] (${known})`);
      const shape = [BATCH, ...dims];
      return { op: 'reshape', attrs: { shape }, out: { dtype: s.dtype, shape }, params: [] };
    },
  },
  activation('relu'),
  activation('leaky_relu', { argNames: { alpha: 'negative_slope' }, argDocs: { negative_slope: 'slope for x < 0' }, doc: 'x > 0 ? x : negative_slope*x' }),
  activation('gelu'),
  activation('sigmoid'),
  activation('tanh'),
  activation('silu'),
  activation('relu6'),
  activation('hardtanh', {
    argDocs: { min_val: 'lower bound', max_val: 'upper bound' },
    check: (a) => (a.max_val > a.min_val ? null : [`max_val (${a.max_val}) must be greater than min_val (${a.min_val})`, 'for example hardtanh(min_val: -1, max_val: 1)']),
  }),
  activation('hardswish'),
  activation('softplus', {
    argDocs: { beta: 'sharpness: log(1 + exp(beta*x))/beta', threshold: 'beta*x above which the layer is the identity' },
    check: (a) => (a.beta !== 0 ? null : ['beta must not be 0 (softplus divides by it)', 'beta: 1 is the usual softplus; larger beta is closer to relu']),
  }),
  activation('elu', { argDocs: { alpha: 'alpha*(exp(x) - 1) for x <= 0' } }),
  activation('mish'),
  activation('neg', { internal: true, doc: '`-x` on a tensor (written with the operator)' }),
  ...(['softmax', 'log_softmax'] as const).map(
    (name): LayerDef => ({
      name,
      role: 'layer',
      inputs: 1,
      inputNames: ['x'],
      args: [{ name: 'axis', type: 'int', default: 1, doc: 'the axis (negative counts from the end)' }],
      doc: name === 'softmax' ? 'exp(x)/sum(exp(x)) along axis' : 'x - log(sum(exp(x))) along axis',
      shapeRule: 'output shape = input shape',
      infer(x, a, ctx) {
        const s = x[0];
        if (!needF32(s, ctx)) return null;
        const r = s.shape.length;
        const ax = (a.axis as number) < 0 ? (a.axis as number) + r : (a.axis as number);
        if (ax < 0 || ax >= r) return ctx.fail(`${ctx.what}: axis ${a.axis} is out of range for ${fmtTensor(s)}`);
        return { op: name, attrs: { axis: ax }, out: f32(s.shape), params: [] };
      },
    }),
  ),
  {
    name: 'dropout',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [{ name: 'p', type: 'float', default: 0.5, min: 0, max: 1, maxExclusive: true, doc: 'drop probability' }],
    doc: 'Zero each element with probability p during training and scale the rest by 1/(1-p); identity in evaluation.',
    shapeRule: 'output shape = input shape',
    infer(x, a, ctx) {
      if (!needF32(x[0], ctx)) return null;
      return { op: 'dropout', attrs: { p: a.p as number, stream: ctx.nextStream() }, out: f32(x[0].shape), params: [] };
    },
  },
  {
    name: 'batchnorm',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'eps', type: 'float', default: 1e-5, min: 0, minExclusive: true, doc: 'added to the variance' },
      { name: 'momentum', type: 'float', default: 0.1, min: 0, max: 1, doc: 'running statistics update factor' },
    ],
    doc: 'Batch normalisation over dim 1 (torch.nn.BatchNorm1d/2d): batch statistics in training, running statistics in evaluation. Parameters weight (ones), bias (zeros); state running_mean (zeros), running_var (ones), each [C].',
    shapeRule: '[N, C] or [N, C, H, W] -> same',
    infer(x, a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      if (s.shape.length !== 2 && s.shape.length !== 4) return ctx.fail(`${ctx.what} expects [N, C] or [N, C, H, W], got ${fmtTensor(s)}`);
      const c = s.shape[1];
      return {
        op: 'batchnorm_train',
        attrs: { eps: a.eps as number, momentum: a.momentum as number },
        out: f32(s.shape),
        params: [
          { name: 'weight', shape: [c], kind: 'param', init: { kind: 'ones' } },
          { name: 'bias', shape: [c], kind: 'param', init: { kind: 'zeros' } },
          { name: 'running_mean', shape: [c], kind: 'state', init: { kind: 'zeros' } },
          { name: 'running_var', shape: [c], kind: 'state', init: { kind: 'ones' } },
        ],
        extra: [
          { suffix: 'mean', shape: [c] },
          { suffix: 'invstd', shape: [c] },
        ],
      };
    },
  },
  {
    name: 'layernorm',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [{ name: 'eps', type: 'float', default: 1e-5, min: 0, minExclusive: true, doc: 'added to the variance' }],
    doc: 'Layer normalisation over the last dim (torch.nn.LayerNorm(D)). Parameters weight (ones), bias (zeros), each [D].',
    shapeRule: '[N, ..., D] -> same',
    infer(x, a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      if (s.shape.length < 2) return ctx.fail(`${ctx.what} expects [N, ..., D], got ${fmtTensor(s)}`);
      const d = s.shape[s.shape.length - 1];
      const stat = s.shape.slice(0, -1);
      return {
        op: 'layernorm',
        attrs: { eps: a.eps as number },
        out: f32(s.shape),
        params: [
          { name: 'weight', shape: [d], kind: 'param', init: { kind: 'ones' } },
          { name: 'bias', shape: [d], kind: 'param', init: { kind: 'zeros' } },
        ],
        extra: [
          { suffix: 'mean', shape: stat },
          { suffix: 'rstd', shape: stat },
        ],
      };
    },
  },
  {
    name: 'embedding',
    role: 'layer',
    inputs: 1,
    inputNames: ['ids'],
    args: [
      { name: 'num_embeddings', type: 'int', min: 1, doc: 'vocabulary size' },
      { name: 'embedding_dim', type: 'int', min: 1, doc: 'vector size' },
      INIT,
    ],
    doc: 'Lookup table (torch.nn.Embedding): ids must be i32 in [0, num_embeddings). Parameter weight [num_embeddings, embedding_dim], default init normal(0, 1).',
    shapeRule: 'i32[N, ...] -> f32[N, ..., embedding_dim]',
    infer(x, a, ctx) {
      const s = x[0];
      if (s.dtype !== 'i32') return ctx.fail(`${ctx.what} expects i32 ids, got ${fmtTensor(s)}`, 'declare the ids input as i32');
      return {
        op: 'embedding',
        attrs: {},
        out: f32([...s.shape, a.embedding_dim as number]),
        params: [{ name: 'weight', shape: [a.num_embeddings as number, a.embedding_dim as number], kind: 'param', init: (a.init as InitSpec | null) ?? { kind: 'normal', mean: 0, std: 1 } }],
      };
    },
  },
  {
    name: 'concat',
    role: 'layer',
    inputs: 'many',
    inputNames: ['x0', 'x1', '...'],
    args: [{ name: 'axis', type: 'int', default: 1, min: 1, doc: 'the axis to join along (not the batch dim 0)' }],
    doc: 'Join 2 or more tensors along axis: `concat(a, b, axis: 1)`.',
    shapeRule: 'all dims but axis equal; output axis = the sum',
    infer(x, a, ctx) {
      const r = x[0].shape.length;
      const ax = a.axis as number;
      if (ax >= r) return ctx.fail(`${ctx.what}: axis ${ax} is out of range for ${fmtTensor(x[0])}`);
      let sum = 0;
      for (const t of x) {
        if (t.dtype !== x[0].dtype || t.shape.length !== r || t.shape.some((d, i) => i !== ax && d !== x[0].shape[i]))
          return ctx.fail(`${ctx.what}: ${fmtTensor(t)} does not match ${fmtTensor(x[0])} outside axis ${ax}`);
        sum += t.shape[ax];
      }
      const shape = [...x[0].shape];
      shape[ax] = sum;
      return { op: 'concat', attrs: { axis: ax }, out: { dtype: x[0].dtype, shape }, params: [] };
    },
  },
  binary('add', 'add', '+'),
  binary('sub', 'sub', '-'),
  binary('mul', 'mul', '*'),
  // ------------------------------------------------------------- losses
  classLoss('cross_entropy', 'loss', 'cross_entropy', 'Softmax cross entropy on raw logits (torch.nn.functional.cross_entropy), mean over the batch.', [
    { name: 'label_smoothing', type: 'float', default: 0, min: 0, max: 1, maxExclusive: true, doc: 'label smoothing factor' },
  ], 'logits'),
  classLoss('nll', 'loss', 'nll', 'Negative log likelihood on log-probabilities (use after log_softmax), mean over the batch.', [], 'logp'),
  sameShapeLoss('mse', 'Mean squared error.', ['pred', 'target']),
  sameShapeLoss('bce_with_logits', 'Binary cross entropy on logits with f32 targets in [0, 1].', ['logits', 'target']),
  // ------------------------------------------------------------- metrics
  classLoss('accuracy', 'metric', 'accuracy', 'Fraction of rows whose argmax equals the label.', [], 'logits'),
  classLoss('top_k', 'metric', 'top_k', 'Fraction of rows whose label is among the k largest logits.', [{ name: 'k', type: 'int', default: 5, min: 1, doc: 'how many top classes count' }], 'logits'),
];

export const LAYERS: Record<string, LayerDef> = Object.fromEntries(LIST.map((d) => [d.name, d]));

export function layersWithRole(role: LayerRole, includeInternal = false): LayerDef[] {
  return LIST.filter((d) => d.role === role && (includeInternal || !d.internal));
}

export type { DType };
