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
 *           reshape's `shape`, where ONNX's Reshape reads -1 as "the rest"); the official
 *           `onnx.proto` schema (vendored beside this file, Apache-2.0) encoded with
 *           protobufjs. An op ONNX cannot express is a UserError naming it.
 */
import protobuf from 'protobufjs';
import { fileURLToPath } from 'node:url';
import { UserError } from '../errors.js';
import type { AttrValue, Graph, Node } from '../ir/graph.js';
import { evalMode } from '../ir/eval_mode.js';
import type { CheckedModel } from '../model.js';
import { forwardNodesFor, networkOutputs } from './heads.js';
import type { ExportWeights } from './weights.js';

export const ONNX_OPSET = 17;
const IR_VERSION = 8;
const FLOAT = 1;
const INT32 = 6;
const INT64 = 7;
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

  for (const n of nodes) {
    for (const i of n.inputs) {
      if (i < 0) continue;
      const v = graph.values[i];
      if (v.kind === 'input') readInputs.add(i);
      else if (v.kind === 'param' || v.kind === 'state') readPersistent.add(i);
    }
    const where = `${n.path ?? n.op}`;
    const ins = n.inputs.map((i) => (i < 0 ? '' : nm(i)));
    const out = nm(n.outputs[0]);
    const emit = (opType: string, input: string[], output: string[], attribute: OnnxAttr[] = []) =>
      onnxNodes.push({ name: fresh(where), opType, input, output, attribute });
    switch (n.op) {
      case 'linear': {
        // x [N, K] (the checker allows no other rank), weight [out, K]: Gemm with transB
        const bias = n.inputs[2] !== undefined && n.inputs[2] >= 0 ? [ins[2]] : [];
        emit('Gemm', [ins[0], ins[1], ...bias], [out], [intAttr('transB', 1)]);
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
        const s = constInit(`${where}/shape`, [shape.length], INT64, new Uint8Array(BigInt64Array.from(shape, (d) => BigInt(d)).buffer));
        emit('Reshape', [ins[0], s], [out]);
        break;
      }
      case 'unary': {
        const fn = String(n.attrs.fn);
        const at = (k: string, dflt: number) => num(n.attrs[k], dflt);
        const t = (what: string) => fresh(`${where}/${what}`);
        const x = ins[0];
        if (fn === 'relu') emit('Relu', [x], [out]);
        else if (fn === 'sigmoid') emit('Sigmoid', [x], [out]);
        else if (fn === 'tanh') emit('Tanh', [x], [out]);
        else if (fn === 'neg') emit('Neg', [x], [out]);
        else if (fn === 'leaky_relu') emit('LeakyRelu', [x], [out], [floatAttr('alpha', at('alpha', 0.01))]);
        else if (fn === 'elu') emit('Elu', [x], [out], [floatAttr('alpha', at('alpha', 1))]);
        else if (fn === 'hardswish') emit('HardSwish', [x], [out]);
        else if (fn === 'relu6' || fn === 'hardtanh') {
          const [lo, hi] = fn === 'relu6' ? [0, 6] : [at('min_val', -1), at('max_val', 1)];
          emit('Clip', [x, scalarF32(`${where}/min`, lo), scalarF32(`${where}/max`, hi)], [out]);
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
        const op = { add: 'Add', sub: 'Sub', mul: 'Mul' }[fn];
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
        return valueInfo(nm(outIds[k]), v.dtype, v.shape);
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
