/**
 * PyTorch export: `model.py`, a plain `torch.nn.Module` generated from the spec, whose
 * `state_dict()` keys are exactly the checkpoint's names, plus the tensors for
 * `model.safetensors` (parameters and buffers only).
 *
 * Consumes: a CheckedModel (training-form forward graph, so dropout and batchnorm follow
 *           the module's train() / eval() mode as in torch) and its weights (weights.ts).
 * Produces: `{ source, tensors }`: the Python source and the tensors to write.
 *           Layers with parameters become submodules at their parameter paths (`fc1` ->
 *           nn.Linear, `stem.conv2d0` -> nn.Conv2d inside a container `stem`); layers without
 *           become functional calls in forward(). forward takes the spec inputs the network
 *           reads (by their spec names) and returns the network output the loss reads
 *           (heads.ts), or a dict by name when the loss and metrics read several.
 * Relies on: the scalar-function table's `torch` spelling of each unary function; ops.ts semantics matching torch's (conv padding zeros, max-pool -inf padding,
 *           avg-pool count_include_pad=True, exact gelu, batchnorm unbiased running var).
 */
import { UserError } from '../errors.js';
import type { Graph, Node } from '../ir/graph.js';
import { isUnaryFn, UNARY_FNS_TABLE } from '../ir/scalar_fns.js';
import type { CheckedModel } from '../model.js';
import type { StWriteTensor } from '../../runtime/safetensors.js';
import { forwardNodesFor, networkOutputs } from './heads.js';
import type { ExportWeights } from './weights.js';

const PY_KEYWORDS = new Set(
  'False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield'.split(' '),
);
const isPyIdent = (s: string) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(s) && !PY_KEYWORDS.has(s);

function pyFloat(x: number): string {
  if (Number.isInteger(x)) return `${x}.0`;
  return String(x);
}

function pyTuple(a: unknown, dflt: number): string {
  const v = Array.isArray(a) ? a : typeof a === 'number' ? [a, a] : [dflt, dflt];
  return `(${v[0]}, ${v[1]})`;
}

function modRef(path: string): string {
  return path.split('.').every(isPyIdent) ? `self.${path}` : `self.get_submodule(${JSON.stringify(path)})`;
}


export interface TorchExport {
  source: string;
  tensors: Map<string, StWriteTensor>;
  className: string;
}

export function exportTorch(model: CheckedModel, weights: ExportWeights, producerVersion: string): TorchExport {
  const g = model.graph;
  const heads = networkOutputs(model);
  if (heads.length === 0) throw new UserError(`${model.file}: error: model '${model.name}' has no loss or metric that reads a network value, so there is nothing to export`);
  const nodes = forwardNodesFor(g, heads.map((h) => h.value));
  const inputs = model.inputs.filter((i) => nodes.some((n) => n.inputs.includes(i.value)));
  const local = new Map<number, string>();
  const taken = new Set<string>(['self', 'torch', 'nn', 'F']);
  inputs.forEach((i) => {
    const name = isPyIdent(i.name) && !taken.has(i.name) ? i.name : `input_${i.value}`;
    taken.add(name);
    local.set(i.value, name);
  });
  const v = (id: number) => {
    let s = local.get(id);
    if (s === undefined) {
      s = `v${id}`;
      local.set(id, s);
    }
    return s;
  };

  const modules: { path: string; ctor: string }[] = [];
  const body: string[] = [];
  const modulePathOf = (n: Node) => {
    const w = g.values[n.inputs[1]];
    return w.name.slice(0, w.name.lastIndexOf('.'));
  };
  for (const n of nodes) {
    const a = n.attrs;
    const x = v(n.inputs[0]);
    const y = v(n.outputs[0]);
    const has = (k: number) => n.inputs[k] !== undefined && n.inputs[k] >= 0;
    switch (n.op) {
      case 'linear': {
        const w = g.values[n.inputs[1]];
        const path = modulePathOf(n);
        modules.push({ path, ctor: `nn.Linear(${w.shape[1]}, ${w.shape[0]}, bias=${has(2) ? 'True' : 'False'})` });
        body.push(`${y} = ${modRef(path)}(${x})`);
        break;
      }
      case 'conv2d': {
        const w = g.values[n.inputs[1]];
        const groups = typeof a.groups === 'number' ? a.groups : 1;
        const path = modulePathOf(n);
        modules.push({
          path,
          ctor: `nn.Conv2d(${w.shape[1] * groups}, ${w.shape[0]}, (${w.shape[2]}, ${w.shape[3]}), stride=${pyTuple(a.stride, 1)}, padding=${pyTuple(a.padding, 0)}, dilation=${pyTuple(a.dilation, 1)}, groups=${groups}, bias=${has(2) ? 'True' : 'False'})`,
        });
        body.push(`${y} = ${modRef(path)}(${x})`);
        break;
      }
      case 'batchnorm_train': {
        const w = g.values[n.inputs[1]];
        const rank = g.values[n.inputs[0]].shape.length;
        const path = modulePathOf(n);
        const eps = typeof a.eps === 'number' ? a.eps : 1e-5;
        const mom = typeof a.momentum === 'number' ? a.momentum : 0.1;
        modules.push({ path, ctor: `nn.BatchNorm${rank === 4 ? '2d' : '1d'}(${w.shape[0]}, eps=${pyFloat(eps)}, momentum=${pyFloat(mom)})` });
        body.push(`${y} = ${modRef(path)}(${x})`);
        break;
      }
      case 'layernorm': {
        const w = g.values[n.inputs[1]];
        const path = modulePathOf(n);
        modules.push({ path, ctor: `nn.LayerNorm(${w.shape[0]}, eps=${pyFloat(typeof a.eps === 'number' ? a.eps : 1e-5)})` });
        body.push(`${y} = ${modRef(path)}(${x})`);
        break;
      }
      case 'embedding': {
        const w = g.values[n.inputs[1]];
        const path = modulePathOf(n);
        modules.push({ path, ctor: `nn.Embedding(${w.shape[0]}, ${w.shape[1]})` });
        body.push(`${y} = ${modRef(path)}(${x}.long())`);
        break;
      }
      case 'maxpool2d':
        body.push(`${y} = F.max_pool2d(${x}, ${pyTuple(a.kernel, 2)}, stride=${pyTuple(a.stride ?? a.kernel, 2)}, padding=${pyTuple(a.padding, 0)})`);
        break;
      case 'avgpool2d':
        body.push(`${y} = F.avg_pool2d(${x}, ${pyTuple(a.kernel, 2)}, stride=${pyTuple(a.stride ?? a.kernel, 2)}, padding=${pyTuple(a.padding, 0)}, count_include_pad=True)`);
        break;
      case 'global_avgpool':
        body.push(`${y} = F.adaptive_avg_pool2d(${x}, 1)`);
        break;
      case 'reshape': {
        const shape = a.shape as number[];
        if (shape.some((d) => d < -1) || shape.filter((d) => d === -1).length > 1) {
          throw new UserError(`${model.file}: error: cannot export reshape at '${n.path ?? n.op}': its target shape [${shape.join(', ')}] mixes the batch size into another dimension`);
        }
        body.push(`${y} = ${x}.reshape(${shape.join(', ')})`);
        break;
      }
      case 'dropout':
        body.push(`${y} = F.dropout(${x}, p=${pyFloat(Number(a.p))}, training=self.training)`);
        break;
      case 'unary': {
        const fn = String(a.fn);
        if (!isUnaryFn(fn)) throw unsupported(model, n, `unary function '${fn}'`);
        // the table's torch spelling, with x and each attribute (the node's value, else the table default) filled in
        const def = UNARY_FNS_TABLE[fn];
        const vals: Record<string, string> = { x };
        for (const [k, dflt] of Object.entries(def.attrs as Record<string, number>)) vals[k] = pyFloat(typeof a[k] === 'number' ? (a[k] as number) : dflt);
        body.push(`${y} = ${def.torch.replace(/\b[A-Za-z_]\w*\b/g, (w) => vals[w] ?? w)}`);
        break;
      }
      case 'binary': {
        const op = { add: '+', sub: '-', mul: '*' }[String(a.fn)];
        if (!op) throw unsupported(model, n, `binary function '${String(a.fn)}'`);
        body.push(`${y} = ${x} ${op} ${v(n.inputs[1])}`);
        break;
      }
      case 'softmax':
        body.push(`${y} = torch.softmax(${x}, dim=${Number(a.axis)})`);
        break;
      case 'log_softmax':
        body.push(`${y} = torch.log_softmax(${x}, dim=${Number(a.axis)})`);
        break;
      case 'concat':
        body.push(`${y} = torch.cat([${n.inputs.map(v).join(', ')}], dim=${Number(a.axis)})`);
        break;
      default:
        throw unsupported(model, n, `op '${n.op}'`);
    }
  }
  const ret = heads.length === 1 ? v(heads[0].value) : `{${heads.map((h) => `${JSON.stringify(h.name)}: ${v(h.value)}`).join(', ')}}`;

  // containers for dotted module paths, created parent first
  const containers: string[] = [];
  const seen = new Set<string>();
  for (const m of modules) {
    const parts = m.path.split('.');
    for (let k = 1; k < parts.length; k++) {
      const p = parts.slice(0, k).join('.');
      if (!seen.has(p)) {
        seen.add(p);
        containers.push(p);
      }
    }
  }
  const put = (path: string, ctor: string) => {
    const k = path.lastIndexOf('.');
    const parent = k < 0 ? 'self' : `self.get_submodule(${JSON.stringify(path.slice(0, k))})`;
    return `        ${parent}.add_module(${JSON.stringify(path.slice(k + 1))}, ${ctor})`;
  };
  const className = pyClassName(model.name);
  const src: string[] = [];
  src.push(`# Generated by mpsc ${producerVersion} from ${model.file.replace(/\\/g, '/').split('/').pop()} (model '${model.name}'); do not edit.`);
  src.push(`# A plain torch.nn.Module whose state_dict() keys are mpsc's checkpoint names:`);
  src.push(`#   model = ${className}(); model.load_state_dict(read_safetensors("model.safetensors"), strict=True)`);
  src.push(`# forward(${inputs.map((i) => local.get(i.value)).join(', ')}) returns ${heads.length === 1 ? `'${heads[0].name}'` : `a dict of ${heads.map((h) => `'${h.name}'`).join(', ')}`}.`);
  src.push('import json', 'import struct', '', 'import torch', 'import torch.nn as nn', 'import torch.nn.functional as F', '', '');
  src.push(`class ${className}(nn.Module):`);
  src.push('    def __init__(self):');
  src.push('        super().__init__()');
  for (const c of containers) src.push(put(c, 'nn.Module()'));
  for (const m of modules) src.push(put(m.path, m.ctor));
  src.push('');
  src.push(`    def forward(self, ${inputs.map((i) => local.get(i.value)).join(', ')}):`);
  for (const line of body) src.push(`        ${line}`);
  src.push(`        return ${ret}`);
  src.push('', '');
  src.push('_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}', '', '');
  src.push('def read_safetensors(path):');
  src.push('    """The tensors of a safetensors file by name (stdlib + torch only)."""');
  src.push('    with open(path, "rb") as f:');
  src.push('        raw = f.read()');
  src.push('    (n,) = struct.unpack("<Q", raw[:8])');
  src.push('    header = json.loads(raw[8:8 + n])');
  src.push('    header.pop("__metadata__", None)');
  src.push('    out = {}');
  src.push('    for name, t in header.items():');
  src.push('        b, e = t["data_offsets"]');
  src.push('        out[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])');
  src.push('    return out', '', '');
  src.push('def load(path="model.safetensors"):');
  src.push(`    """A ${className} in eval mode with the exported weights (strict: every name must match)."""`);
  src.push(`    model = ${className}()`);
  src.push('    model.load_state_dict(read_safetensors(path), strict=True)');
  src.push('    return model.eval()');

  const tensors = new Map<string, StWriteTensor>();
  for (const [name, t] of weights.tensors) tensors.set(name, { shape: t.shape, data: t.data });
  for (const [layer, count] of weights.batchesTracked) tensors.set(`${layer}.num_batches_tracked`, { shape: [], data: BigInt64Array.of(count) });
  return { source: src.join('\n') + '\n', tensors, className };
}

function pyClassName(name: string): string {
  const camel = name.replace(/(^|[^A-Za-z0-9])([A-Za-z0-9])/g, (_, __, c: string) => c.toUpperCase()).replace(/[^A-Za-z0-9]/g, '');
  const s = /^[A-Za-z]/.test(camel) ? camel : `Model${camel}`;
  return s.length > 0 ? s : 'Model';
}

function unsupported(model: CheckedModel, n: Node, what: string): UserError {
  const at = n.loc ? `${n.loc.file}:${n.loc.line}:${n.loc.col}` : model.file;
  return new UserError(`${at}: error: PyTorch export does not support ${what}${n.path ? ` (layer '${n.path}')` : ''}`);
}
