/**
 * gpt_tiny: the CheckedModel of ../shared/bench/torch_gpt_ref.py's GPT built directly in IR
 * (the same ops the language lowers `specs/char_gpt.model`'s layers to: embedding + positions,
 * pre-layernorm blocks with linear in_proj -> fused causal `attention_qkv` (q, k, v read in place
 * from the [N, T, 3C] projection, o written as [N, T, C]) -> out_proj, gelu MLP, layernorm, untied head,
 * cross_entropy over [N, T, V]; AdamW(betas 0.9 / 0.95, weight decay 0.1)), and `mpsc bench`'s
 * timing of its CPU train step printed as JSON (the shape bench/compare.py reads).
 *   npx tsx bench/gpt_tiny.ts [--device cpu|cuda] [--threads 2] [--steps 20] [--warmup 5] [--workload gpt_tiny_b32_t64] [--precision fp32|fp16|bf16] [--emit DIR]
 * (--device cuda: bench/compare_cuda.py's GPT rows; --precision bf16: its rows against PyTorch's --amp bf16)
 * Consumes nothing but its arguments; relies on the IR op catalogue (compiler/ir/ops.ts) and
 * runtime/bench.ts. bench/compare.sh times the same network from bench/gpt_tiny_b32_t64.model.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { GraphBuilder } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import { DEFAULT_CXXFLAGS } from '../runtime/native/build.js';
import { BATCH, type CheckedModel, type ParamDecl } from '../compiler/model.js';
import { bench } from '../runtime/bench.js';
import { PRECISIONS, type Precision } from '../compiler/ir/precision.js';

/** name: [V, T, C, L, H, B, lr] as torch_gpt_ref.py's WORKLOADS */
const WORKLOADS: Record<string, [number, number, number, number, number, number, number]> = {
  gpt_tiny_b32_t64: [65, 64, 128, 4, 4, 32, 1e-3],
  gpt_char_b64_t256: [65, 256, 384, 6, 6, 64, 1e-3],
};

/** the model of a workload of WORKLOADS, or of explicit dims [V, T, C, L, H, B, lr] (tests use toy sizes) */
export function gptModel(name: string, dims?: [number, number, number, number, number, number, number]): CheckedModel {
  const w = dims ?? WORKLOADS[name];
  if (!w) throw new Error(`unknown workload ${name}; one of ${Object.keys(WORKLOADS).join(', ')}`);
  const [V, T, C, L, H, B, lr] = w;
  const D = C / H;
  const b = new GraphBuilder();
  const params: ParamDecl[] = [];
  const param = (path: string, shape: number[], init: ParamDecl['init'], layerType: string): number => {
    const value = b.value(path, 'f32', shape, 'param');
    params.push({ path, value, shape, kind: 'param', init, layer: path.slice(0, path.lastIndexOf('.')), layerType });
    return value;
  };
  const f = (nm: string, shape: number[]) => ({ name: nm, shape });
  const linear = (x: number, path: string, inF: number, outF: number, bias: boolean, lead: number[]): number =>
    b.emit('linear', [x, param(`${path}.weight`, [outF, inF], { kind: 'default_weight' }, 'linear'), bias ? param(`${path}.bias`, [outF], { kind: 'default_bias', fan_in: inF }, 'linear') : -1], [f(`${path}.out`, [...lead, outF])])[0];
  const layernorm = (x: number, path: string): number =>
    b.emit('layernorm', [x, param(`${path}.weight`, [C], { kind: 'ones' }, 'layernorm'), param(`${path}.bias`, [C], { kind: 'zeros' }, 'layernorm')],
      [f(`${path}.out`, [BATCH, T, C]), f(`${path}.mean`, [BATCH, T]), f(`${path}.rstd`, [BATCH, T])], { eps: 1e-5 })[0];
  const add = (x: number, y: number, nm: string) => b.emit('binary', [x, y], [f(nm, [BATCH, T, C])], { fn: 'add' })[0];

  const tokens = b.value('tokens', 'i32', [BATCH, T], 'input');
  const targets = b.value('targets', 'i32', [BATCH, T], 'input');
  const te = param('tok.weight', [V, C], { kind: 'normal', mean: 0, std: 1 }, 'embedding');
  const pe = param('pos.weight', [T, C], { kind: 'normal', mean: 0, std: 1 }, 'embedding');
  const [e1] = b.emit('embedding', [tokens, te], [f('tok.out', [BATCH, T, C])]);
  const [pos] = b.emit('positions', [tokens], [{ name: 'positions.out', shape: [BATCH, T], dtype: 'i32' }]);
  const [e2] = b.emit('embedding', [pos, pe], [f('pos.out', [BATCH, T, C])]);
  let h = add(e1, e2, 'h0');
  for (let l = 0; l < L; l++) {
    const p = `blocks.${l}`;
    const ln1 = layernorm(h, `${p}.ln1`);
    const wi = param(`${p}.attn.in_proj_weight`, [3 * C, C], { kind: 'default_weight' }, 'attention');
    const bi = param(`${p}.attn.in_proj_bias`, [3 * C], { kind: 'default_bias', fan_in: C }, 'attention');
    const [qkv] = b.emit('linear', [ln1, wi, bi], [f(`${p}.attn.qkv`, [BATCH, T, 3 * C])]);
    const [mg] = b.emit('attention_qkv', [qkv], [f(`${p}.attn.merged`, [BATCH, T, C]), f(`${p}.attn.lse`, [BATCH, H, T])], { heads: H, causal: true, scale: 1 / Math.sqrt(D) });
    h = add(h, linear(mg, `${p}.attn.out_proj`, C, C, true, [BATCH, T]), `${p}.res1`);
    const ln2 = layernorm(h, `${p}.ln2`);
    const fc = linear(ln2, `${p}.fc`, C, 4 * C, true, [BATCH, T]);
    const [g] = b.emit('unary', [fc], [f(`${p}.gelu.out`, [BATCH, T, 4 * C])], { fn: 'gelu' });
    h = add(h, linear(g, `${p}.proj`, 4 * C, C, true, [BATCH, T]), `${p}.res2`);
  }
  const logits = linear(layernorm(h, 'ln_f'), 'head', C, V, false, [BATCH, T]);
  const [loss] = b.emit('cross_entropy', [logits, targets], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
  return {
    name, file: `bench/gpt_tiny.ts:${name}`, sourceHash: name, graph: b.graph,
    inputs: [{ name: 'tokens', value: tokens, dtype: 'i32', shape: [BATCH, T] }, { name: 'targets', value: targets, dtype: 'i32', shape: [BATCH, T] }],
    params, layers: [], loss: { kind: 'cross_entropy', value: loss }, metrics: [],
    optimizer: { kind: 'adamw', lr, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 },
    schedule: { kind: 'constant', warmup_steps: 0, warmup_start_factor: 1 },
    train: {
      data: { kind: 'synthetic', train_size: B, test_size: B, seed: 0 }, epochs: null, steps: 1, batch: B, shuffle: true, seed: 0,
      drop_last: true, grad_clip: null, grad_accum: 1, eval_every: null, checkpoint_every: null,
    },
    numClasses: V,
  };
}

/**
 * Writes the generated C++ of the model's programs, the runtime sources and bench/native_step_driver.cc
 * into dir, with build.sh (the backend's -O3 -march=native) and run.sh (THREADS [STEPS WARMUP [PROGRAM]]): the
 * train step timed without Node, on a machine that has only a C++ compiler.
 */
export function emit(model: CheckedModel, dir: string): void {
  const gen = generateCpuModel(buildPrograms(model, { batch: model.train.batch }));
  fs.mkdirSync(dir, { recursive: true });
  for (const [name, text] of Object.entries(gen.files)) fs.writeFileSync(path.join(dir, name), text);
  const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
  for (const f of ['mpsc_model.h', 'mpsc_parallel.hpp', 'mpsc_runtime.cc']) fs.copyFileSync(path.join(root, 'runtime', 'cpp', f), path.join(dir, f));
  fs.copyFileSync(path.join(root, 'bench', 'native_step_driver.cc'), path.join(dir, 'native_step_driver.cc'));
  fs.writeFileSync(path.join(dir, 'build.sh'), `#!/bin/sh\nset -e\ncd "$(dirname "$0")"\n\${CXX:-g++} -std=c++17 ${DEFAULT_CXXFLAGS} -pthread -o step model.cc mpsc_runtime.cc native_step_driver.cc\n`);
  fs.writeFileSync(path.join(dir, 'run.sh'), `#!/bin/sh\ncd "$(dirname "$0")"\nexec ./step "\${1:-2}" "\${2:-20}" "\${3:-5}" ${model.numClasses ?? 1} "\${4:-train_step}"\n`);
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const opt = (k: string, d: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
  const precision = opt('--precision', 'fp32');
  if (!(PRECISIONS as readonly string[]).includes(precision)) throw new Error(`--precision must be one of ${PRECISIONS.join(', ')}, got ${precision}`);
  const base = gptModel(opt('--workload', 'gpt_tiny_b32_t64'));
  const model: CheckedModel = { ...base, train: { ...base.train, precision: precision as Precision } };
  if (args.includes('--emit')) {
    emit(model, opt('--emit', 'gpt_native'));
    return;
  }
  const r = await bench(model, { device: opt('--device', 'cpu'), threads: Number(opt('--threads', '2')), steps: Number(opt('--steps', '20')), warmup: Number(opt('--warmup', '5')) });
  console.log(JSON.stringify(r));
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.stack : e);
    process.exit(1);
  });
}
