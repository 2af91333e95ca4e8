/**
 * `mpsc build SPEC [-o DIR] [--device cpu|metal|cuda|all (alias --target)] [--batch N] [--threads N] [--cxxflags FLAGS]`
 *
 * Writes the generated sources and CMake project to DIR (default build/<model>): DIR/cpu is a
 * complete CMake project (the node addon via cmake-js, and `<target>_embed`, a static library
 * of the model + host runtime for embedding without Node); DIR/metal holds the Metal
 * backend's sources (device metal|all); DIR/cuda the CUDA backend's kernels, host code and CMake
 * project (CUDA as a CMake language; device cuda|all). Compiles what this machine can build (the
 * CPU module; the CUDA module where nvcc is found), into the build cache that `mpsc train` uses,
 * then prints where everything went and a short report: kernels, buffers, planned memory.
 */
import { Option, type Command } from 'commander';
import * as path from 'node:path';
import { checkFile } from '../compiler/check/index.js';
import { generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import { generateMetalProject } from '../compiler/codegen-metal/index.js';
import { UserError } from '../compiler/errors.js';
import { type ProgramSet, programsOf } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { formatBytes } from '../compiler/ir/print_ir.js';
import { buildAddon, resolveCxxflags, writeCmakeProject } from '../runtime/native/build.js';
import { makeDirs } from '../runtime/checkpoint.js';
import { cpuInputsKey } from '../runtime/native/native_session.js';
import { generateCudaModel } from '../compiler/codegen-cuda/index.js';
import { attentionReport } from '../compiler/codegen-cuda/attention_cuda.js';
import { cublasLtChoice, tf32x3Choice, cudaArchitecture, cudaInputsKey, findCublasLt, findGpu, findNvcc, gemmReport, wgmmaArchCheck } from '../runtime/cuda/session.js';

interface BuildOpts {
  output?: string;
  device?: string;
  target?: string;
  batch?: string;
  threads?: string;
  cxxflags?: string;
  compile: boolean;
  fallback: boolean;
  fallbackOp: string[];
}

const TARGETS = ['cpu', 'metal', 'cuda', 'all'];

function positiveInt(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new UserError(`error: ${flag} must be a positive integer, got '${v}'`);
  return n;
}


function writeMetal(programs: ProgramSet, dir: string, opts: { fallbackOps: string[]; fallback: boolean }, log: (s: string) => void): void {
  const r = generateMetalProject(programs, dir, { fallbackOps: opts.fallbackOps, noFallback: !opts.fallback });
  log(`metal: ${r.files.length} files in ${dir}`);
  for (const w of r.warnings) log(`  warning: ${w}`);
  if (process.platform === 'darwin' && process.arch === 'arm64') log('  compile and run them with: mpsc train SPEC --device metal');
  else log(`  (this machine is ${process.platform}/${process.arch}: Metal needs macOS on Apple silicon; test the kernels here with --device metal-emu)`);
}

async function writeCuda(programs: ProgramSet, dir: string, compile: boolean, log: (s: string) => void): Promise<void> {
  const cublasLt = cublasLtChoice();
  const tf32x3 = tf32x3Choice();
  const nv = findNvcc();
  const gpu = findGpu();
  const settings = { nvcc: nv?.nvcc ?? 'nvcc', version: nv?.version ?? 'unknown', architectures: cudaArchitecture(gpu?.computeCap ?? null) };
  wgmmaArchCheck(settings.architectures);
  const a = generateCudaModel(programs, { cublasLt, tf32x3, arch: settings.architectures });
  const target = `mpsc_${programs.model.replace(/[^A-Za-z0-9_]/g, '_')}_cuda`;
  const files = writeCmakeProject(dir, a.files, '-O2', target, settings);
  log(`cuda: ${files.length} files in ${dir} (CMake targets ${target}, ${target}_embed; CMAKE_CUDA_ARCHITECTURES ${settings.architectures}${gpu ? ` for ${gpu.name}` : ' (no GPU here: Hopper assumed)'})`);
  if (compile && nv) {
    const built = await buildAddon({ files: a.files, inputsKey: cudaInputsKey(programs, 'cuda', cublasLt, true, tf32x3), cxxflags: '-O2', cuda: settings, onProgress: (m) => process.stderr.write(m + '\n') });
    log(`  module: ${built.modulePath} (${built.cached ? 'cached' : 'built'})`);
  } else if (compile) log('  not compiled: nvcc was not found (set MPSC_NVCC or put nvcc on PATH)');
  // lanes.ts: how many capture streams each graph uses (1: one chain)
  const lanes = a.lanes.map((sc) => Math.max(...sc.lane) + 1);
  log('  program        batch  kernels  graph nodes  lanes');
  a.plan.programs.forEach((p, i) => log(`  ${p.name.padEnd(14)} ${String(p.batch).padStart(5)}  ${String(p.kernels).padStart(7)}  ${String(p.nodes.length).padStart(11)}  ${String(lanes[i]).padStart(5)}`));
  if (lanes.some((l) => l > 1)) log('  lanes: a graph captured on several streams runs independent nodes side by side (a weight gradient beside its input gradient; compiler/codegen-cuda/lanes.ts); MPSC_CUDA_LANES=1 at build time keeps one chain');
  if (a.plan.pdl !== 'off') log(`  programmatic dependent launch between the graphs' kernels (MPSC_CUDA_PDL=${a.plan.pdl}; compiler/codegen-cuda/pdl.ts)`);
  log(`  planned device memory: ${formatBytes(a.plan.deviceBytes)} in one allocation (persistent ${formatBytes(a.plan.persistent.bytes)}, arena ${formatBytes(a.plan.arena.bytes)}, input batches ${formatBytes(a.plan.inputs.reduce((s, r) => s + r.bytes, 0))}${a.plan.scratch.bytes > 1 ? `, scratch ${formatBytes(a.plan.scratch.bytes)}${a.plan.lanes > 1 ? ` (${a.plan.lanes} lanes' slices)` : ''}` : ''}${a.plan.ltWorkspace.bytes ? `, cuBLASLt workspace ${formatBytes(a.plan.ltWorkspace.bytes)}` : ''})`);
  for (const line of gemmReport(a.gemms, nv ? findCublasLt(nv.nvcc) : null, true)) log(`  ${line}`);
  log('  generated GEMMs: 64x64-tile kernels on the tensor cores, 3xTF32 (16-bit operands exact in one pass); fp32 convolutions: TF32 implicit-GEMM kernels of 64- or 128-row tiles (conv_cuda.ts); MPSC_CUDA_PLAIN=1 at run time: fp32 FFMA');
  for (const line of attentionReport(a.lowered.map((l) => l.program.graph), settings.architectures === '90a')) log(`  ${line}`);
}

export function register(program: Command): void {
  program
    .command('build')
    .description('generate and compile the kernels and host runtime for a .model spec, and report kernels and memory')
    .argument('<spec>', 'path to a .model file')
    .option('-o, --output <dir>', 'output folder (default: build/<model>)')
    .option('--device <device>', 'what to generate and compile: cpu | metal | cuda | all (default cpu)')
    .addOption(new Option('--target <target>', 'the same as --device (older name)').hideHelp())
    .option('--batch <n>', "batch size to compile for (default: the spec's train { batch })")
    .option('--threads <n>', 'threads the CPU module will use by default (report only; mpsc train takes --threads)')
    .option('--cxxflags <flags>', 'C++ compiler flags (default: $MPSC_CXXFLAGS or "-O3 -march=native -fno-math-errno")')
    .option('--no-compile', 'only write the sources, do not compile')
    .option('--no-fallback', 'metal: make an op without a Metal kernel an error instead of a CPU-fallback warning')
    .option('--fallback-op <op...>', 'metal: run these IR ops on the CPU fallback (testing the fallback path)', [])
    .addHelpText('after', `
Examples:
  mpsc build specs/mnist_mlp.model                      generate and compile the CPU module into build/mnist_mlp
  mpsc build specs/lenet.model --device metal -o out    write the Metal kernels and host project
  mpsc build specs/lenet.model --device all --no-compile
`)
    .action(async (spec: string, opts: BuildOpts) => {
      if (opts.device !== undefined && opts.target !== undefined && opts.device !== opts.target) {
        throw new UserError(`error: --device ${opts.device} and --target ${opts.target} disagree\n  help: --target is the older name of --device; give one`);
      }
      const device = opts.device ?? opts.target ?? 'cpu';
      const flag = opts.device !== undefined ? '--device' : '--target';
      if (!TARGETS.includes(device)) throw new UserError(`error: unknown ${flag} '${device}'\n  help: use one of ${TARGETS.join(', ')}`);
      if (!opts.fallback && opts.fallbackOp.length) throw new UserError('error: --no-fallback and --fallback-op contradict each other\n  help: --fallback-op forces ops onto the CPU fallback; --no-fallback forbids any fallback');
      const batch = positiveInt(opts.batch, '--batch');
      positiveInt(opts.threads, '--threads');
      const model = checkFile(spec);
      const programs = buildPrograms(model, { batch: batch ?? model.train.batch });
      const outDir = path.resolve(opts.output ?? path.join('build', model.name));
      const log = (s: string) => process.stdout.write(s + '\n');
      makeDirs(outDir, 'the output folder');
      log(`model ${model.name} (${spec}), batch ${programs.train_step.batch}`);

      if (device === 'cpu' || device === 'all') {
        const cxxflags = resolveCxxflags(opts.cxxflags);
        const gen = generateCpuModel(programs);
        const cpuDir = path.join(outDir, 'cpu');
        const target = `mpsc_${model.name.replace(/[^A-Za-z0-9_]/g, '_')}`;
        const files = writeCmakeProject(cpuDir, gen.files, cxxflags, target);
        log(`cpu: ${files.length} files in ${cpuDir} (CMake targets ${target}, ${target}_embed; flags ${cxxflags})`);
        if (opts.compile) {
          const built = await buildAddon({
            files: gen.files, inputsKey: cpuInputsKey(programs), cxxflags,
            onProgress: (m) => process.stderr.write(m + '\n'),
          });
          log(`  module: ${built.modulePath} (${built.cached ? 'cached' : 'built'})`);
        }
        log('');
        log('program        batch  kernels  arena');
        for (const p of gen.programs) log(`${p.name.padEnd(14)} ${String(p.batch).padStart(5)}  ${String(p.kernels).padStart(7)}  ${formatBytes(p.arenaBytes)}`);
        const byKind = new Map<string, { n: number; bytes: number }>();
        for (const t of gen.tensors) {
          const e = byKind.get(t.kind) ?? { n: 0, bytes: 0 };
          e.n++;
          e.bytes += t.numel * 4;
          byKind.set(t.kind, e);
        }
        log('');
        log(`persistent buffers: ${gen.tensors.length} (${formatBytes(gen.persistentBytes)})`);
        for (const [kind, e] of byKind) log(`  ${kind.padEnd(9)} ${String(e.n).padStart(4)}  ${formatBytes(e.bytes)}`);
        const arena = Math.max(...gen.programs.map((p) => p.arenaBytes));
        const inputs = Math.max(...programsOf(programs).map((p) => p.plan?.inputBytes ?? 0));
        log(`planned memory: arena ${formatBytes(arena)} + persistent ${formatBytes(gen.persistentBytes)} + input batch ${formatBytes(inputs)} = ${formatBytes(arena + gen.persistentBytes + inputs)}`);
      }
      if (device === 'metal' || device === 'all') {
        writeMetal(programs, path.join(outDir, 'metal'), { fallbackOps: opts.fallbackOp, fallback: opts.fallback }, log);
      }
      if (device === 'cuda' || device === 'all') await writeCuda(programs, path.join(outDir, 'cuda'), opts.compile, log);
    });
}
