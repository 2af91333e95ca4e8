/**
 * ONNX export: the eval graph of a model as an ONNX ModelProto (opset 17, IR version 8).
 *
 * Consumes: a CheckedModel and its weights (weights.ts).
 * Produces: the serialised model bytes. Graph inputs are the spec inputs the network reads,
 *           named as in the spec, with a symbolic batch dimension `N`; graph outputs are the
 *           network outputs the loss and metrics read (heads.ts, e.g. `logits`); parameters
 *           and buffers are initializers named by their torch names. Loss and metric nodes
 *           and everything only they need are left out.
 * Relies on: eval_mode.ts on the unbound graph (BATCH = -1 stays in value shapes and in
 *           reshape's `shape`, where ONNX's Reshape reads -1 as "the rest"; where a shape tensor
 *           needs the batch size itself, e.g. broadcast_to, it is read at run time with Shape);
 *           the official `onnx.proto` schema (vendored beside this file, Apache-2.0) encoded with
 *           protobufjs. Every forward op of the catalogue maps to standard opset-17 operators:
 *           linear -> Gemm (2-D) or MatMul + Add, matmul -> MatMul (Transpose for transA / transB),
 *           attention -> MatMul, scale, the causal mask as a constant bool triangle in Where, Softmax,
 *           MatMul (attention_qkv: the same after Reshape / Transpose / Gather of the packed q, k, v,
 *           then Transpose / Reshape of o to [N,T,C]); positions -> a constant 0..T-1 row Expanded to Shape(ids)[0:2]; gelu -> Erf;
 *           masked_fill -> Where. An op or function without a mapping is a UserError naming it.
 */
import protobuf from 'protobufjs';
import { fileURLToPath } from 'node:url';
import { UserError } from '../errors.js';
import { hostDType, type AttrValue, type Graph, type Node } from '../ir/graph.js';
import { evalMode } from '../ir/eval_mode.js';
import type { CheckedModel } from '../model.js';
import { forwardNodesFor, networkOutputs } from './heads.js';
import type { ExportWeights } from './weights.js';

export const ONNX_OPSET = 17;
const IR_VERSION = 8;
const FLOAT = 1;
const INT32 = 6;
const INT64 = 7;
const BOOL = 9;
const ATTR = { FLOAT: 1, INT: 2, INTS: 7 } as const;

let modelProto: protobuf.Type | null = null;
function modelType(): protobuf.Type {
  if (!modelProto) modelProto = protobuf.loadSync(fileURLToPath(new URL('./onnx.proto', import.meta.url))).lookupType('onnx.ModelProto');
  return modelProto;
}

interface OnnxAttr { name: string; type: number; f?: number; i?: number; ints?: number[] }
interface OnnxNode { name: string; opType: string; input: string[]; output: string[]; attribute: OnnxAttr[] }
interface OnnxTensor { name: string; dims: number[]; dataType: number; rawData: Uint8Array }

const intAttr = (name: string, i: number): OnnxAttr => ({ name, type: ATTR.INT, i });
const intsAttr = (name: string, ints: number[]): OnnxAttr => ({ name, type: ATTR.INTS, ints });
const floatAttr = (name: string, f: number): OnnxAttr => ({ name, type: ATTR.FLOAT, f });

function pair(a: AttrValue | undefined, dflt: number): [number, number] {
  if (Array.isArray(a)) return [a[0], a[1]];
  if (typeof a === 'number') return [a, a];
  return [dflt, dflt];
}

function num(a: AttrValue | undefined, dflt: number): number {
  return typeof a === 'number' ? a : dflt;
}

function valueInfo(name: string, dtype: 'f32' | 'i32', shape: number[]) {
  return {
    name,
    type: { tensorType: { elemType: dtype === 'f32' ? FLOAT : INT32, shape: { dim: shape.map((d) => (d < 0 ? { dimParam: 'N' } : { dimValue: d })) } } },
  };
}


export interface OnnxExport {
  bytes: Uint8Array;
  inputs: string[];
  outputs: string[];
  nodes: number;
}

export function exportOnnx(model: CheckedModel, weights: ExportWeights, producerVersion: string): OnnxExport {
  const heads = networkOutputs(model);
  if (heads.length === 0) throw new UserError(`${model.file}: error: model '${model.name}' has no loss or metric that reads a network value, so there is nothing to export\n  hint: add a loss such as \`loss cross_entropy(logits, label)\``);
  const { graph, idMap } = evalMode(model.graph);
  const outIds = heads.map((h) => idMap[h.value]);
  const nodes = forwardNodesFor(graph, outIds);

  // ONNX names: spec inputs and persistent values keep theirs; outputs get the spec's names; others are made unique
  const names = new Map<number, string>();
  const used = new Set<string>();
  const claim = (id: number, want: string) => {
    let n = want;
    for (let k = 2; used.has(n); k++) n = `${want}_${k}`;
    used.add(n);
    names.set(id, n);
  };
  for (const v of graph.values) if (v.kind === 'input' || v.kind === 'param' || v.kind === 'state') claim(v.id, v.name);
  heads.forEach((h, k) => claim(outIds[k], h.name));
  for (const n of nodes) for (const o of n.outputs) if (!names.has(o)) claim(o, graph.values[o].name);
  const nm = (id: number) => names.get(id)!;

  const onnxNodes: OnnxNode[] = [];
  const initializers: OnnxTensor[] = [];
  const readInputs = new Set<number>();
  const readPersistent = new Set<number>();
  let tmp = 0;
  const fresh = (base: string) => {
    let n = `${base}/${tmp++}`;
    while (used.has(n)) n = `${base}/${tmp++}`;
    used.add(n);
    return n;
  };
  const constInit = (base: string, dims: number[], dataType: number, rawData: Uint8Array): string => {
    const name = fresh(base);
    initializers.push({ name, dims, dataType, rawData });
    return name;
  };
  const scalarF32 = (base: string, x: number) => constInit(base, [], FLOAT, new Uint8Array(Float32Array.of(x).buffer));
  const int64s = (base: string, xs: number[]) => constInit(base, [xs.length], INT64, new Uint8Array(BigInt64Array.from(xs, (d) => BigInt(d)).buffer));
  const zeroOf = (base: string, dtype: 'f32' | 'i32') =>
    dtype === 'f32' ? scalarF32(base, 0) : constInit(base, [], INT32, new Uint8Array(Int32Array.of(0).buffer));
  /** the causal rule of masked_fill / attention over [T, S] as a bool constant: true where s > t + (S - T) */
  const causalMask = (base: string, T: number, S: number) => {
    const m = new Uint8Array(T * S);
    for (let t = 0; t < T; t++) for (let s = 0; s < S; s++) m[t * S + s] = s > t + (S - T) ? 1 : 0;
    return constInit(base, [T, S], BOOL, m);
  };
  // the batch size at run time ([1] int64, from the first spec input the network reads), made once when needed
  let batchDim: string | null = null;
  const firstInput = () => {
    const id = nodes.flatMap((n) => n.inputs).find((i) => i >= 0 && graph.values[i].kind === 'input');
    if (id === undefined) throw new Error('internal: ONNX export: a shape needs the batch size but the network reads no input');
    return id;
  };

  for (const n of nodes) {
    for (const i of n.inputs) {
      if (i < 0) continue;
      const v = graph.values[i];
      if (v.kind === 'input') readInputs.add(i);
      else if (v.kind === 'param' || v.kind === 'state') readPersistent.add(i);
    }
    const where = `${n.path ?? n.op}`;
    const ins = n.inputs.map((i) => (i < 0 ? '' : nm(i)));
    const shapeOf = (k: number) => graph.values[n.inputs[k]].shape;
    const out = nm(n.outputs[0]);
    const emit = (opType: string, input: string[], output: string[], attribute: OnnxAttr[] = []) =>
      onnxNodes.push({ name: fresh(where), opType, input, output, attribute });
    const t = (what: string) => fresh(`${where}/${what}`);
    /** x with its last two dims swapped (a new value) */
    const swapLast2 = (x: string, rank: number) => {
      const y = t('transpose');
      emit('Transpose', [x], [y], [intsAttr('perm', [...Array.from({ length: rank - 2 }, (_, i) => i), rank - 1, rank - 2])]);
      return y;
    };
    /** softmax(q kᵀ * scale, causal -inf) v of [.., T, D] / [.., S, D] operands into `o` (attention's core) */
    const sdpa = (q: string, k: string, v: string, T: number, S: number, o: string) => {
      const s = t('scores'), ss = t('scaled'), p = t('probs');
      emit('MatMul', [q, swapLast2(k, 4)], [s]);
      emit('Mul', [s, scalarF32(`${where}/scale`, num(n.attrs.scale, 1))], [ss]);
      let logits = ss;
      if (n.attrs.causal === true) {
        logits = t('masked');
        emit('Where', [causalMask(`${where}/causal`, T, S), scalarF32(`${where}/neg_inf`, -Infinity), ss], [logits]);
      }
      emit('Softmax', [logits], [p], [intAttr('axis', -1)]);
      emit('MatMul', [p, v], [o]);
    };
    /** an int64 shape tensor for `shape`, with the batch size read at run time where it says -1 */
    const shapeTensor = (shape: number[]) => {
      if (!shape.includes(-1)) return int64s(`${where}/shape`, shape);
      if (batchDim === null) {
        batchDim = fresh('batch_size');
        onnxNodes.push({ name: fresh('batch_size'), opType: 'Shape', input: [nm(firstInput())], output: [batchDim], attribute: [intAttr('start', 0), intAttr('end', 1)] });
      }
      const parts = shape.map((d) => (d === -1 ? batchDim! : int64s(`${where}/dim`, [d])));
      const s = t('shape');
      emit('Concat', parts, [s], [intAttr('axis', 0)]);
      return s;
    };
    switch (n.op) {
      case 'linear': {
        const bias = n.inputs[2] !== undefined && n.inputs[2] >= 0 ? [ins[2]] : [];
        if (shapeOf(0).length === 2) {
          emit('Gemm', [ins[0], ins[1], ...bias], [out], [intAttr('transB', 1)]);
          break;
        }
        // x [..., K]: MatMul with weightᵀ over the last dim, then the bias
        const wt = swapLast2(ins[1], 2);
        if (bias.length === 0) emit('MatMul', [ins[0], wt], [out]);
        else {
          const mm = t('matmul');
          emit('MatMul', [ins[0], wt], [mm]);
          emit('Add', [mm, bias[0]], [out]);
        }
        break;
      }
      case 'matmul': {
        const a = n.attrs.transA === true ? swapLast2(ins[0], shapeOf(0).length) : ins[0];
        const b = n.attrs.transB === true ? swapLast2(ins[1], shapeOf(1).length) : ins[1];
        emit('MatMul', [a, b], [out]);
        break;
      }
      case 'attention':
        // softmax(q kᵀ * scale, causal -inf) v per (n, h); lse (output 1) is a training-only value
        sdpa(ins[0], ins[1], ins[2], shapeOf(0)[2], shapeOf(1)[2], out);
        break;
      case 'attention_qkv': {
        // qkv [N,T,3C] -> [N,T,3,H,D] -> [3,N,H,T,D] -> q, k, v [N,H,T,D]; o [N,H,T,D] -> [N,T,H,D] -> [N,T,C]
        const [T, C3] = [shapeOf(0)[1], shapeOf(0)[2]], H = num(n.attrs.heads, 1), D = C3 / 3 / H;
        const split = t('qkv_split'), heads = t('qkv_heads'), o = t('o'), merged = t('o_merge');
        emit('Reshape', [ins[0], int64s(`${where}/shape`, [-1, T, 3, H, D])], [split]);
        emit('Transpose', [split], [heads], [intsAttr('perm', [2, 0, 3, 1, 4])]);
        const [q, k, v] = [0, 1, 2].map((j) => {
          const y = t(['q', 'k', 'v'][j]);
          emit('Gather', [heads, constInit(`${where}/index`, [], INT64, new Uint8Array(BigInt64Array.of(BigInt(j)).buffer))], [y], [intAttr('axis', 0)]);
          return y;
        });
        sdpa(q, k, v, T, T, o);
        emit('Transpose', [o], [merged], [intsAttr('perm', [0, 2, 1, 3])]);
        emit('Reshape', [merged, int64s(`${where}/shape`, [-1, T, C3 / 3])], [out]);
        break;
      }
      case 'conv2d': {
        const w = graph.values[n.inputs[1]];
        const [ph, pw] = pair(n.attrs.padding, 0);
        emit('Conv', ins.filter((s, k) => k < 2 || s !== ''), [out], [
          intsAttr('kernel_shape', [w.shape[2], w.shape[3]]),
          intsAttr('strides', pair(n.attrs.stride, 1)),
          intsAttr('pads', [ph, pw, ph, pw]),
          intsAttr('dilations', pair(n.attrs.dilation, 1)),
          intAttr('group', num(n.attrs.groups, 1)),
        ]);
        break;
      }
      case 'maxpool2d':
      case 'avgpool2d': {
        const k = pair(n.attrs.kernel, 2);
        const [ph, pw] = pair(n.attrs.padding, 0);
        const attrs = [intsAttr('kernel_shape', k), intsAttr('strides', pair(n.attrs.stride, k[0])), intsAttr('pads', [ph, pw, ph, pw])];
        if (n.op === 'avgpool2d') attrs.push(intAttr('count_include_pad', 1));
        emit(n.op === 'maxpool2d' ? 'MaxPool' : 'AveragePool', [ins[0]], [out], attrs);
        break;
      }
      case 'global_avgpool':
        emit('GlobalAveragePool', [ins[0]], [out]);
        break;
      case 'reshape': {
        const shape = n.attrs.shape as number[];
        if (shape.some((d) => d < -1) || shape.filter((d) => d === -1).length > 1) {
          throw new UserError(`${model.file}: error: cannot export reshape at '${where}' to ONNX: its target shape [${shape.join(', ')}] mixes the batch size into another dimension\n  hint: keep the batch dimension N first and separate in reshape / flatten`);
        }
        emit('Reshape', [ins[0], int64s(`${where}/shape`, shape)], [out]);
        break;
      }
      case 'permute':
        emit('Transpose', [ins[0]], [out], [intsAttr('perm', n.attrs.perm as number[])]);
        break;
      case 'slice': {
        const [axis, start, length] = [num(n.attrs.axis, 0), num(n.attrs.start, 0), num(n.attrs.length, 1)];
        emit('Slice', [ins[0], int64s(`${where}/starts`, [start]), int64s(`${where}/ends`, [start + length]), int64s(`${where}/axes`, [axis])], [out]);
        break;
      }
      case 'pad': {
        // mpsc: [before0, after0, before1, after1, ...]; ONNX: [before0, before1, ..., after0, after1, ...]
        const pads = n.attrs.pads as number[];
        const onnxPads = [...pads.filter((_, i) => i % 2 === 0), ...pads.filter((_, i) => i % 2 === 1)];
        emit('Pad', [ins[0], int64s(`${where}/pads`, onnxPads), scalarF32(`${where}/value`, num(n.attrs.value, 0))], [out]);
        break;
      }
      case 'broadcast_to':
        emit('Expand', [ins[0], shapeTensor(n.attrs.shape as number[])], [out]);
        break;
      case 'reduce': {
        const fn = String(n.attrs.fn);
        const axes = n.attrs.axes as number[];
        const keep = intAttr('keepdims', n.attrs.keepdim === true ? 1 : 0);
        // opset 17: ReduceSum takes the axes as an input, ReduceMean / ReduceMax as an attribute
        if (fn === 'sum') emit('ReduceSum', [ins[0], int64s(`${where}/axes`, axes)], [out], [keep]);
        else if (fn === 'mean' || fn === 'max') emit(fn === 'mean' ? 'ReduceMean' : 'ReduceMax', [ins[0]], [out], [intsAttr('axes', axes), keep]);
        else throw unsupported(model, n, `reduce function '${fn}'`);
        break;
      }
      case 'masked_fill': {
        // y = masked ? value : x, with y the broadcast of x and the mask
        const conds: string[] = [];
        if (ins[1] !== undefined && ins[1] !== '') {
          const eq = t('is_zero');
          emit('Equal', [ins[1], zeroOf(`${where}/zero`, hostDType(graph.values[n.inputs[1]]))], [eq]);
          if (n.attrs.invert === true) conds.push(eq);
          else {
            const ne = t('nonzero');
            emit('Not', [eq], [ne]);
            conds.push(ne);
          }
        }
        if (n.attrs.causal === true) {
          const xs = shapeOf(0);
          conds.push(causalMask(`${where}/causal`, xs[xs.length - 2], xs[xs.length - 1]));
        }
        let cond = conds[0];
        if (conds.length === 2) {
          cond = t('mask');
          emit('Or', conds, [cond]);
        }
        emit('Where', [cond, scalarF32(`${where}/value`, num(n.attrs.value, 0)), ins[0]], [out]);
        break;
      }
      case 'positions': {
        // pos[n, t] = t: the row 0..T-1 expanded to ids' [N, T]
        const T = shapeOf(0)[1];
        const row = constInit(`${where}/range`, [T], INT32, new Uint8Array(Int32Array.from({ length: T }, (_, i) => i).buffer));
        const nt = t('shape');
        emit('Shape', [ins[0]], [nt], [intAttr('start', 0), intAttr('end', 2)]);
        emit('Expand', [row, nt], [out]);
        break;
      }
      case 'unary': {
        const fn = String(n.attrs.fn);
        const at = (k: string, dflt: number) => num(n.attrs[k], dflt);
        const x = ins[0];
        const simple: Record<string, string> = { relu: 'Relu', sigmoid: 'Sigmoid', tanh: 'Tanh', neg: 'Neg', hardswish: 'HardSwish', exp: 'Exp', log: 'Log', sqrt: 'Sqrt', abs: 'Abs' };
        if (simple[fn]) emit(simple[fn], [x], [out]);
        else if (fn === 'leaky_relu') emit('LeakyRelu', [x], [out], [floatAttr('alpha', at('alpha', 0.01))]);
        else if (fn === 'elu') emit('Elu', [x], [out], [floatAttr('alpha', at('alpha', 1))]);
        else if (fn === 'relu6' || fn === 'hardtanh') {
          const [lo, hi] = fn === 'relu6' ? [0, 6] : [at('min_val', -1), at('max_val', 1)];
          emit('Clip', [x, scalarF32(`${where}/min`, lo), scalarF32(`${where}/max`, hi)], [out]);
        } else if (fn === 'rsqrt') {
          const s = t('sqrt');
          emit('Sqrt', [x], [s]);
          emit('Reciprocal', [s], [out]);
        } else if (fn === 'pow') emit('Pow', [x, scalarF32(`${where}/p`, at('p', 1))], [out]);
        else if (fn === 'affine') {
          const m = t('scaled');
          emit('Mul', [x, scalarF32(`${where}/scale`, at('scale', 1))], [m]);
          emit('Add', [m, scalarF32(`${where}/shift`, at('shift', 0))], [out]);
        } else if (fn === 'silu') {
          const s1 = t('sigmoid');
          emit('Sigmoid', [x], [s1]);
          emit('Mul', [x, s1], [out]);
        } else if (fn === 'gelu') {
          // opset 17 has no Gelu: 0.5 * x * (1 + erf(x / sqrt(2))), the exact form ops.ts defines
          const d = t('div'), e = t('erf'), a = t('add'), m = t('mul');
          emit('Div', [x, scalarF32(`${where}/sqrt2`, Math.SQRT2)], [d]);
          emit('Erf', [d], [e]);
          emit('Add', [e, scalarF32(`${where}/one`, 1)], [a]);
          emit('Mul', [x, a], [m]);
          emit('Mul', [m, scalarF32(`${where}/half`, 0.5)], [out]);
        } else if (fn === 'softplus') {
          // softplus(beta*x)/beta, or x where beta*x > threshold
          const beta = at('beta', 1);
          const bx = t('bx'), sp = t('softplus'), q = t('div'), gt = t('gt');
          emit('Mul', [x, scalarF32(`${where}/beta`, beta)], [bx]);
          emit('Softplus', [bx], [sp]);
          emit('Div', [sp, scalarF32(`${where}/beta`, beta)], [q]);
          emit('Greater', [bx, scalarF32(`${where}/threshold`, at('threshold', 20))], [gt]);
          emit('Where', [gt, x, q], [out]);
        } else if (fn === 'mish') {
          // opset 17 has no Mish: x * tanh(softplus(x))
          const sp = t('softplus'), th = t('tanh');
          emit('Softplus', [x], [sp]);
          emit('Tanh', [sp], [th]);
          emit('Mul', [x, th], [out]);
        } else throw unsupported(model, n, `unary function '${fn}'`);
        break;
      }
      case 'binary': {
        const fn = String(n.attrs.fn);
        const op = { add: 'Add', sub: 'Sub', mul: 'Mul', div: 'Div' }[fn];
        if (!op) throw unsupported(model, n, `binary function '${fn}'`);
        emit(op, [ins[0], ins[1]], [out]);
        break;
      }
      case 'softmax':
      case 'log_softmax':
        emit(n.op === 'softmax' ? 'Softmax' : 'LogSoftmax', [ins[0]], [out], [intAttr('axis', num(n.attrs.axis, -1))]);
        break;
      case 'batchnorm_eval':
        emit('BatchNormalization', ins.slice(0, 5), [out], [floatAttr('epsilon', num(n.attrs.eps, 1e-5))]);
        break;
      case 'layernorm':
        emit('LayerNormalization', ins.slice(0, 3), [out], [intAttr('axis', -1), floatAttr('epsilon', num(n.attrs.eps, 1e-5))]);
        break;
      case 'embedding':
        emit('Gather', [ins[1], ins[0]], [out], [intAttr('axis', 0)]);
        break;
      case 'concat':
        emit('Concat', ins, [out], [intAttr('axis', num(n.attrs.axis, 1))]);
        break;
      default:
        throw unsupported(model, n, `op '${n.op}'`);
    }
  }

  for (const id of readPersistent) {
    const v = graph.values[id];
    const w = weights.tensors.get(v.name);
    if (!w) throw new Error(`internal: no weights for '${v.name}' after reading them`);
    const data = Float32Array.from(w.data);
    initializers.push({ name: v.name, dims: w.shape, dataType: FLOAT, rawData: new Uint8Array(data.buffer) });
  }
  const inputs = model.inputs.filter((i) => readInputs.has(idMap[i.value]));
  const modelObj = {
    irVersion: IR_VERSION,
    opsetImport: [{ domain: '', version: ONNX_OPSET }],
    producerName: 'mpsc',
    producerVersion,
    graph: {
      name: model.name,
      node: onnxNodes,
      initializer: initializers,
      input: inputs.map((i) => valueInfo(i.name, i.dtype, i.shape)),
      output: heads.map((h, k) => {
        const v = graph.values[outIds[k]];
        return valueInfo(nm(outIds[k]), hostDType(v), v.shape);
      }),
    },
  };
  const T = modelType();
  const problem = T.verify(modelObj);
  if (problem) throw new Error(`internal: ONNX model does not match onnx.proto: ${problem}`);
  return { bytes: T.encode(T.fromObject(modelObj)).finish(), inputs: inputs.map((i) => i.name), outputs: heads.map((_, k) => nm(outIds[k])), nodes: onnxNodes.length };
}

function unsupported(model: CheckedModel, n: Node, what: string): UserError {
  const at = n.loc ? `${n.loc.file}:${n.loc.line}:${n.loc.col}` : model.file;
  return new UserError(`${at}: error: ONNX export does not support ${what}${n.path ? ` (layer '${n.path}')` : ''}\n  hint: export with --format torch, or use a layer ONNX opset ${ONNX_OPSET} can express`);
}
