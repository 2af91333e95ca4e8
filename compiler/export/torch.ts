/**
 * PyTorch export: `model.py`, a plain `torch.nn.Module` generated from the spec, whose
 * `state_dict()` keys are exactly the checkpoint's names, plus the tensors for
 * `model.safetensors` (parameters and buffers only).
 *
 * Consumes: a CheckedModel (training-form forward graph, so dropout and batchnorm follow
 *           the module's train() / eval() mode as in torch) and its weights (weights.ts).
 * Produces: `{ source, tensors }`: the Python source and the tensors to write.
 *           Layers with parameters become submodules at their parameter paths (`fc1` ->
 *           nn.Linear, `stem.conv2d0` -> nn.Conv2d inside a container `stem`); a tensor whose
 *           name does not fit a module (attention's `in_proj_weight`) or that a module already
 *           owns (a tied weight read by a second layer) is registered at its own path and read
 *           by an F.* call; layers without parameters (positions, attention's core as
 *           F.scaled_dot_product_attention, tensor algebra) become calls in forward(). forward takes the spec inputs the network
 *           reads (by their spec names) and returns the network output the loss reads
 *           (heads.ts), or a dict by name when the loss and metrics read several; the module-level
 *           INPUTS gives each input's dtype and shape (None for the batch dimension).
 * Relies on: the scalar-function table's `torch` spelling of each unary function; ops.ts semantics matching torch's (conv padding zeros, max-pool -inf padding,
 *           avg-pool count_include_pad=True, exact gelu, batchnorm unbiased running var).
 */
import { UserError } from '../errors.js';
import type { AttrValue, Graph, Node } from '../ir/graph.js';
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
  if (Number.isNaN(x)) return 'float("nan")';
  if (!Number.isFinite(x)) return x > 0 ? 'float("inf")' : 'float("-inf")';
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

  // Parameters and buffers: owned by a torch module (nn.Linear at `fc1` owns fc1.weight / fc1.bias)
  // when a layer's names follow torch's `<path>.weight` / `<path>.bias` pattern, else registered
  // one by one at their own path (attention's in_proj_weight, a tied weight read by a second layer)
  const modules: { path: string; ctor: string }[] = [];
  const raw: { path: string; shape: number[]; buffer: boolean }[] = [];
  const owner = new Map<string, string>(); // tensor name -> python expression
  const modulePaths = new Set<string>();
  const tensorRef = (id: number) => {
    const val = g.values[id];
    let ref = owner.get(val.name);
    if (ref === undefined) {
      const buffer = val.kind !== 'param';
      raw.push({ path: val.name, shape: val.shape, buffer });
      ref = `self.${buffer ? 'get_buffer' : 'get_parameter'}(${JSON.stringify(val.name)})`;
      owner.set(val.name, ref);
    }
    return ref;
  };
  /**
   * The module path for node n when its tensor inputs (from index 1) are `<path>.<leaf>` with the
   * given leaves, none owned yet and the path free; the module then owns them. Else null.
   */
  const claimModule = (n: Node, leaves: string[], ctor: string): string | null => {
    const w = g.values[n.inputs[1]].name;
    if (!w.endsWith(`.${leaves[0]}`)) return null;
    const path = w.slice(0, w.length - leaves[0].length - 1);
    const tensors = leaves.map((leaf, k) => (n.inputs[k + 1] !== undefined && n.inputs[k + 1] >= 0 ? { leaf, name: g.values[n.inputs[k + 1]].name } : null));
    if (modulePaths.has(path) || owner.has(path) || tensors.some((t) => t !== null && (t.name !== `${path}.${t.leaf}` || owner.has(t.name)))) return null;
    modulePaths.add(path);
    modules.push({ path, ctor });
    for (const t of tensors) if (t) owner.set(t.name, `${modRef(path)}.${t.leaf}`);
    return path;
  };
  const firstInput = inputs.length > 0 ? local.get(inputs[0].value)! : null;
  const dims = (shape: number[]) =>
    shape.map((d) => {
      if (d >= 0) return String(d);
      if (firstInput === null) throw new Error('internal: torch export: a shape needs the batch size but the network reads no input');
      return `${firstInput}.shape[0]`;
    });
  const body: string[] = [];
  for (const n of nodes) {
    const a = n.attrs;
    const x = v(n.inputs[0]);
    const y = v(n.outputs[0]);
    const has = (k: number) => n.inputs[k] !== undefined && n.inputs[k] >= 0;
    const shapeOf = (k: number) => g.values[n.inputs[k]].shape;
    switch (n.op) {
      case 'linear': {
        const w = g.values[n.inputs[1]];
        const path = claimModule(n, ['weight', 'bias'], `nn.Linear(${w.shape[1]}, ${w.shape[0]}, bias=${has(2) ? 'True' : 'False'})`);
        if (path !== null) body.push(`${y} = ${modRef(path)}(${x})`);
        else body.push(`${y} = F.linear(${x}, ${tensorRef(n.inputs[1])}, ${has(2) ? tensorRef(n.inputs[2]) : 'None'})`);
        break;
      }
      case 'conv2d': {
        const w = g.values[n.inputs[1]];
        const groups = typeof a.groups === 'number' ? a.groups : 1;
        const geometry = `stride=${pyTuple(a.stride, 1)}, padding=${pyTuple(a.padding, 0)}, dilation=${pyTuple(a.dilation, 1)}, groups=${groups}`;
        const path = claimModule(n, ['weight', 'bias'], `nn.Conv2d(${w.shape[1] * groups}, ${w.shape[0]}, (${w.shape[2]}, ${w.shape[3]}), ${geometry}, bias=${has(2) ? 'True' : 'False'})`);
        if (path !== null) body.push(`${y} = ${modRef(path)}(${x})`);
        else body.push(`${y} = F.conv2d(${x}, ${tensorRef(n.inputs[1])}, ${has(2) ? tensorRef(n.inputs[2]) : 'None'}, ${geometry})`);
        break;
      }
      case 'batchnorm_train': {
        const w = g.values[n.inputs[1]];
        const rank = shapeOf(0).length;
        const eps = typeof a.eps === 'number' ? a.eps : 1e-5;
        const mom = typeof a.momentum === 'number' ? a.momentum : 0.1;
        const path = claimModule(n, ['weight', 'bias', 'running_mean', 'running_var'], `nn.BatchNorm${rank === 4 ? '2d' : '1d'}(${w.shape[0]}, eps=${pyFloat(eps)}, momentum=${pyFloat(mom)})`);
        // a batchnorm's tensors always carry its layer path (the checkpoint's num_batches_tracked relies on it)
        if (path === null) throw unsupported(model, n, `batchnorm tensors not named <layer>.weight / .bias / .running_mean / .running_var`);
        body.push(`${y} = ${modRef(path)}(${x})`);
        break;
      }
      case 'layernorm': {
        const w = g.values[n.inputs[1]];
        const eps = pyFloat(typeof a.eps === 'number' ? a.eps : 1e-5);
        const path = claimModule(n, ['weight', 'bias'], `nn.LayerNorm(${w.shape[0]}, eps=${eps})`);
        if (path !== null) body.push(`${y} = ${modRef(path)}(${x})`);
        else body.push(`${y} = F.layer_norm(${x}, (${w.shape[0]},), ${tensorRef(n.inputs[1])}, ${tensorRef(n.inputs[2])}, eps=${eps})`);
        break;
      }
      case 'embedding': {
        const w = g.values[n.inputs[1]];
        const path = claimModule(n, ['weight'], `nn.Embedding(${w.shape[0]}, ${w.shape[1]})`);
        if (path !== null) body.push(`${y} = ${modRef(path)}(${x}.long())`);
        else body.push(`${y} = F.embedding(${x}.long(), ${tensorRef(n.inputs[1])})`);
        break;
      }
      case 'positions':
        body.push(`${y} = torch.arange(${x}.shape[1], device=${x}.device).unsqueeze(0).expand(${x}.shape[0], -1)`);
        break;
      case 'attention': {
        const [T, S] = [shapeOf(0)[2], shapeOf(1)[2]];
        const scale = `scale=${pyFloat(Number(a.scale))}`;
        // torch's is_causal aligns the triangle upper-left; mpsc's rule (bottom-right) equals it when S = T
        const causal = a.causal !== true ? '' : T === S ? ', is_causal=True' : `, attn_mask=torch.ones(${T}, ${S}, dtype=torch.bool, device=${x}.device).tril(${S - T})`;
        body.push(`${y} = F.scaled_dot_product_attention(${x}, ${v(n.inputs[1])}, ${v(n.inputs[2])}${causal}, ${scale})`);
        break;
      }
      case 'attention_qkv': {
        // the packed projection [N,T,3C] viewed as [N,T,3,H,D] -> q, k, v [N,H,T,D]; o back to [N,T,C]
        const [T, C3] = [shapeOf(0)[1], shapeOf(0)[2]], H = Number(a.heads), D = C3 / 3 / H;
        const causal = a.causal === true ? ', is_causal=True' : '';
        body.push(`_q, _k, _v = ${x}.reshape(-1, ${T}, 3, ${H}, ${D}).permute(2, 0, 3, 1, 4).unbind(0)`);
        body.push(`${y} = F.scaled_dot_product_attention(_q, _k, _v${causal}, scale=${pyFloat(Number(a.scale))}).transpose(1, 2).reshape(-1, ${T}, ${C3 / 3})`);
        break;
      }
      case 'matmul': {
        const tr = (s: string, flag: AttrValue | undefined) => (flag === true ? `${s}.transpose(-2, -1)` : s);
        body.push(`${y} = torch.matmul(${tr(x, a.transA)}, ${tr(v(n.inputs[1]), a.transB)})`);
        break;
      }
      case 'permute':
        body.push(`${y} = ${x}.permute(${(a.perm as number[]).join(', ')})`);
        break;
      case 'slice':
        body.push(`${y} = ${x}.narrow(${Number(a.axis)}, ${Number(a.start)}, ${Number(a.length)})`);
        break;
      case 'pad': {
        // mpsc: a pair per dim in dim order; F.pad: the last dim's pair first
        const pads = a.pads as number[];
        const pairs = Array.from({ length: pads.length / 2 }, (_, i) => [pads[2 * i], pads[2 * i + 1]]).reverse().flat();
        body.push(`${y} = F.pad(${x}, (${pairs.join(', ')}), value=${pyFloat(typeof a.value === 'number' ? a.value : 0)})`);
        break;
      }
      case 'broadcast_to':
        body.push(`${y} = ${x}.expand(${dims(a.shape as number[]).join(', ')})`);
        break;
      case 'reduce': {
        const fn = String(a.fn);
        const axes = `dim=(${(a.axes as number[]).join(', ')},), keepdim=${a.keepdim === true ? 'True' : 'False'}`;
        if (fn === 'sum' || fn === 'mean') body.push(`${y} = ${x}.${fn}(${axes})`);
        else if (fn === 'max') body.push(`${y} = torch.amax(${x}, ${axes})`);
        else throw unsupported(model, n, `reduce function '${fn}'`);
        break;
      }
      case 'masked_fill': {
        const conds: string[] = [];
        if (has(1)) conds.push(`(${v(n.inputs[1])} ${a.invert === true ? '==' : '!='} 0)`);
        if (a.causal === true) {
          const xs = shapeOf(0);
          const [T, S] = [xs[xs.length - 2], xs[xs.length - 1]];
          conds.push(`torch.ones(${T}, ${S}, dtype=torch.bool, device=${x}.device).triu(${1 + S - T})`);
        }
        body.push(`${y} = torch.where(${conds.join(' | ')}, torch.tensor(${pyFloat(Number(a.value))}, dtype=${x}.dtype, device=${x}.device), ${x})`);
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
        const op = { add: '+', sub: '-', mul: '*', div: '/' }[String(a.fn)];
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

  // containers for the dotted paths of modules and of tensors registered one by one, parents first;
  // a path that is itself a module is not a container (modules are added shallowest first)
  const containers: string[] = [];
  const seen = new Set<string>(modulePaths);
  for (const p of [...modules.map((m) => m.path), ...raw.map((r) => r.path)]) {
    const parts = p.split('.');
    for (let k = 1; k < parts.length; k++) {
      const c = parts.slice(0, k).join('.');
      if (!seen.has(c)) {
        seen.add(c);
        containers.push(c);
      }
    }
  }
  const depth = (p: string) => p.split('.').length;
  const parentOf = (path: string) => {
    const k = path.lastIndexOf('.');
    return { parent: k < 0 ? 'self' : `self.get_submodule(${JSON.stringify(path.slice(0, k))})`, leaf: JSON.stringify(path.slice(k + 1)) };
  };
  const put = (path: string, ctor: string) => {
    const { parent, leaf } = parentOf(path);
    return `        ${parent}.add_module(${leaf}, ${ctor})`;
  };
  const putTensor = (r: { path: string; shape: number[]; buffer: boolean }) => {
    const { parent, leaf } = parentOf(r.path);
    const shape = `(${r.shape.join(', ')}${r.shape.length === 1 ? ',' : ''})`;
    return r.buffer ? `        ${parent}.register_buffer(${leaf}, torch.zeros(${shape}))` : `        ${parent}.register_parameter(${leaf}, nn.Parameter(torch.empty(${shape})))`;
  };
  const className = pyClassName(model.name);
  const src: string[] = [];
  src.push(`# Generated by mpsc ${producerVersion} from ${model.file.replace(/\\/g, '/').split('/').pop()} (model '${model.name}'); do not edit.`);
  src.push(`# A plain torch.nn.Module whose state_dict() keys are mpsc's checkpoint names:`);
  src.push(`#   model = ${className}(); model.load_state_dict(read_safetensors("model.safetensors"), strict=True)`);
  src.push(`# forward(${inputs.map((i) => local.get(i.value)).join(', ')}) returns ${heads.length === 1 ? `'${heads[0].name}'` : `a dict of ${heads.map((h) => `'${h.name}'`).join(', ')}`}.`);
  src.push('import json', 'import struct', '', 'import torch', 'import torch.nn as nn', 'import torch.nn.functional as F', '', '');
  // the inputs forward takes, with their dtype and shape (None: the batch dimension)
  const inputSpec = inputs.map((i) => `${JSON.stringify(local.get(i.value))}: (${i.dtype === 'f32' ? 'torch.float32' : 'torch.int32'}, [${i.shape.map((d) => (d < 0 ? 'None' : d)).join(', ')}])`);
  src.push(`INPUTS = {${inputSpec.join(', ')}}`, '', '');
  src.push(`class ${className}(nn.Module):`);
  src.push('    def __init__(self):');
  src.push('        super().__init__()');
  for (const c of containers) src.push(put(c, 'nn.Module()'));
  for (const m of [...modules].sort((x, y) => depth(x.path) - depth(y.path))) src.push(put(m.path, m.ctor));
  for (const r of raw) src.push(putTensor(r));
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
