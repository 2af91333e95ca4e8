/**
 * The Metal backend's code generator.
 *
 *   generateMetalProject(programs, outDir)   `mpsc build --target metal`: per program
 *       outDir/<program>.metal and outDir/<program>.plan.json, and outDir/bridge/ (the bridge
 *       sources, the plans as host tables, the shared runtime): a CMake project for macOS
 *   buildMetal(programs, model, opts)        the same artifacts in memory (tests, metal-emu)
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Program, type ProgramSet, programsOf } from '../ir/graph.js';
import { lowerProgram, type LoweredProgram } from './lower_program.js';
import type { GpuRegistry } from '../kernels/registry.js';
import { librarySource } from './library.js';
import { persistentTable, programLayout, type PersistentTable } from './layout.js';
import { buildPlan, type DispatchPlan } from './dispatch_plan.js';
import { checkLimits } from './limits.js';
import { emuModelSource, type CpuFallbackEmitter } from './emu_model.js';
import { bridgeHostSource, bridgeProjectFiles } from './bridge_host.js';
import { cpuFallbackFunction, cpuKernelsHeader } from './cpu_fallback.js';
import { NO_FUSIONS } from '../ir/fuse.js';
import { fuseForBackend } from '../ir/programs.js';
import { metalFusions } from './fusions.js';

export interface MetalOptions {
  /** ops forced onto the CPU fallback (tests the fallback path) */
  fallbackOps?: string[];
  /** an op without a Metal kernel is an error instead of a CPU fallback */
  noFallback?: boolean;
  /** fuse GEMM + unary epilogues (fusions.ts, compiler/ir/fuse.ts; default true) */
  fuse?: boolean;
  /** the GPU kernel registry (default compiler/kernels/registry.ts GPU_KERNELS; 'cpu' entries run on the CPU fallback) */
  registry?: GpuRegistry;
}

export interface MetalProgramArtifacts {
  program: Program;
  lowered: LoweredProgram;
  plan: DispatchPlan;
  /** `<name>.metal` */
  libraryFile: string;
  library: string;
}

export interface MetalArtifacts {
  model: string;
  table: PersistentTable;
  programs: MetalProgramArtifacts[];
  warnings: string[];
}

/** `programs` unfused: each is fused with the Metal capability set (fusions.ts) and planned again. */
export function buildMetal(unfused: Program[], model: string, opts: MetalOptions = {}): MetalArtifacts {
  const caps = opts.fuse === false ? NO_FUSIONS : metalFusions(opts.fallbackOps, opts.registry);
  const programs = unfused.map((p) => fuseForBackend(p, caps));
  const table = persistentTable(programs);
  const warnings: string[] = [];
  const out = programs.map((p) => {
    const layout = programLayout(p, table);
    const lowered = lowerProgram(p, opts, layout);
    warnings.push(...lowered.warnings);
    const plan = buildPlan(lowered, layout, table, model);
    checkLimits(plan, p);
    return { program: p, lowered, plan, libraryFile: `${p.name}.metal`, library: librarySource(lowered, model) };
  });
  return { model, table, programs: out, warnings };
}

/** Sources of the metal-emu model: file name -> contents (the .metal libraries and the model .cc). */
export function metalEmuSources(a: MetalArtifacts, cpuFallback: CpuFallbackEmitter = cpuFallbackFunction): Record<string, string> {
  const files: Record<string, string> = {};
  for (const p of a.programs) files[p.libraryFile] = p.library;
  const { source, fallbackSource } = emuModelSource(a.model, a.table,
    a.programs.map((p) => ({ lowered: p.lowered, plan: p.plan, library: p.libraryFile })), { cpuFallback });
  files['model_metal_emu.cc'] = source;
  if (fallbackSource) {
    files['metal_emu_fallback.inc'] = fallbackSource;
    files['mpsc_kernels.hpp'] = cpuKernelsHeader();
  }
  return files;
}

const BRIDGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../runtime/metal-bridge');
const RUNTIME_CPP = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../runtime/cpp');

export function generateMetalProject(programs: ProgramSet, outDir: string, opts: { fallbackOps?: string[]; noFallback?: boolean } = {}): { files: string[]; warnings: string[] } {
  const a = buildMetal(programsOf(programs), programs.model, opts);
  const files: string[] = [];
  const write = (rel: string, text: string) => {
    const f = path.join(outDir, rel);
    fs.mkdirSync(path.dirname(f), { recursive: true });
    fs.writeFileSync(f, text);
    files.push(f);
  };
  for (const p of a.programs) {
    write(p.libraryFile, p.library);
    write(`${p.program.name}.plan.json`, JSON.stringify(p.plan, null, 1) + '\n');
  }
  write(path.join('bridge', 'mpsc_metal_plan.inc'), bridgeHostSource(a));
  for (const f of fs.readdirSync(BRIDGE_DIR)) {
    if (/\.(mm|h|txt|md|cmake)$/.test(f)) write(path.join('bridge', f), fs.readFileSync(path.join(BRIDGE_DIR, f), 'utf8'));
  }
  for (const [f, text] of Object.entries(bridgeProjectFiles())) write(path.join('bridge', f), text);
  // the shared host runtime (model ABI, runtime, Node binding) and the CPU kernels used by fallback steps
  for (const f of ['mpsc_model.h', 'mpsc_parallel.hpp', 'mpsc_runtime.cc', 'binding.cc'])
    write(path.join('bridge', f), fs.readFileSync(path.join(RUNTIME_CPP, f), 'utf8'));
  write(path.join('bridge', 'mpsc_kernels.hpp'), cpuKernelsHeader());
  return { files, warnings: a.warnings };
}
