// mpsc export (issue 16): ONNX models run by onnxruntime, and the exported torch modules, match mpsc's
// own eval forward (the float64 reference interpreter on the same float32 weights and input) for every
// example spec (the char_gpt transformer included) and three specs that use every op and activation the
// exporters map; the torch export loads with load_state_dict(strict=True) and reproduces `mpsc eval`'s
// test loss after a short training of mnist_mlp, lenet (tools/torch_interop.py) and char_gpt
// (tools/torch_gpt_interop.py).
// Python (.venv-test, made by .ci/run: onnxruntime, onnx, numpy, torch from the local wheel index)
// runs the Python side; MPSC_TEST_PYTHON overrides the interpreter.
import { describe, it, expect, beforeAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { networkOutputs } from '../compiler/export/heads.js';
import { exportOnnx } from '../compiler/export/onnx.js';
import { exportTorch } from '../compiler/export/torch.js';
import { readExportWeights } from '../compiler/export/weights.js';
import { bindBatch } from '../compiler/ir/bind_batch.js';
import { evalMode } from '../compiler/ir/eval_mode.js';
import { numel } from '../compiler/ir/graph.js';
import type { CheckedModel } from '../compiler/model.js';
import { runGraph, type Env } from '../compiler/reference/interpret.js';
import { initParams } from '../compiler/train/init.js';
import { UserError } from '../compiler/errors.js';
import { embeddingIdRanges, inputRoles } from '../data/dataset.js';
import { batchnormLayers, listCheckpoints, saveTensors, writeFileAtomic } from '../runtime/checkpoint.js';
import type { StWriteTensor } from '../runtime/safetensors.js';

const PY = process.env.MPSC_TEST_PYTHON ?? resolve('.venv-test/bin/python');
const ZOO = `# every forward op the exporters map (a layer named with a Python keyword too)
model zoo
input tokens: i32[N, 6]
input feats: f32[N, 3, 8, 8]
input label: i32[N]
network {
  e = tokens -> embedding(20, 8) -> layernorm -> gelu -> flatten
  c = feats -> conv2d(4, 3, padding: 1) -> batchnorm -> leaky_relu(0.2) -> avgpool(2) -> flatten
  m = feats -> maxpool(2, padding: 1) -> global_avgpool -> flatten -> linear(8, bias: false) -> sigmoid
  h = concat(e, c) -> linear(8) as pass -> dropout(0.3) -> tanh
  h = h * m - h
  s = h + m -> softmax -> reshape(2, 4) -> flatten
  logits = concat(h, s) -> linear(5)
  lp = logits -> log_softmax
}
loss nll(lp, label)
metrics accuracy(logits, label)
optimizer sgd(lr: 0.1)
train { data: synthetic(), batch: 4 }
`;

const ACTS = `# every element-wise activation of the scalar-function table
model acts
input x: f32[N, 6]
input label: i32[N]
network {
  a = x -> silu -> relu6 -> hardtanh(min_val: -0.5, max_val: 0.3)
  b = x -> hardswish -> softplus(beta: 2, threshold: 0.1)
  c = x -> elu(alpha: 0.7) -> mish -> leaky_relu(0.1)
  d = x -> sigmoid -> tanh -> gelu
  logits = concat(a, b, c, d) -> linear(4) -> relu -> linear(3)
}
loss cross_entropy(logits, label)
optimizer sgd(lr: 0.1)
train { data: synthetic(), batch: 4 }
`;

const ALGEBRA = `# every tensor-algebra op the exporters map: matmul / transpose / permute / split / chunk,
# reductions, pad, masked_fill (mask, causal, where), math functions, division, positions,
# the fused attention layer and its unfused (dropout) form, tied weights
model algebra
input tokens: i32[N, 8]
input feats: f32[N, 8, 6]
input targets: i32[N, 8]
block manual_attn(d: int, heads: int) {
  in x
  q, k, v = split(x -> linear(3 * d) as c_attn, d, 2)
  q = transpose(reshape(q, 8, heads, d / heads), 1, 2)
  k = transpose(reshape(k, 8, heads, d / heads), 1, 2)
  v = transpose(reshape(v, 8, heads, d / heads), 1, 2)
  att = matmul(q, transpose(k, -2, -1)) * (1.0 / sqrt(d / heads))
  att = masked_fill(att, value: -inf, causal: true) -> softmax(axis: -1)
  out reshape(transpose(matmul(att, v), 1, 2), 8, d) -> linear(d) as c_proj
}
network {
  h = (tokens -> embedding(11, 12) as tok) + (tokens -> positions -> embedding(8, 12) as pos)
  f = feats -> linear(12) as proj_in
  a, b = chunk(f, 2, 2)
  g = permute(concat(a, b, axis: 2), [0, 2, 1]) -> pad([1, 2]) -> sum(axis: 2, keepdim: true)
  m = mean(f, axis: 1, keepdim: true) + max(f, axis: 2, keepdim: true) - transpose(g, 1, 2) / 7
  w = where(feats -> sum(axis: 2, keepdim: true), exp(abs(f) * -1), sqrt(abs(f) + 1) - rsqrt(f * f + 1))
  h = h + masked_fill(f, feats -> mean(axis: 2, keepdim: true), value: 0.5) * m + w + pow(abs(f), 1.5) / (abs(m) + 1)
  h = h + (h -> layernorm as ln1 -> attention(3, causal: true) as attn)
  h = h + (h -> layernorm as ln2 -> manual_attn(12, 2) as mattn)
  h = h + (h -> attention(2, dropout: 0.1) as dattn) + log(abs(h) + 1) * 0.1
  logits = h -> layernorm as ln_f -> linear(11, bias: false, tied_to: tok) as head
}
loss cross_entropy(logits, targets)
optimizer adamw(lr: 1e-3)
train { data: synthetic(), batch: 4 }
`;

function mpsc(...args: string[]) {
  return spawnSync(process.execPath, ['bin/mpsc.js', ...args], { encoding: 'utf8', timeout: 240_000 });
}
/** mpsc run in another folder (training writes its run folder under the current folder) */
function mpscIn(cwd: string, ...args: string[]) {
  return spawnSync(process.execPath, [resolve('bin/mpsc.js'), ...args], { encoding: 'utf8', timeout: 240_000, cwd });
}
function python(...args: string[]) {
  return spawnSync(PY, args, { encoding: 'utf8', timeout: 240_000 });
}

/** a deterministic generator (xorshift32) for inputs and buffer perturbations */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
}

/** initial weights, with batchnorm running statistics moved off their (0, 1) defaults so they matter */
function writeWeights(model: CheckedModel, file: string): void {
  const r = rng(7);
  const t = new Map<string, StWriteTensor>();
  for (const [path, data] of initParams(model, 3)) {
    const decl = model.params.find((p) => p.path === path)!;
    if (path.endsWith('running_mean')) for (let i = 0; i < data.length; i++) data[i] = r() - 0.5;
    if (path.endsWith('running_var')) for (let i = 0; i < data.length; i++) data[i] = 0.5 + r();
    if (decl.layerType === 'batchnorm' || decl.layerType === 'layernorm') for (let i = 0; i < data.length; i++) data[i] += 0.2 * (r() - 0.5);
    t.set(path, { shape: decl.shape, data });
  }
  saveTensors(file, t);
}

/** mpsc's eval forward (reference interpreter) on batch B; returns the network outputs by name */
function mpscForward(model: CheckedModel, weightsFile: string, inputs: Map<string, Float32Array | Int32Array>, B: number): Map<string, Float64Array> {
  const w = readExportWeights(model, weightsFile);
  const { graph, idMap } = evalMode(bindBatch(model.graph, B));
  const env: Env = new Map();
  for (const v of graph.values) {
    if (v.kind === 'param' || v.kind === 'state') env.set(v.id, Float64Array.from(w.tensors.get(v.name)!.data));
    if (v.kind === 'input') env.set(v.id, inputs.has(v.name) ? Float64Array.from(inputs.get(v.name)!) : new Float64Array(numel(v.shape)));
  }
  runGraph(graph, env, { lr: 0, t: 1, seed: 0, counter: 0 });
  return new Map(networkOutputs(model).map((h) => [h.name, env.get(idMap[h.value])!]));
}

function makeInputs(model: CheckedModel, B: number): Map<string, Float32Array | Int32Array> {
  const r = rng(11);
  const out = new Map<string, Float32Array | Int32Array>();
  const ids = embeddingIdRanges(model);
  for (const i of model.inputs) {
    const n = numel(i.shape.map((d) => (d < 0 ? B : d)));
    if (i.dtype === 'f32') out.set(i.name, Float32Array.from({ length: n }, () => 2 * r() - 1));
    else out.set(i.name, Int32Array.from({ length: n }, () => Math.floor(r() * (ids.get(i.name)?.vocab ?? model.numClasses ?? 5))));
  }
  return out;
}

/** max |a - b| over the outputs, relative to the largest |b| */
function maxRelDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0, m = 0;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / Math.max(m, 1e-12);
}

describe('test environment', () => {
  it('has the Python venv with onnxruntime, onnx, numpy and torch (.ci/run creates .venv-test)', () => {
    expect(existsSync(PY), `${PY} is missing: run the venv block of .ci/run`).toBe(true);
    const r = python('-c', 'import onnxruntime, onnx, numpy, torch; print(onnx.defs.onnx_opset_version())');
    expect(r.stderr).toBe('');
    expect(Number(r.stdout)).toBeGreaterThanOrEqual(17);
  });
});

describe('mpsc export --format onnx', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mpsc-onnx-'));
  const zooFile = join(dir, 'zoo.model');
  writeFileSync(zooFile, ZOO);
  const actsFile = join(dir, 'acts.model');
  writeFileSync(actsFile, ACTS);
  const algebraFile = join(dir, 'algebra.model');
  writeFileSync(algebraFile, ALGEBRA);
  // every example spec (the transformer too), and three specs that use every forward op the exporters map
  const specs = [...readdirSync('specs').filter((f) => f.endsWith('.model')).map((f) => `specs/${f}`), zooFile, actsFile, algebraFile];
  /**
   * Exports a model with random weights to ONNX and torch (`exporter` writes one format to a path and
   * returns the ONNX outputs it reported), runs both on batch 3 in Python and compares with mpsc's eval forward.
   */
  function roundTrip(model: CheckedModel, label: string, exporter: (wfile: string, format: 'onnx' | 'torch', out: string) => string[] | void) {
    const name = model.name;
    const wfile = join(dir, `${name}.safetensors`);
    writeWeights(model, wfile);
    const onnxFile = join(dir, `${name}.onnx`);
    expect(exporter(wfile, 'onnx', onnxFile)).toEqual(networkOutputs(model).map((h) => h.name));
    const B = 3; // not the spec's batch: the batch dimension is symbolic
    const inputs = makeInputs(model, B);
    const inFile = join(dir, `${name}.inputs.safetensors`);
    saveTensors(inFile, new Map(model.inputs.map((i) => [i.name, { shape: i.shape.map((d) => (d < 0 ? B : d)), data: inputs.get(i.name)! }])));
    const outFile = join(dir, `${name}.out.json`);
    const p = python('test/py/onnx_run.py', onnxFile, inFile, outFile);
    expect(p.stderr).toBe('');
    expect(p.status).toBe(0);
    const got = JSON.parse(readFileSync(outFile, 'utf8')) as { opset: number; inputs: Record<string, (string | number)[]>; outputs: Record<string, { shape: number[]; data: number[] }> };
    expect(got.opset).toBe(17);
    // inputs: the spec's names, only those the network reads (not the label), batch 'N'
    const netInputs = inputRoles(model).features;
    expect(Object.keys(got.inputs).sort()).toEqual(netInputs.map((i) => i.name).sort());
    for (const i of netInputs) expect(got.inputs[i.name]).toEqual(['N', ...i.shape.slice(1)]);
    const want = mpscForward(model, wfile, inputs, B);
    expect(Object.keys(got.outputs).sort()).toEqual([...want.keys()].sort());
    for (const [k, ref] of want) {
      expect(got.outputs[k].data.length).toBe(ref.length);
      expect(got.outputs[k].shape[0]).toBe(B);
      const d = maxRelDiff(got.outputs[k].data, ref);
      expect(d, `${label} output ${k}`).toBeLessThanOrEqual(1e-4);
    }
    // the torch export of the same weights, in eval mode, on the same input
    const torchDir = join(dir, `${name}_torch`);
    exporter(wfile, 'torch', torchDir);
    const tOut = join(dir, `${name}.torch.json`);
    const tp = python('test/py/torch_run.py', torchDir, inFile, tOut);
    expect(tp.stderr).toBe('');
    const tgot = JSON.parse(readFileSync(tOut, 'utf8')) as { outputs: Record<string, { shape: number[]; data: number[] }> };
    const single = want.size === 1 ? [...want.keys()][0] : null;
    for (const [k, ref] of want) {
      const o = tgot.outputs[single !== null ? '__single__' : k];
      expect(o.data.length).toBe(ref.length);
      expect(maxRelDiff(o.data, ref), `${label} torch output ${k}`).toBeLessThanOrEqual(1e-4);
    }
  }

  for (const spec of specs) {
    it(`${spec}: onnxruntime and the exported torch module match mpsc's eval forward (max rel. diff <= 1e-4), batch symbolic`, () => {
      roundTrip(checkFile(spec), spec, (wfile, format, out) => {
        const r = mpsc('export', spec, '--weights', wfile, '--format', format, '-o', out, '--json');
        expect(r.stderr).toBe('');
        expect(r.status).toBe(0);
        return format === 'onnx' ? (JSON.parse(r.stdout).outputs as string[]) : undefined;
      });
    }, 120_000);
  }

  it('broadcast_to (no spec syntax makes it in a forward graph yet): Expand with the batch read at run time, and torch expand', () => {
    // the algebra spec with `m` (mean over axis 1, [N, 1, 12]) expanded to [N, 8, 12] before its reader
    const model: CheckedModel = structuredClone(checkSource(ALGEBRA, algebraFile));
    const g = model.graph;
    const at = g.nodes.findIndex((n) => n.op === 'reduce' && n.attrs.fn === 'mean' && n.attrs.keepdim === true && g.values[n.outputs[0]].shape[1] === 1);
    const src = g.nodes[at].outputs[0];
    const b = g.values.length;
    g.values.push({ ...g.values[src], id: b, name: 'm.expanded', shape: [-1, 8, 12] });
    for (const n of g.nodes.slice(at + 1)) n.inputs = n.inputs.map((i) => (i === src ? b : i));
    g.nodes.splice(at + 1, 0, { id: 0, op: 'broadcast_to', inputs: [src], outputs: [b], attrs: { shape: [-1, 8, 12] }, path: 'expand' });
    g.nodes.forEach((n, i) => (n.id = i));
    roundTrip(model, 'broadcast_to', (wfile, format, out) => {
      const w = readExportWeights(model, wfile);
      if (format === 'onnx') {
        const r = exportOnnx(model, w, 'test');
        writeFileSync(out, r.bytes);
        return r.outputs;
      }
      const r = exportTorch(model, w, 'test');
      mkdirSync(out, { recursive: true });
      writeFileSync(join(out, 'model.py'), r.source);
      saveTensors(join(out, 'model.safetensors'), r.tensors);
    });
  }, 120_000);

  it('the zoo spec exports two outputs named as the spec names them', () => {
    const m = checkSource(ZOO, zooFile);
    expect(networkOutputs(m).map((h) => h.name)).toEqual(['lp', 'logits']);
  });

  it('an op ONNX (or torch) cannot express is a UserError naming the op and the layer', () => {
    const model = checkFile('specs/mnist_mlp.model');
    const wfile = join(dir, 'mlp_bad.safetensors');
    writeWeights(model, wfile);
    const w = readExportWeights(model, wfile);
    const bad: CheckedModel = structuredClone(model);
    const relu = bad.graph.nodes.find((n) => n.op === 'unary')!;
    relu.attrs.fn = 'erfinv'; // a function no table has (as a later catalogue addition without an ONNX mapping would be)
    expect(() => exportOnnx(bad, w, 'test')).toThrow(UserError);
    expect(() => exportOnnx(bad, w, 'test')).toThrow(/ONNX export does not support unary function 'erfinv' \(layer 'relu0'\)/);
    expect(() => exportTorch(bad, w, 'test')).toThrow(/PyTorch export does not support unary function 'erfinv' \(layer 'relu0'\)/);
  });

  it('weights that lack a tensor of the spec exit 1 naming it', () => {
    const model = checkFile('specs/mnist_mlp.model');
    const init = initParams(model, 1);
    const f = join(dir, 'partial.safetensors');
    saveTensors(f, new Map([['fc1.weight', { shape: [256, 784], data: init.get('fc1.weight')! }]]));
    const r = mpsc('export', 'specs/mnist_mlp.model', '--weights', f, '--format', 'onnx', '-o', join(dir, 'x.onnx'));
    expect(r.status).toBe(1);
    // the message of every --weights load (eval, predict, sample, export: one loading path)
    expect(r.stderr).toContain('error: --weights: the tensors do not match the model\nmissing from the file:\n  fc1.bias [256]\n  fc2.bias [10]\n  fc2.weight [10, 256]');
  });

  it('-o naming an existing folder exits 1 with a file name to use, and leaves no temp file (it was an internal error, exit 2)', () => {
    const model = checkFile('specs/mnist_mlp.model');
    const init = initParams(model, 1);
    const f = join(dir, 'full.safetensors');
    saveTensors(f, new Map(model.params.map((p) => [p.path, { shape: p.shape, data: init.get(p.path)! }])));
    const parent = mkdtempSync(join(tmpdir(), 'mpsc-export-dir-'));
    const out = join(parent, 'out');
    mkdirSync(out);
    const r = mpsc('export', 'specs/mnist_mlp.model', '--weights', f, '--format', 'onnx', '-o', out);
    expect(r.stderr).not.toContain('internal error');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${out}: error: --format onnx writes one file, and this is a folder\n  hint: pass a file name such as ${join(out, 'mnist_mlp.onnx')}`);
    // the atomic writer itself: a folder in the way is a UserError and the temp file is removed
    expect(() => writeFileAtomic(out, new Uint8Array(8))).toThrow(UserError);
    expect(() => writeFileAtomic(out, new Uint8Array(8))).toThrow(/cannot write the file \(a folder of that name is in the way\)/);
    expect(readdirSync(parent)).toEqual(['out']);
    expect(readdirSync(out)).toEqual([]);
  });
});

describe('mpsc export --format torch', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mpsc-torch-'));
  beforeAll(() => {
    expect(existsSync(PY), `${PY} is missing: run the venv block of .ci/run`).toBe(true);
  });
  /**
   * A short CPU training of a spec, `mpsc eval` of its checkpoint, the torch export of it and an
   * interop tool run on the export: returns mpsc's eval result, the tool's JSON and the export folder.
   */
  function trainExportEvaluate(name: string, steps: number, tool: string) {
    const spec = resolve(`specs/${name}.model`);
    const ckdir = join(dir, `ck_${name}`);
    const t = mpscIn(dir, 'train', spec, '--steps', String(steps), '--device', 'cpu', '--threads', '1', '--checkpoint-dir', ckdir, '--json');
    expect(t.status, t.stderr).toBe(0);
    const ckpt = listCheckpoints(ckdir)[0].file;
    const e = mpsc('eval', spec, '--weights', ckpt, '--device', 'cpu', '--threads', '1', '--json');
    expect(e.status, e.stderr).toBe(0);
    const out = join(dir, `${name}_torch`);
    const x = mpsc('export', spec, '--weights', ckpt, '--format', 'torch', '-o', out);
    expect(x.status, x.stderr).toBe(0);
    const r = python(tool, out, '--json');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    return { mpsc: JSON.parse(e.stdout) as { test_loss: number; samples: number }, torch: JSON.parse(r.stdout) as Record<string, number>, out };
  }

  for (const name of ['mnist_mlp', 'lenet']) {
    it(`${name}: after a short training, model.py loads strictly and reproduces mpsc eval's test loss`, () => {
      const { mpsc: m, torch, out } = trainExportEvaluate(name, 20, 'tools/torch_interop.py');
      // state_dict keys equal the checkpoint's parameter and buffer names (load_state_dict strict inside)
      const keys = python('-c', `import importlib.util,sys; s=importlib.util.spec_from_file_location('m', sys.argv[1]); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); print('\\n'.join(sorted(m.load(sys.argv[2]).state_dict().keys())))`, join(out, 'model.py'), join(out, 'model.safetensors'));
      expect(keys.stderr).toBe('');
      expect(keys.stdout.trim().split('\n')).toEqual(checkFile(`specs/${name}.model`).params.map((p) => p.path).sort());
      expect(torch.samples).toBe(m.samples);
      expect(Math.abs(torch.test_loss - m.test_loss) / m.test_loss).toBeLessThanOrEqual(1e-4);
    }, 240_000);
  }

  it('char_gpt: after two training steps, model.py loads strictly and tools/torch_gpt_interop.py reproduces mpsc eval\'s test loss', () => {
    const { mpsc: m, torch } = trainExportEvaluate('char_gpt', 2, 'tools/torch_gpt_interop.py');
    expect(torch.tensors).toBe(checkFile('specs/char_gpt.model').params.length);
    expect(torch.T).toBe(64);
    expect(torch.windows).toBe(m.samples);
    expect(Math.abs(torch.test_loss - m.test_loss) / m.test_loss).toBeLessThanOrEqual(1e-4);
  }, 600_000);

  it('a batchnorm spec exports num_batches_tracked so strict loading works', () => {
    const model = checkFile('specs/resnet_small.model');
    const wfile = join(dir, 'resnet.safetensors');
    writeWeights(model, wfile);
    const out = join(dir, 'resnet_torch');
    const x = mpsc('export', 'specs/resnet_small.model', '--weights', wfile, '--format', 'torch', '-o', out);
    expect(x.status, x.stderr).toBe(0);
    const r = python('-c', `import importlib.util,sys,torch; s=importlib.util.spec_from_file_location('m', sys.argv[1]); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); net=m.load(sys.argv[2]); y=net(torch.zeros(2,1,28,28)); print(len(net.state_dict()), tuple(y.shape))`, join(out, 'model.py'), join(out, 'model.safetensors'));
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe(`${model.params.length + batchnormLayers(model).length} (2, 10)`);
  });
});
