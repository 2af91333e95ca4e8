/**
 * The layer table: every layer, loss and metric the language knows, with its arguments
 * (types, defaults), its shape rule, its parameters (PyTorch names, layouts and default
 * initialisation) and the IR op it lowers to. docs/language.md documents this table
 * (a test checks that every entry is documented).
 */
import type { AttrValue, DType } from '../ir/graph.js';
import { evalScalar, type UnaryFn, UNARY_FNS_TABLE } from '../ir/scalar_fns.js';
import { BATCH, type InitSpec } from '../model.js';
import type { ArgSpec } from './args.js';
import { broadcastShapes, windowOut } from '../ir/shapes.js';
import { fmtDims, fmtTensor, sameShapeHint, sampleNumel, type TensorInfo } from './shape_util.js';

export interface ParamPlan {
  name: string; // `weight`, `bias`, `running_mean`, `out_proj.weight`
  shape: number[];
  kind: 'param' | 'state';
  init: InitSpec;
  /** weight tying: the full path of an earlier layer's parameter this one IS (no new tensor) */
  tiedTo?: string;
}

/** A node input of a multi-op layer: the layer's k-th tensor input, its k-th parameter, or an output of an earlier step. */
export type StepRef = { in: number } | { param: number } | { step: number; out?: number } | { absent: true };

/** One node of a layer lowered to several ops (attention, where): outputs named `<path>.<suffix>`, the last step's first is `<path>.out`. */
export interface PlanStep {
  op: string;
  inputs: StepRef[];
  attrs: Record<string, AttrValue>;
  outs: { suffix: string; dtype: DType; shape: number[] }[];
}

export interface LayerPlan {
  op: string;
  attrs: Record<string, AttrValue>;
  out: TensorInfo;
  /** node inputs after the tensor inputs, in op order; null = absent optional input (-1) */
  params: (ParamPlan | null)[];
  /** outputs after the first (saved statistics), named `<path>.<suffix>` */
  extra?: { suffix: string; shape: number[] }[];
  /** a layer of several nodes: lowered step by step (op / attrs then only name the main op) */
  steps?: PlanStep[];
}

export interface LayerCtx {
  /** `linear 'fc1'` */
  what: string;
  /** dropout stream allocator */
  nextStream(): number;
  /** record a shape error and return null */
  fail(message: string, hint?: string): null;
  /** the shape of an earlier layer's parameter by full path (`tok.weight`), or null */
  paramShape(path: string): number[] | null;
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
  /** optional tensor inputs after the `inputs` required ones (masked_fill's mask) */
  optionalInputs?: number;
  /** element-wise math fns: their value on a number (`sqrt(64)` folds at compile time) */
  math?: (x: number, a: Record<string, number>) => number;
  /**
   * several outputs (split, chunk): how many, from the arguments, or null when the number of
   * names assigned decides (`q, k, v = split(x, 128, 2)`); infer then gets `part` in the args
   */
  outputs?: (a: Record<string, any>) => number | null;
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
    shapeRule: `${xName} f32[N, ..., C] (classes last), label i32[N, ...] -> scalar (mean over every position)`,
    infer(x, a, ctx) {
      const [lg, lb] = x;
      if (lg.dtype !== 'f32' || lg.shape.length < 2) return ctx.fail(`${ctx.what} expects ${xName} f32[N, ..., classes], got ${fmtTensor(lg)}`);
      const lead = lg.shape.slice(0, -1);
      const C = lg.shape[lg.shape.length - 1];
      if (lb.dtype !== 'i32' || fmtDims(lb.shape) !== fmtDims(lead))
        return ctx.fail(
          `${ctx.what} expects label i32${fmtDims(lead)}${lead.length > 1 ? ` (the ${xName} shape without its class dim)` : ''}, got ${fmtTensor(lb)}`,
          lb.dtype !== 'i32'
            ? `declare the label input as i32${fmtDims(lead)} (class indices)`
            : lb.shape.length === 1
              ? `insert 'flatten' before the output layer (linear acts on the last dim and keeps the others of ${fmtTensor(lg)})`
              : `${xName} ${fmtTensor(lg)} has its classes (${C}) in the last dim`,
        );
      if (a.k !== undefined && a.k > C) return ctx.fail(`${ctx.what}: k = ${a.k} is larger than the number of classes ${C}`);
      const attrs: Record<string, AttrValue> = {};
      for (const [k, v] of Object.entries(a)) if (v !== null) attrs[k] = v as AttrValue;
      return { op, attrs, out: f32([]), params: [] };
    },
  };
}

const IGNORE_INDEX: ArgSpec = { name: 'ignore_index', type: 'int', default: null, doc: 'positions whose label equals it are left out of the mean (default: none)' };

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


// ------------------------------------------------------------- tensor algebra and attention (issue 13)

/** A non-batch axis of a rank-r tensor (negative counts from the end), or null after reporting. */
function axisOf(ax: number, r: number, s: TensorInfo, ctx: LayerCtx, argName = 'axis'): number | null {
  const a = ax < 0 ? ax + r : ax;
  if (a < 0 || a >= r) return ctx.fail(`${ctx.what}: ${argName} ${ax} is out of range for ${fmtTensor(s)}`, `the axes of a rank-${r} tensor are 0..${r - 1} (or -${r}..-1)`);
  if (a === 0) return ctx.fail(`${ctx.what}: ${argName} ${ax} is the batch dim N of ${fmtTensor(s)}`, 'the batch dim stays whole and first: use an axis from 1 on');
  return a;
}

/** exp, log, ...: a layer on tensors; on a number, folded at compile time with the table's float64 formula */
const unaryMath = (fn: UnaryFn, argDocs?: Record<string, string>): LayerDef => ({
  ...activation(fn, { argDocs }),
  math: (x, a) => evalScalar(UNARY_FNS_TABLE[fn].fwd, { vars: { x }, attrs: { ...(UNARY_FNS_TABLE[fn].attrs as Record<string, number>), ...a } }),
});

function reduceLayer(fn: 'sum' | 'mean' | 'max', doc: string): LayerDef {
  return {
    name: fn,
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'axis', type: 'int_or_ints', doc: 'the axis (or a list of axes) to reduce; negative counts from the end; not the batch dim' },
      { name: 'keepdim', type: 'bool', default: false, doc: 'keep the reduced dims with size 1' },
    ],
    doc,
    shapeRule: 'the reduced dims removed (keepdim: size 1)',
    infer(x, a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      const axes: number[] = [];
      for (const ax of a.axis as number[]) {
        const n = axisOf(ax, s.shape.length, s, ctx);
        if (n === null) return null;
        if (axes.includes(n)) return ctx.fail(`${ctx.what}: axis ${n} is listed twice`);
        axes.push(n);
      }
      axes.sort((p, q) => p - q);
      const keep = a.keepdim as boolean;
      const shape = keep ? s.shape.map((d, i) => (axes.includes(i) ? 1 : d)) : s.shape.filter((_, i) => !axes.includes(i));
      return { op: 'reduce', attrs: { fn, axes, keepdim: keep }, out: f32(shape), params: [] };
    },
  };
}

/** the slice [start, start + length) that part `part` of split / chunk takes on axis `ax`, or null after reporting */
function splitPart(s: TensorInfo, a: Record<string, any>, ctx: LayerCtx, kind: 'split' | 'chunk'): LayerPlan | null {
  const ax = axisOf(a.axis as number, s.shape.length, s, ctx);
  if (ax === null) return null;
  const dim = s.shape[ax];
  let sizes: number[];
  if (kind === 'chunk') {
    const n = a.chunks as number;
    if (dim % n !== 0) return ctx.fail(`${ctx.what}: dim ${ax} of ${fmtTensor(s)} (${dim}) does not divide into ${n} equal chunks`, 'use split(x, [sizes...], axis) for unequal parts');
    sizes = new Array<number>(n).fill(dim / n);
  } else if ((a.sizes as number[]).length === 1 && a.parts !== undefined) {
    sizes = new Array<number>(a.parts as number).fill((a.sizes as number[])[0]);
  } else sizes = a.sizes as number[];
  const total = sizes.reduce((p, q) => p + q, 0);
  if (total !== dim) return ctx.fail(`${ctx.what}: the parts ${fmtDims(sizes)} add up to ${total}, but dim ${ax} of ${fmtTensor(s)} is ${dim}`, `the sizes must add up to ${dim}`);
  const part = a.part as number;
  const start = sizes.slice(0, part).reduce((p, q) => p + q, 0);
  const shape = [...s.shape];
  shape[ax] = sizes[part];
  return { op: 'slice', attrs: { axis: ax, start, length: sizes[part] }, out: { dtype: s.dtype, shape }, params: [] };
}

const TENSOR_LAYERS: LayerDef[] = [
  {
    name: 'positions',
    role: 'layer',
    inputs: 1,
    inputNames: ['ids'],
    args: [],
    doc: 'The position index: i32[N, T, ...] -> i32[N, T] holding 0..T-1 in every row (torch.arange(T) broadcast over the batch).',
    shapeRule: '[N, T, ...] -> i32[N, T]',
    infer(x, _a, ctx) {
      const s = x[0];
      if (s.shape.length < 2) return ctx.fail(`${ctx.what} expects [N, T, ...], got ${fmtTensor(s)}`, 'positions numbers the second dim (the sequence)');
      return { op: 'positions', attrs: {}, out: { dtype: 'i32', shape: s.shape.slice(0, 2) }, params: [] };
    },
  },
  {
    name: 'attention',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'heads', type: 'int', min: 1, doc: 'number of heads (C must divide by it)' },
      { name: 'causal', type: 'bool', default: false, doc: 'position t attends to positions <= t only' },
      { name: 'dropout', type: 'float', default: 0, min: 0, max: 1, maxExclusive: true, doc: 'dropout on the attention weights (training only; > 0 uses the unfused path)' },
      { name: 'bias', type: 'bool', default: true, doc: 'biases on the input and output projections' },
    ],
    doc:
      'Multi-head self-attention on [N, T, C] (torch.nn.MultiheadAttention(C, heads, dropout, bias, batch_first=True) with query = key = value = x, ' +
      'need_weights=False; causal: attn_mask = the upper triangle). Parameters in_proj_weight [3C, C], in_proj_bias [3C] (q, k, v in that order), ' +
      'out_proj.weight [C, C], out_proj.bias [C], initialised as torch.nn.Linear\'s. Lowered to linear -> the fused `attention_qkv` op ' +
      '(dropout 0: q, k, v read in place from the projection, o written as [N, T, C]) -> linear, or linear -> heads -> ' +
      'matmul / softmax / dropout / matmul -> merge heads -> linear (dropout > 0).',
    shapeRule: '[N, T, C] -> [N, T, C]',
    infer(x, a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      if (s.shape.length !== 3) return ctx.fail(`${ctx.what} expects [N, T, C] (batch, sequence, channels), got ${fmtTensor(s)}`, s.shape.length === 2 ? "give it a sequence dim: reshape(1, C) for one position" : undefined);
      const [, T, C] = s.shape;
      const H = a.heads as number;
      if (C % H !== 0) return ctx.fail(`${ctx.what}: ${C} channels do not divide into ${H} heads`, `heads must divide C = ${C}`);
      const D = C / H;
      const p = a.dropout as number;
      const bias = a.bias as boolean;
      const heads = [BATCH, H, T, D];
      const steps: PlanStep[] = [
        { op: 'linear', inputs: [{ in: 0 }, { param: 0 }, bias ? { param: 1 } : { absent: true }], attrs: {}, outs: [{ suffix: 'qkv', dtype: 'f32', shape: [BATCH, T, 3 * C] }] },
      ];
      const scale = 1 / Math.sqrt(D);
      if (p === 0) {
        // q, k, v read in place from the projection, o written as [N, T, C]: no head split / merge copies
        steps.push({ op: 'attention_qkv', inputs: [{ step: 0 }], attrs: { heads: H, causal: a.causal as boolean, scale }, outs: [{ suffix: 'merged', dtype: 'f32', shape: [BATCH, T, C] }, { suffix: 'lse', dtype: 'f32', shape: [BATCH, H, T] }] });
      } else {
        steps.push({ op: 'reshape', inputs: [{ step: 0 }], attrs: { shape: [BATCH, T, 3, H, D] }, outs: [{ suffix: 'qkv_split', dtype: 'f32', shape: [BATCH, T, 3, H, D] }] });
        steps.push({ op: 'permute', inputs: [{ step: 1 }], attrs: { perm: [2, 0, 3, 1, 4] }, outs: [{ suffix: 'qkv_heads', dtype: 'f32', shape: [3, BATCH, H, T, D] }] });
        for (const [j, n] of ['q', 'k', 'v'].entries()) {
          steps.push({ op: 'slice', inputs: [{ step: 2 }], attrs: { axis: 0, start: j, length: 1 }, outs: [{ suffix: `${n}_slice`, dtype: 'f32', shape: [1, BATCH, H, T, D] }] });
          steps.push({ op: 'reshape', inputs: [{ step: steps.length - 1 }], attrs: { shape: heads }, outs: [{ suffix: n, dtype: 'f32', shape: heads }] });
        }
        const [q, k, v] = [4, 6, 8].map((i) => ({ step: i }));
        const sc = [BATCH, H, T, T];
        steps.push({ op: 'matmul', inputs: [q, k], attrs: { transA: false, transB: true }, outs: [{ suffix: 'scores', dtype: 'f32', shape: sc }] });
        steps.push({ op: 'unary', inputs: [{ step: steps.length - 1 }], attrs: { fn: 'affine', scale, shift: 0 }, outs: [{ suffix: 'scaled', dtype: 'f32', shape: sc }] });
        if (a.causal) steps.push({ op: 'masked_fill', inputs: [{ step: steps.length - 1 }, { absent: true }], attrs: { value: -Infinity, causal: true, invert: false }, outs: [{ suffix: 'masked', dtype: 'f32', shape: sc }] });
        steps.push({ op: 'softmax', inputs: [{ step: steps.length - 1 }], attrs: { axis: 3 }, outs: [{ suffix: 'weights', dtype: 'f32', shape: sc }] });
        steps.push({ op: 'dropout', inputs: [{ step: steps.length - 1 }], attrs: { p, stream: ctx.nextStream() }, outs: [{ suffix: 'dropped', dtype: 'f32', shape: sc }] });
        steps.push({ op: 'matmul', inputs: [{ step: steps.length - 1 }, v], attrs: { transA: false, transB: false }, outs: [{ suffix: 'o', dtype: 'f32', shape: heads }] });
        steps.push({ op: 'permute', inputs: [{ step: steps.length - 1 }], attrs: { perm: [0, 2, 1, 3] }, outs: [{ suffix: 'o_merge', dtype: 'f32', shape: [BATCH, T, H, D] }] });
        steps.push({ op: 'reshape', inputs: [{ step: steps.length - 1 }], attrs: { shape: [BATCH, T, C] }, outs: [{ suffix: 'merged', dtype: 'f32', shape: [BATCH, T, C] }] });
      }
      steps.push({ op: 'linear', inputs: [{ step: steps.length - 1 }, { param: 2 }, bias ? { param: 3 } : { absent: true }], attrs: {}, outs: [{ suffix: 'out', dtype: 'f32', shape: [BATCH, T, C] }] });
      const params: ParamPlan[] = [
        { name: 'in_proj_weight', shape: [3 * C, C], kind: 'param', init: { kind: 'default_weight' } },
        { name: 'in_proj_bias', shape: [3 * C], kind: 'param', init: { kind: 'default_bias', fan_in: C } },
        { name: 'out_proj.weight', shape: [C, C], kind: 'param', init: { kind: 'default_weight' } },
        { name: 'out_proj.bias', shape: [C], kind: 'param', init: { kind: 'default_bias', fan_in: C } },
      ];
      // without bias the steps still index params 0..3: the bias slots hold null and the linears get an absent (-1) bias
      return { op: 'attention', attrs: { causal: a.causal as boolean, scale }, out: f32(s.shape), params: bias ? params : [params[0], null, params[2], null], steps };
    },
  },
  {
    name: 'matmul',
    role: 'layer',
    inputs: 2,
    inputNames: ['a', 'b'],
    args: [],
    doc: 'Batched matrix product (torch.matmul for rank >= 2): the last two dims multiply, the leading dims broadcast.',
    shapeRule: '[..., M, K] x [..., K, P] -> [broadcast(...), M, P]',
    infer(x, _a, ctx) {
      const [l, r] = x;
      if (l.dtype !== 'f32' || r.dtype !== 'f32') return ctx.fail(`${ctx.what} expects f32 operands, got ${fmtTensor(l)} and ${fmtTensor(r)}`);
      if (l.shape.length < 2 || r.shape.length < 2) return ctx.fail(`${ctx.what} needs operands of rank 2 or more, got ${fmtTensor(l)} and ${fmtTensor(r)}`);
      const [m, k] = l.shape.slice(-2);
      const [k2, n] = r.shape.slice(-2);
      if (k !== k2) return ctx.fail(`${ctx.what}: inner dims differ: ${fmtTensor(l)} @ ${fmtTensor(r)} (${k} vs ${k2})`, 'the last dim of a must equal the second-to-last of b; transpose(b, -2, -1) may be what you meant');
      const batch = broadcastShapes(l.shape.slice(0, -2), r.shape.slice(0, -2));
      if (batch === null) return ctx.fail(`${ctx.what}: the leading dims of ${fmtTensor(l)} and ${fmtTensor(r)} do not broadcast`, 'each leading dim must be equal or 1 (aligned at the right)');
      return { op: 'matmul', attrs: { transA: false, transB: false }, out: f32([...batch, m, n]), params: [] };
    },
  },
  {
    name: 'transpose',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'dim0', type: 'int', doc: 'first dim (negative counts from the end)' },
      { name: 'dim1', type: 'int', doc: 'second dim' },
    ],
    doc: 'Swap two dims (torch.transpose); the batch dim stays first.',
    shapeRule: 'dims dim0 and dim1 swapped',
    infer(x, a, ctx) {
      const s = x[0];
      const r = s.shape.length;
      const d0 = axisOf(a.dim0 as number, r, s, ctx, 'dim0');
      const d1 = d0 === null ? null : axisOf(a.dim1 as number, r, s, ctx, 'dim1');
      if (d0 === null || d1 === null) return null;
      const perm = s.shape.map((_, i) => (i === d0 ? d1 : i === d1 ? d0 : i));
      return { op: 'permute', attrs: { perm }, out: { dtype: s.dtype, shape: perm.map((p) => s.shape[p]) }, params: [] };
    },
  },
  {
    name: 'permute',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [{ name: 'dims', type: 'ints', doc: 'the new order of the dims, a list starting with 0 (the batch dim stays first)' }],
    doc: 'Reorder dims: `permute(x, [0, 2, 1, 3])` (torch.permute).',
    shapeRule: 'y.shape[i] = x.shape[dims[i]]',
    infer(x, a, ctx) {
      const s = x[0];
      const r = s.shape.length;
      const dims = (a.dims as number[]).map((d) => (d < 0 ? d + r : d));
      if (dims.length !== r || new Set(dims).size !== r || dims.some((d) => d < 0 || d >= r)) return ctx.fail(`${ctx.what}: ${fmtDims(a.dims as number[])} is not an order of the ${r} dims of ${fmtTensor(s)}`, `list each of 0..${r - 1} once`);
      if (dims[0] !== 0) return ctx.fail(`${ctx.what}: ${fmtDims(a.dims as number[])} moves the batch dim`, 'the batch dim N stays first: start the list with 0');
      return { op: 'permute', attrs: { perm: dims }, out: { dtype: s.dtype, shape: dims.map((p) => s.shape[p]) }, params: [] };
    },
  },
  {
    name: 'slice',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'axis', type: 'int', doc: 'the axis (not the batch dim)' },
      { name: 'start', type: 'int', doc: 'first index (negative counts from the end)' },
      { name: 'end', type: 'int', doc: 'one past the last index (negative counts from the end)' },
    ],
    doc: 'x[..., start:end, ...] along axis (torch.narrow(x, axis, start, end - start)).',
    shapeRule: 'dim axis becomes end - start',
    infer(x, a, ctx) {
      const s = x[0];
      const ax = axisOf(a.axis as number, s.shape.length, s, ctx);
      if (ax === null) return null;
      const d = s.shape[ax];
      const st = (a.start as number) < 0 ? (a.start as number) + d : (a.start as number);
      const en = (a.end as number) < 0 ? (a.end as number) + d : (a.end as number);
      if (st < 0 || en > d || en <= st) return ctx.fail(`${ctx.what}: [${a.start}:${a.end}] is not a non-empty range of dim ${ax} of ${fmtTensor(s)} (size ${d})`, `use 0 <= start < end <= ${d}`);
      const shape = [...s.shape];
      shape[ax] = en - st;
      return { op: 'slice', attrs: { axis: ax, start: st, length: en - st }, out: { dtype: s.dtype, shape }, params: [] };
    },
  },
  {
    name: 'split',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'sizes', type: 'int_or_ints', min: 1, doc: 'the part sizes, or one size for equal parts (then the names assigned give the count)' },
      { name: 'axis', type: 'int', doc: 'the axis (not the batch dim)' },
    ],
    doc: 'Several parts along axis: `q, k, v = split(x, 128, 2)` or `a, b = split(x, [3, 5], 1)` (torch.split; the sizes must add up to the dim).',
    shapeRule: 'part i has sizes[i] along axis',
    outputs: (a) => ((a.sizes as number[]).length > 1 ? (a.sizes as number[]).length : null),
    infer(x, a, ctx) {
      return splitPart(x[0], a, ctx, 'split');
    },
  },
  {
    name: 'chunk',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'chunks', type: 'int', min: 1, doc: 'how many equal parts' },
      { name: 'axis', type: 'int', doc: 'the axis (not the batch dim; its size must divide by chunks)' },
    ],
    doc: 'Equal parts along axis: `q, k, v = chunk(x, 3, 2)` (torch.chunk with a divisible dim).',
    shapeRule: 'each part has dim / chunks along axis',
    outputs: (a) => a.chunks as number,
    infer(x, a, ctx) {
      return splitPart(x[0], a, ctx, 'chunk');
    },
  },
  reduceLayer('sum', 'Sum over axis (torch.sum(x, axis, keepdim)).'),
  reduceLayer('mean', 'Mean over axis (torch.mean(x, axis, keepdim)).'),
  reduceLayer('max', 'Maximum over axis (torch.amax(x, axis, keepdim)); the gradient goes to the first maximal element of each group, as torch.max(x, dim).'),
  {
    name: 'pad',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'pads', type: 'ints', min: 0, doc: "[before, after] for the last dim, then the one before it, ... (torch.nn.functional.pad's order)" },
      { name: 'value', type: 'float', default: 0, doc: 'the fill value' },
    ],
    doc: 'Constant padding (torch.nn.functional.pad(x, pads, value=value)); never the batch dim.',
    shapeRule: 'each padded dim grows by before + after',
    infer(x, a, ctx) {
      const s = x[0];
      const pads = a.pads as number[];
      const r = s.shape.length;
      if (pads.length === 0 || pads.length % 2 !== 0) return ctx.fail(`${ctx.what}: pads ${fmtDims(pads)} must be pairs [before, after] (last dim first)`);
      if (pads.length / 2 > r - 1) return ctx.fail(`${ctx.what}: ${pads.length / 2} padded dims but ${fmtTensor(s)} has only ${r - 1} dims after the batch dim`);
      const ir = new Array<number>(2 * r).fill(0);
      for (let j = 0; j < pads.length / 2; j++) {
        ir[2 * (r - 1 - j)] = pads[2 * j];
        ir[2 * (r - 1 - j) + 1] = pads[2 * j + 1];
      }
      const shape = s.shape.map((d, i) => d + ir[2 * i] + ir[2 * i + 1]);
      return { op: 'pad', attrs: { pads: ir, value: a.value as number }, out: { dtype: s.dtype, shape }, params: [] };
    },
  },
  {
    name: 'masked_fill',
    role: 'layer',
    inputs: 1,
    optionalInputs: 1,
    inputNames: ['x', 'mask'],
    args: [
      { name: 'value', type: 'float', doc: 'the fill where the mask is non-zero (`-inf` allowed)' },
      { name: 'causal', type: 'bool', default: false, doc: 'also fill the future: element (t, s) of the last two dims [T, S] when s > t + S - T' },
    ],
    doc: 'x with value where mask != 0 (torch.masked_fill); mask (f32 or i32) broadcasts; `masked_fill(att, value: -inf, causal: true)` needs no mask tensor.',
    shapeRule: 'broadcast of x and mask',
    infer(x, a, ctx) {
      const s = x[0];
      if (!needF32(s, ctx)) return null;
      let shape = s.shape;
      if (x.length > 1) {
        const b = broadcastShapes(s.shape, x[1].shape);
        if (b === null) return ctx.fail(`${ctx.what}: mask ${fmtTensor(x[1])} does not broadcast with ${fmtTensor(s)}`, 'each dim must be equal or 1 (aligned at the right)');
        shape = b;
      } else if (!a.causal) return ctx.fail(`${ctx.what} needs a mask tensor or causal: true`, 'masked_fill(x, mask, value: ...) or masked_fill(x, value: -inf, causal: true)');
      if (a.causal && (s.shape.length < 3 || s.shape[s.shape.length - 1] < s.shape[s.shape.length - 2])) return ctx.fail(`${ctx.what}: causal needs [N, ..., T, S] with S >= T, got ${fmtTensor(s)}`);
      // without a mask tensor the op's optional mask input is absent (-1)
      return { op: 'masked_fill', attrs: { value: a.value as number, causal: a.causal as boolean, invert: false }, out: f32(shape), params: x.length > 1 ? [] : [null] };
    },
  },
  {
    name: 'where',
    role: 'layer',
    inputs: 3,
    inputNames: ['mask', 'a', 'b'],
    args: [],
    doc: 'mask != 0 ? a : b element-wise with broadcasting (torch.where); the gradient reaches a and b.',
    shapeRule: 'broadcast of mask, a and b',
    infer(x, _a, ctx) {
      const [m, p, q] = x;
      if (p.dtype !== 'f32' || q.dtype !== 'f32') return ctx.fail(`${ctx.what} expects f32 a and b, got ${fmtTensor(p)} and ${fmtTensor(q)}`);
      const pa = broadcastShapes(m.shape, p.shape);
      const qb = broadcastShapes(m.shape, q.shape);
      const all = pa && qb ? broadcastShapes(pa, qb) : null;
      if (!pa || !qb || !all) return ctx.fail(`${ctx.what}: ${fmtTensor(m)}, ${fmtTensor(p)} and ${fmtTensor(q)} do not broadcast`, 'each dim must be equal or 1 (aligned at the right)');
      // where(m, a, b) = masked_fill(a, m, 0, invert) + masked_fill(b, m, 0)
      const steps: PlanStep[] = [
        { op: 'masked_fill', inputs: [{ in: 1 }, { in: 0 }], attrs: { value: 0, causal: false, invert: true }, outs: [{ suffix: 'a_part', dtype: 'f32', shape: pa }] },
        { op: 'masked_fill', inputs: [{ in: 2 }, { in: 0 }], attrs: { value: 0, causal: false, invert: false }, outs: [{ suffix: 'b_part', dtype: 'f32', shape: qb }] },
        { op: 'binary', inputs: [{ step: 0 }, { step: 1 }], attrs: { fn: 'add' }, outs: [{ suffix: 'out', dtype: 'f32', shape: all }] },
      ];
      return { op: 'where', attrs: {}, out: f32(all), params: [], steps };
    },
  },
  unaryMath('exp'),
  unaryMath('log'),
  unaryMath('sqrt'),
  unaryMath('rsqrt'),
  unaryMath('abs'),
  unaryMath('pow', { p: 'the exponent (a number)' }),
  activation('affine', { internal: true, doc: '`x * c`, `x / c`, `c - x`, `x + c` with a number c (written with the operator): x*scale + shift' }),
];

const LIST: LayerDef[] = [
  {
    name: 'linear',
    role: 'layer',
    inputs: 1,
    inputNames: ['x'],
    args: [
      { name: 'out_features', type: 'int', min: 1, doc: 'output features' },
      BIAS,
      INIT,
      { name: 'tied_to', type: 'layer_ref', default: null, doc: "an earlier layer whose weight [out, in] this layer uses (weight tying: `tied_to: tok` shares an embedding's [num, dim] table)" },
    ],
    doc: 'Fully connected layer y = x W^T + b on the last dim (torch.nn.Linear). Parameters: weight [out, in], bias [out]; with tied_to the weight is the other layer\'s (one parameter, gradients summed, stored once).',
    shapeRule: '[N, ..., in] -> [N, ..., out_features]',
    infer(x, a, ctx) {
      const s = x[0];
      if (s.shape.length < 2) return ctx.fail(`${ctx.what} expects [N, ..., features], got ${fmtTensor(s)}`);
      if (!needF32(s, ctx)) return null;
      const inF = s.shape[s.shape.length - 1];
      const out = a.out_features as number;
      let tiedTo: string | undefined;
      if (a.tied_to !== null) {
        tiedTo = `${a.tied_to as string}.weight`;
        const t = ctx.paramShape(tiedTo);
        if (t === null) return ctx.fail(`${ctx.what}: tied_to '${a.tied_to}' names a layer without a weight`, 'tie to an embedding or a linear layer');
        if (t.length !== 2 || t[0] !== out || t[1] !== inF)
          return ctx.fail(`${ctx.what}: tied_to '${a.tied_to}' has weight ${fmtDims(t)}, but this layer needs [${out}, ${inF}] ([out_features, in])`, `give this layer out_features ${t[0]} and an input with ${t[1]} features`);
        if (a.init !== null) return ctx.fail(`${ctx.what}: init and tied_to exclude each other`, 'the tied weight is initialised by its own layer');
      }
      return {
        op: 'linear',
        attrs: {},
        out: f32([...s.shape.slice(0, -1), out]),
        params: [
          { name: 'weight', shape: [out, inF], kind: 'param', init: (a.init as InitSpec | null) ?? { kind: 'default_weight' }, ...(tiedTo ? { tiedTo } : {}) },
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
    args: [
      { name: 'eps', type: 'float', default: 1e-5, min: 0, minExclusive: true, doc: 'added to the variance' },
      { name: 'elementwise_affine', type: 'bool', default: true, doc: 'learn weight and bias (false: neither)' },
      { name: 'bias', type: 'bool', default: true, doc: 'learn the bias (with elementwise_affine)' },
    ],
    doc: 'Layer normalisation over the last dim (torch.nn.LayerNorm(D, eps, elementwise_affine, bias)). Parameters weight (ones), bias (zeros), each [D].',
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
          a.elementwise_affine ? { name: 'weight', shape: [d], kind: 'param', init: { kind: 'ones' } } : null,
          a.elementwise_affine && a.bias ? { name: 'bias', shape: [d], kind: 'param', init: { kind: 'zeros' } } : null,
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
  binary('div', 'div', '/'),
  ...TENSOR_LAYERS,
  // ------------------------------------------------------------- losses
  classLoss('cross_entropy', 'loss', 'cross_entropy', 'Softmax cross entropy on raw logits, classes in the last dim, mean over every position (torch.nn.functional.cross_entropy on the logits reshaped to [-1, C]).', [
    { name: 'label_smoothing', type: 'float', default: 0, min: 0, max: 1, maxExclusive: true, doc: 'label smoothing factor' },
    IGNORE_INDEX,
  ], 'logits'),
  classLoss('nll', 'loss', 'nll', 'Negative log likelihood on log-probabilities (use after log_softmax over the last dim), mean over every position.', [IGNORE_INDEX], 'logp'),
  sameShapeLoss('mse', 'Mean squared error.', ['pred', 'target']),
  sameShapeLoss('bce_with_logits', 'Binary cross entropy on logits with f32 targets in [0, 1].', ['logits', 'target']),
  // ------------------------------------------------------------- metrics
  classLoss('accuracy', 'metric', 'accuracy', 'Fraction of positions whose argmax (over the last dim) equals the label.', [IGNORE_INDEX], 'logits'),
  classLoss('top_k', 'metric', 'top_k', 'Fraction of positions whose label is among the k largest logits.', [{ name: 'k', type: 'int', default: 5, min: 1, doc: 'how many top classes count' }, IGNORE_INDEX], 'logits'),
];

export const LAYERS: Record<string, LayerDef> = Object.fromEntries(LIST.map((d) => [d.name, d]));

export function layersWithRole(role: LayerRole, includeInternal = false): LayerDef[] {
  return LIST.filter((d) => d.role === role && (includeInternal || !d.internal));
}

export type { DType };
