/**
 * cuda_check: the CUDA backend's correctness sweep on a GPU machine (bench/cuda_check.sh runs it).
 * Consumes the kernel cases of test/cuda_cases.ts (the Metal tests' table, test/metal_cases.ts: every
 * op of the catalogue at odd, non-tile-multiple shapes, plus GEMM + unary fusions; and the CUDA-only
 * shapes) and the example specs; produces a report (stdout, and cuda_check.json in $OUT_DIR):
 *   kernels   every case's outputs (and mutated inputs) against the float64 reference interpreter,
 *             max-norm relative error < 1e-4, for the CUDA 64x64 GEMMs and the shared 16x16 ones
 *             (plus cudaLongCases: long-K GEMMs the CUDA GEMM splits along K, long sum_to reductions
 *             that run a block per output, chunked layernorm_grad and embedding_grad: shapes the
 *             Metal cases are too small to reach; and one merged launch), each as tensor cores (3xTF32; the CUDA GEMMs'
 *             convolutions plain TF32, as cuDNN's default, checked within TF32_TOL = 5e-3) and as
 *             fp32 (MPSC_CUDA_PLAIN=1), through the model ABI test driver
 *             (runtime/metal-emu/emu_test_main.cc linked with the generated model_cuda.cu; the
 *             arena is mirrored to the host after each case: MPSC_CUDA_MIRROR_ARENA=1). A case
 *             whose run failed or whose values are missing fails by name (judgeCases); the others
 *             are still judged (test/cuda_cases.test.ts runs this path against a stand-in driver);
 *   parity    every example spec, 20 train steps + one eval from the same initial parameters and
 *             batches on --device cuda and the CPU backend: per-step loss and metrics within 1e-4
 *             relative (TF32_PARITY_TOL = 2e-3 for a spec with convolutions). An argmax metric
 *             (accuracy, top_k: a count of rows over the batch) may differ only by rows that are
 *             near-ties: the float64 reference's forward pass from the CPU's parameters before the
 *             step gives each row's margin |label logit - the k-th largest other logit|; a row can
 *             flip between two correct backends only when its margin is below what their logits
 *             may differ by, relative to the largest |logit| (nearTies): 1e-4 for fp32 specs,
 *             TF32_TIE_MARGIN = 0.1 with TF32 convolutions (measured by bench/tf32_margin.ts: the
 *             logits of LeNet's 20 steps with TF32 convolutions move by up to 4.1e-2 x max |logit|,
 *             the parameters' drift included); the metric passes when the rows it differs by are
 *             at most the near-tie rows; and for
 *             $CUDA_CHECK_MERGE_SPECS (default mnist_mlp, char_gpt) 5 steps + eval with merged launches
 *             (codegen-cuda/merge.ts) bitwise equal to one launch per kernel (outputs, every persistent tensor);
 *   sanitize  compute-sanitizer memcheck, racecheck and synccheck over one train step of each spec
 *             at batch SANITIZE_BATCH (default 4: racecheck tracks every shared-memory access, so
 *             the spec's own batch takes minutes on the CNNs; the kernels are the same code at any
 *             batch) (logs in $OUT_DIR/sanitize_<spec>_<tool>.log).
 * Relies on: nvcc and a GPU (findNvcc / findGpu), compute-sanitizer on PATH or in /usr/local/cuda/bin.
 * Usage: npx tsx bench/cuda_check.ts [kernels] [parity] [sanitize]   (default: all three)
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { checkFile } from '../compiler/check/index.js';
import { isPersistent, numel, type Node, type Program, type StepScalars } from '../compiler/ir/graph.js';
import { runNode, type Env } from '../compiler/reference/interpret.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import type { CheckedModel } from '../compiler/model.js';
import { makeRng } from '../compiler/reference/fixtures.js';
import { TF32_OPS } from '../compiler/codegen-cuda/gemm_cuda.js';
import { initParams } from '../compiler/train/init.js';
import { buildCuda, type CudaGemm } from '../compiler/codegen-cuda/index.js';
import { cudaArchitecture, createCudaSession, findGpu, findNvcc } from '../runtime/cuda/session.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import type { Batch, Session } from '../runtime/session.js';
import { cudaCaseBuild, cudaKernelCases, judgeCases, parityBatches } from '../test/cuda_cases.js';
import { runCases, runEmu, type CaseArtifacts, type EmuBuild, type OpCase } from '../test/metal_harness.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const OUT = process.env.OUT_DIR ?? fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-check-'));
fs.mkdirSync(OUT, { recursive: true });
const TOL = 1e-4;
/**
 * the tolerance of the plain-TF32 convolutions (gemm_cuda.ts TF32_OPS, cuDNN's default under PyTorch):
 * TF32 keeps 10 of fp32's 23 mantissa bits, each operand rounds within 2^-11 relative, a product within
 * ~2^-10 ~ 1e-3; sums of many such products of either sign stay within a few times that of the largest
 * output (max-norm relative error, as TOL); 5e-3 leaves that margin and still fails any indexing error
 */
const TF32_TOL = 5e-3;
/** per-step parity tolerance of the specs with convolutions: a training step of TF32 convolutions differs from fp32 by ~1e-3 at most */
const TF32_PARITY_TOL = 2e-3;
/**
 * the near-tie margin (x the batch's max |logit|) of argmax metrics in a spec with TF32 convolutions.
 * bench/tf32_margin.ts runs LeNet's 20 parity steps (these batches, parameters, scalars) on the float64
 * reference twice, exact and with every convolution operand rounded to TF32 as cvt.rna does: the
 * logits move apart by at most 4.09e-2 x max |logit| (step 19; 4.2e-4 at step 0, the parameters'
 * drift grows it), so a row's argmax can flip only when its margin is below 2 x 4.09e-2 = 8.2e-2.
 * That run reproduces the GPU run's loss differences within 10% (step 17: 1.33e-4 vs 1.32e-4) and its
 * flipped rows (steps 7, 15, 19); 0.1 leaves 20% on top. The loss keeps TF32_PARITY_TOL.
 */
const TF32_TIE_MARGIN = 0.1;
const STEPS = 20;
const SCALARS: StepScalars = { lr: 0.05, t: 3, seed: 987654321, counter: 5 };
/** seconds one compute-sanitizer run may take (racecheck is slow on large kernels) */
const SANITIZE_TIMEOUT_S = Number(process.env.SANITIZE_TIMEOUT_S ?? 90);
/** the batch of the sanitized train step */
const SANITIZE_BATCH = Number(process.env.SANITIZE_BATCH ?? 4);
/** the compute-sanitizer tools ($SANITIZE_TOOLS: a comma-separated subset) */
const SANITIZE_TOOLS = (process.env.SANITIZE_TOOLS ?? 'memcheck,racecheck,synccheck').split(',');
/** the example specs ($CUDA_CHECK_SPECS: a comma-separated subset) */
const SPECS = fs.readdirSync(path.join(ROOT, 'specs')).filter((f) => f.endsWith('.model') && (!process.env.CUDA_CHECK_SPECS || process.env.CUDA_CHECK_SPECS.split(',').includes(f))).sort();

const nv = findNvcc();
const gpu = findGpu();
if (!nv || !gpu) {
  console.error(`cuda_check: needs nvcc and a GPU (nvcc: ${nv?.nvcc ?? 'not found'}, GPU: ${gpu?.name ?? 'none'})`);
  process.exit(1);
}
const ARCH = cudaArchitecture(gpu.computeCap);
type Row = { part: string; what: string; result: string; ok: boolean };
const log = (s: string) => process.stdout.write(s + '\n');
const rowText = (s: Row) => `${s.part.padEnd(9)} ${(s.ok ? 'ok' : 'FAIL').padEnd(5)} ${s.what.padEnd(49)} ${s.result}`;
/** the results, each also printed when it is known (a run cut short by a time limit keeps what it printed) */
const summary = {
  rows: [] as Row[],
  push(r: Row) {
    this.rows.push(r);
    log(`RESULT ${rowText(r)}`);
  },
};

/** the generated CUDA model of `programs` linked with the runtime and the ABI test driver (nvcc runs concurrently) */
async function buildDriver(programs: Program[], model: string, gemm: CudaGemm = 'cuda'): Promise<EmuBuild<CaseArtifacts>> {
  const a = buildCuda(programs, model, { gemm });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `cuda-driver-${model}-`));
  for (const [f, t] of Object.entries(a.files)) fs.writeFileSync(path.join(dir, f), t);
  for (const f of ['mpsc_model.h', 'mpsc_runtime.cc']) fs.copyFileSync(path.join(ROOT, 'runtime/cpp', f), path.join(dir, f));
  fs.copyFileSync(path.join(ROOT, 'runtime/metal-emu/emu_test_main.cc'), path.join(dir, 'emu_test_main.cc'));
  const exe = path.join(dir, 'driver');
  await promisify(execFile)(nv!.nvcc, [`-arch=sm_${ARCH}`, '-O3', '-fmad=true', '-lineinfo', '-std=c++17', `-I${dir}`,
    path.join(dir, 'model_cuda.cu'), path.join(dir, 'mpsc_runtime.cc'), path.join(dir, 'emu_test_main.cc'), '-o', exe, '-lpthread'], { maxBuffer: 1 << 24 });
  return cudaCaseBuild(a, exe);
}

async function checkKernels(): Promise<void> {
  const cases = cudaKernelCases();
  const t0 = Date.now();
  const gemms: CudaGemm[] = ['cuda', 'shared'];
  const builds = await Promise.all(gemms.map((gm) => buildDriver(cases.map((c) => c.program), `cuda_kernel_cases_${gm}`, gm)));
  log(`kernels: ${cases.length} cases built (cuda and shared GEMMs) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  for (const [bi, build] of builds.entries())
  for (const variant of ['mma', 'plain'] as const) {
    const what = `${cases.length} op cases, ${gemms[bi]} GEMMs, ${variant === 'mma' ? (gemms[bi] === 'cuda' ? '3xTF32 / TF32 convs' : '3xTF32') : 'fp32'}`;
    let got: ReturnType<typeof runCases>;
    try {
      got = runCases(build, cases, SCALARS, { MPSC_CUDA_MIRROR_ARENA: '1', MPSC_CUDA_PLAIN: variant === 'plain' ? '1' : '0' });
    } catch (e) {
      // the driver itself failed (crashed, or wrote no result file): this variant fails, the others still run
      summary.push({ part: 'kernels', what, ok: false, result: `driver failed: ${String((e as Error).message).split('\n').slice(0, 3).join(' | ')}` });
      continue;
    }
    // the CUDA GEMMs' tensor-core convolutions are plain TF32 (gemm_cuda.ts TF32_OPS): TF32_TOL for those cases
    const tf32 = (c: OpCase) => gemms[bi] === 'cuda' && variant === 'mma' && c.program.graph.nodes.some((n) => TF32_OPS.has(n.op));
    const verdicts = judgeCases(cases, got, SCALARS, (c) => (tf32(c) ? TF32_TOL : TOL));
    const worst = { fp32: 0, fp32Case: '', tf32: 0, tf32Case: '' };
    let nTf32 = 0;
    verdicts.forEach((v, i) => {
      const t = tf32(cases[i]);
      if (t) nTf32++;
      if (!v.ok) return;
      if (t && v.worst > worst.tf32) { worst.tf32 = v.worst; worst.tf32Case = v.name; }
      if (!t && v.worst > worst.fp32) { worst.fp32 = v.worst; worst.fp32Case = v.name; }
    });
    const failed = verdicts.filter((v) => !v.ok);
    for (const v of failed) for (const p of v.problems) log(`  FAIL ${gemms[bi]} ${variant}: ${p}`);
    summary.push({ part: 'kernels', what, ok: failed.length === 0,
      result: `${cases.length - failed.length}/${cases.length} ok${failed.length ? ` (failed: ${failed.slice(0, 5).map((v) => v.name).join(', ')}${failed.length > 5 ? ', ...' : ''})` : ''}; ` +
        `worst passing ${worst.fp32.toExponential(2)} (${worst.fp32Case}) within ${TOL}` +
        (nTf32 ? `, worst passing ${worst.tf32.toExponential(2)} (${worst.tf32Case}) of ${nTf32} TF32 conv cases within ${TF32_TOL}` : '') });
  }
}

/** per step (and the eval after them): the outputs, and (when `keep`) the persistent tensors before the step */
function trainSteps(model: CheckedModel, s: Session, data: Batch[], keep = false): { outs: number[][]; before: Map<string, Float32Array>[] } {
  for (const [name, v] of initParams(model, 1)) s.write(name, v);
  const before: Map<string, Float32Array>[] = [];
  const snap = () => keep && before.push(new Map(s.tensorNames().map((n) => [n, s.read(n)])));
  const outs = data.map((b, step) => {
    snap();
    return Array.from(s.run('train_step', b, { lr: model.optimizer.lr, t: step + 1, seed: 3, counter: step }));
  });
  snap();
  outs.push(Array.from(s.run('eval', data[0], { lr: 0, t: STEPS, seed: 3, counter: STEPS })));
  return { outs, before };
}

/** the argmax metrics of a program: output index -> its accuracy / top_k node */
function argmaxMetrics(p: Program): Map<number, Node> {
  const m = new Map<number, Node>();
  p.outputs.forEach((o, k) => {
    const n = p.graph.nodes.find((x) => x.outputs.includes(o.value));
    if (n && (n.op === 'accuracy' || n.op === 'top_k')) m.set(k, n);
  });
  return m;
}

/**
 * Rows of one step whose argmax metric is a tie within `margin`: the float64 reference forward pass
 * (nodes up to the metric's) from `params` gives the logits; a row's margin is |its label's logit
 * - the k-th largest other logit| (k = 1 for accuracy), a tie when below margin x the largest |logit|.
 */
function nearTies(p: Program, metric: Node, params: Map<string, Float32Array>, batch: Batch, scalars: StepScalars, margin: number): { ties: number; rows: number } {
  const env: Env = new Map();
  p.inputs.forEach((id, i) => env.set(id, Float64Array.from(batch[i])));
  for (const v of p.graph.values) if (isPersistent(v) && params.has(v.name)) env.set(v.id, Float64Array.from(params.get(v.name)!));
  const stop = p.graph.nodes.indexOf(metric);
  for (const n of p.graph.nodes.slice(0, stop)) runNode(p.graph, n, env, scalars);
  const x = env.get(metric.inputs[0])!, labels = env.get(metric.inputs[1])!;
  const C = p.graph.values[metric.inputs[0]].shape.at(-1)!;
  const k = metric.op === 'top_k' ? Number(metric.attrs.k) : 1;
  const scale = x.reduce((a, v) => Math.max(a, Math.abs(v)), 0);
  let ties = 0;
  for (let r = 0; r < labels.length; r++) {
    const l = labels[r];
    if (l < 0 || l >= C) continue;
    const others = Array.from(x.subarray(r * C, r * C + C)).filter((_, j) => j !== l).sort((a, b) => b - a);
    if (Math.abs(x[r * C + l] - others[k - 1]) < margin * scale) ties++;
  }
  return { ties, rows: labels.length };
}

/** the specs whose CUDA run is also compared bitwise with one launch per element-wise kernel ($CUDA_CHECK_MERGE_SPECS) */
const MERGE_SPECS = (process.env.CUDA_CHECK_MERGE_SPECS ?? 'mnist_mlp.model,char_gpt.model').split(',');

/** both sessions of every spec (and the unmerged CUDA one of MERGE_SPECS), built concurrently (cmake-js children) */
function openParitySessions() {
  return SPECS.map((spec) => {
    const model = checkFile(path.join(ROOT, 'specs', spec));
    const programs = buildPrograms(model, { batch: model.train.batch });
    const cpu = createCpuSession(programs, { threads: Math.min(8, os.cpus().length) });
    const cuda = createCudaSession(programs, { onProgress: (m) => log(`  ${m}`) });
    const unmerged = MERGE_SPECS.includes(spec) ? createCudaSession(programs, { merge: false, onProgress: (m) => log(`  ${m}`) }) : null;
    return { spec, model, programs, sessions: Promise.all([cpu, cuda]), unmerged };
  });
}

/**
 * compiler/codegen-cuda/merge.ts runs independent element-wise kernels (the optimizer updates of a
 * step, ...) as one launch with each kernel's statements unchanged: the outputs of every step and
 * every persistent tensor after the steps must be bitwise those of one launch per kernel
 */
function checkMergeBitwise(spec: string, model: CheckedModel, data: Batch[], merged: Session, unmerged: Session): void {
  const steps = data.slice(0, 5);
  // the same start: the fresh unmerged session's state (optimizer state, statistics) into the merged one
  for (const name of unmerged.tensorNames()) merged.write(name, unmerged.read(name));
  const a = trainSteps(model, merged, steps).outs, b = trainSteps(model, unmerged, steps).outs;
  const diffs: string[] = [];
  a.forEach((r, s) => r.forEach((x, k) => { if (!Object.is(x, b[s][k])) diffs.push(`step ${s} output ${k}: ${x} vs ${b[s][k]}`); }));
  let tensors = 0;
  for (const name of merged.tensorNames()) {
    const x = merged.read(name), y = unmerged.read(name);
    tensors++;
    const i = x.findIndex((v, j) => !Object.is(v, y[j]));
    if (i >= 0 || x.length !== y.length) diffs.push(`${name}[${i}]: ${x[i]} vs ${y[i]}`);
  }
  for (const d of diffs.slice(0, 10)) log(`  ${spec} merged vs unmerged: ${d}`);
  summary.push({ part: 'parity', what: `${spec} merged launches bitwise`, ok: diffs.length === 0,
    result: diffs.length ? `${diffs.length} output(s) / tensor(s) differ` : `${steps.length} steps + eval, ${tensors} tensors identical` });
}

async function checkParity(opened: ReturnType<typeof openParitySessions>): Promise<void> {
  for (const { spec, model, programs, sessions, unmerged } of opened) {
    const data = parityBatches(model, programs.train_step, STEPS);
    let cpu: Session, cuda: Session;
    try {
      [cpu, cuda] = await sessions;
    } catch (e) {
      summary.push({ part: 'parity', what: `${spec} sessions`, ok: false, result: String((e as Error).message).split('\n').slice(0, 4).join(' | ') });
      continue;
    }
    // TF32 convolutions (gemm_cuda.ts TF32_OPS) in the step: TF32_PARITY_TOL and TF32_TIE_MARGIN, else TOL for both
    const tf32 = programs.train_step.graph.nodes.some((n) => TF32_OPS.has(n.op));
    const tol = tf32 ? TF32_PARITY_TOL : TOL, margin = tf32 ? TF32_TIE_MARGIN : TOL;
    try {
      const cpuRun = trainSteps(model, cpu, data, true), a = cpuRun.outs, b = trainSteps(model, cuda, data).outs;
      const metrics = [argmaxMetrics(programs.train_step), argmaxMetrics(programs.eval)];
      let worst = 0, where = '', first = '';
      const tieNotes: string[] = [];
      for (let s = 0; s < a.length; s++)
        for (let k = 0; k < a[s].length; k++) {
          let e = Math.abs(b[s][k] - a[s][k]) / Math.max(1e-6, Math.abs(a[s][k]));
          const isEval = s === a.length - 1;
          const metric = metrics[isEval ? 1 : 0].get(k);
          if (metric && !(e < tol)) {
            // an argmax metric: the rows it differs by must all be near-ties
            const p = isEval ? programs.eval : programs.train_step;
            const sc: StepScalars = isEval ? { lr: 0, t: STEPS, seed: 3, counter: STEPS } : { lr: model.optimizer.lr, t: s + 1, seed: 3, counter: s };
            const { ties, rows } = nearTies(p, metric, cpuRun.before[s], data[isEval ? 0 : s], sc, margin);
            const flips = Math.round(Math.abs(b[s][k] - a[s][k]) * rows);
            tieNotes.push(`step ${s} output ${k} (${metric.op}): ${flips} row(s) differ, ${ties} near-tie row(s) (margin < ${margin} x max |logit|)`);
            if (flips <= ties) e = 0;
          }
          if (!(e <= worst)) { worst = e; where = `step ${s} output ${k}: cuda ${b[s][k]} cpu ${a[s][k]}`; }
          if (!first && !(e < tol)) first = `; first over ${tol}: step ${s} output ${k} (cuda ${b[s][k]}, cpu ${a[s][k]})`;
        }
      for (const t of tieNotes) log(`  ${spec} argmax metric: ${t}`);
      log(`  ${spec} per step (loss, metrics): ${a.map((r, s) => `${s}: cpu ${r.map((x) => x.toPrecision(7)).join('/')} cuda ${b[s].map((x) => x.toPrecision(7)).join('/')}`).join('; ')}${first}`);
      log(`parity ${spec}: losses cpu ${a[0][0].toFixed(5)} -> ${a[STEPS - 1][0].toFixed(5)}, cuda ${b[0][0].toFixed(5)} -> ${b[STEPS - 1][0].toFixed(5)}; worst ${where}`);
      summary.push({ part: 'parity', what: `${spec} ${STEPS} steps + eval vs cpu`, ok: worst < tol, result: `worst rel ${worst.toExponential(2)} (tolerance ${tol}${tf32 ? `: TF32 convolutions; argmax near-tie margin ${margin}` : ''})` });
      if (unmerged) {
        let u: Session | undefined;
        try {
          u = await unmerged;
          checkMergeBitwise(spec, model, data, cuda, u);
        } catch (e) {
          summary.push({ part: 'parity', what: `${spec} merged launches bitwise`, ok: false, result: String((e as Error).message).split('\n').slice(0, 4).join(' | ') });
        } finally {
          u?.close();
        }
      }
    } finally {
      cpu.close();
      cuda.close();
    }
  }
}

function sanitizerPath(): string {
  for (const p of ['/usr/local/cuda/bin/compute-sanitizer', path.join(path.dirname(fs.realpathSync(nv!.nvcc)), 'compute-sanitizer')]) if (fs.existsSync(p)) return p;
  return 'compute-sanitizer';
}

/** one train step's driver per spec, built concurrently */
function sanitizeDrivers() {
  return SPECS.map((spec) => {
    const model = checkFile(path.join(ROOT, 'specs', spec));
    const p = buildPrograms(model, { batch: Math.min(model.train.batch, SANITIZE_BATCH) }).train_step;
    const build = buildDriver([p], `sanitize_${spec.replace(/\W/g, '_')}`);
    build.catch(() => undefined); // reported when awaited
    return { spec, model, p, build };
  });
}

async function checkSanitizer(drivers: ReturnType<typeof sanitizeDrivers>): Promise<void> {
  const cs = sanitizerPath();
  for (const { spec, model, p, build: building } of drivers) {
    let build: EmuBuild<CaseArtifacts>;
    try {
      build = await building;
    } catch (e) {
      summary.push({ part: 'sanitize', what: `${spec} driver build`, ok: false, result: String((e as Error).message).split('\n').slice(0, 4).join(' | ') });
      continue;
    }
    const init = initParams(model, 1);
    const writes = build.art.table.tensors.flatMap((t, i) => (init.has(t.name) ? [{ tensor: i, data: init.get(t.name)! }] : []));
    const runs = [{ program: 0, scalars: { lr: model.optimizer.lr, t: 1, seed: 3, counter: 0 }, inputs: parityBatches(model, p, 1)[0] }];
    for (const tool of SANITIZE_TOOLS) {
      const logFile = path.join(OUT, `sanitize_${spec.replace(/\.model$/, '')}_${tool}.log`);
      const wrapper = path.join(path.dirname(build.exe), `san_${tool}.sh`);
      fs.writeFileSync(wrapper, `#!/bin/sh\nexec timeout ${SANITIZE_TIMEOUT_S} ${cs} --tool ${tool} --error-exitcode 9 --print-limit 20 --log-file ${logFile} ${build.exe} "$@"\n`, { mode: 0o755 });
      let ok = true, result = 'clean';
      try {
        const r = runEmu({ exe: wrapper, art: build.art }, writes, runs).results[0];
        if (!r.ok) { ok = false; result = `run failed: ${r.error}`; }
      } catch (e) {
        ok = false;
        const timedOut = /status 124|exit code 124/.test(String((e as Error).message)) || (e as { status?: number }).status === 124;
        result = timedOut ? `not finished within ${SANITIZE_TIMEOUT_S} s (SANITIZE_TIMEOUT_S)` : `errors (see ${path.basename(logFile)})`;
        const text = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : String((e as Error).message);
        log(text.split('\n').slice(0, 30).join('\n'));
      }
      if (ok && fs.existsSync(logFile)) {
        const m = fs.readFileSync(logFile, 'utf8').match(/ERROR SUMMARY: (\d+) error/);
        if (m && m[1] !== '0') { ok = false; result = `${m[1]} errors`; }
      }
      summary.push({ part: 'sanitize', what: `${spec} train_step (batch ${p.batch}) ${tool}`, ok, result });
    }
  }
}



const parts = process.argv.slice(2);
const want = (p: string) => parts.length === 0 || parts.includes(p);
const run = async (name: string, f: () => void | Promise<void>) => {
  const t0 = Date.now();
  try {
    await f();
  } catch (e) {
    summary.push({ part: name, what: 'aborted', ok: false, result: String((e as Error).message).split('\n').slice(0, 3).join(' | ') });
  }
  log(`${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
};
log(`cuda_check on ${gpu.name} (compute ${gpu.computeCap}, sm_${ARCH}), ${nv.version}; logs in ${OUT}`);
// the parity sessions build (cmake-js child processes) while the kernel cases build and run
const opened = want('parity') ? openParitySessions() : [];
for (const o of opened) o.sessions.catch(() => undefined); // reported when awaited
const drivers = want('sanitize') ? sanitizeDrivers() : [];
if (want('kernels')) await run('kernels', checkKernels);
if (want('parity')) await run('parity', () => checkParity(opened));
if (want('sanitize')) await run('sanitize', () => checkSanitizer(drivers));
fs.writeFileSync(path.join(OUT, 'cuda_check.json'), JSON.stringify(summary.rows, null, 1) + '\n');
log('\npart      ok    what                                              result');
for (const s of summary.rows) log(rowText(s));
const failed = summary.rows.filter((s) => !s.ok).length;
log(failed ? `\n${failed} check(s) FAILED` : '\nall checks passed');
process.exit(failed ? 1 : 0);
