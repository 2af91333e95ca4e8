/**
 * Test helper for the Metal backend: builds op-level Programs by hand, compiles their
 * generated MSL + metal-emu model with g++ into one test driver (cached by content hash),
 * runs scripts through it, and compares with the float64 reference interpreter.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { GraphBuilder, type AttrValue, type DType, type Program, type StepScalars, type ValueKind, numel } from '../compiler/ir/graph.js';
import { opDef } from '../compiler/ir/ops.js';
import { runNode, type Env } from '../compiler/reference/interpret.js';
import { buildMetal, metalEmuSources, type MetalArtifacts, type MetalOptions } from '../compiler/codegen-metal/index.js';
import { programLayout, type PersistentTable } from '../compiler/codegen-metal/layout.js';
import { emuArchFlags } from '../runtime/metal-emu/session.js';
import type { CpuFallbackEmitter } from '../compiler/codegen-metal/emu_model.js';
import { halfToFloat } from '../runtime/safetensors.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const EMU = path.join(ROOT, 'runtime/metal-emu');
const BRIDGE = path.join(ROOT, 'runtime/metal-bridge');
const CPP = path.join(ROOT, 'runtime/cpp');

export interface CaseInput { shape: number[]; data: Float64Array; dtype?: DType }

export interface OpCase {
  program: Program;
  /** input data by value id (inputs and persistent values) */
  data: Map<number, Float64Array>;
  /** node outputs and mutated inputs to compare */
  check: number[];
}

/** One node as a program; mutated inputs become persistent values named `<name>.in<k>`; outputs are f32 unless `outDtypes` says otherwise. */
export function opCase(name: string, op: string, inputs: (CaseInput | null)[], outShapes: number[][], attrs: Record<string, AttrValue> = {}, outDtypes: DType[] = []): OpCase {
  const b = new GraphBuilder();
  const mut = opDef(op).mutates ?? [];
  const data = new Map<number, Float64Array>();
  const progInputs: number[] = [];
  const ids = inputs.map((inp, k) => {
    if (!inp) return -1;
    const kind: ValueKind = mut.includes(k) ? 'param' : 'input';
    const id = b.value(`${name}.in${k}`, inp.dtype ?? 'f32', inp.shape, kind);
    const d = inp.dtype === 'i32' ? inp.data : Float64Array.from(inp.data, (x) => Math.fround(x));
    data.set(id, d);
    if (kind === 'input') progInputs.push(id);
    return id;
  });
  const outs = outShapes.map((s, k) => b.value(`${name}.out${k}`, outDtypes[k] ?? 'f32', s, 'activation'));
  b.node(op, ids, outs, attrs, name);
  const program = { name: name as Program['name'], batch: 1, graph: b.graph, inputs: progInputs, outputs: [] } as Program;
  return { program, data, check: [...outs, ...mut.map((k) => ids[k]).filter((v) => v >= 0)] };
}

export function reference(c: OpCase, scalars: StepScalars): Map<number, Float64Array> {
  const env: Env = new Map();
  for (const [id, d] of c.data) env.set(id, Float64Array.from(d));
  for (const n of c.program.graph.nodes) runNode(c.program.graph, n, env, scalars);
  return env;
}

/**
 * What runEmu and runCases read of a build: the driver executable, the persistent table, and per
 * program (in the order of the programs built: runCases' case order) the program as built (fused by
 * compiler/ir/fuse.ts: ids renumbered, names kept). Metal builds carry all of MetalArtifacts; the
 * CUDA check's driver (test/cuda_cases.ts cudaCaseBuild) only these.
 */
export interface CaseArtifacts { table: PersistentTable; programs: { program: Program }[] }
export interface EmuBuild<A extends CaseArtifacts = MetalArtifacts> { exe: string; art: A }

/** `mutate` may edit the artifacts (library text, plans) before the emulator sources are made: used to break kernels on purpose. */
export function compileEmu(programs: Program[], opts: MetalOptions = {}, cpuFallback?: CpuFallbackEmitter, model = 'metal_test', mutate?: (a: MetalArtifacts) => void, cxxflags: string[] = []): EmuBuild {
  const art = buildMetal(programs, model, opts);
  mutate?.(art);
  const files = metalEmuSources(art, cpuFallback);
  const h = crypto.createHash('sha256');
  for (const [k, v] of Object.entries(files).sort()) h.update(k).update('\0').update(v).update('\0');
  const flags = [...emuArchFlags(), ...cxxflags];
  h.update(flags.join(' '));
  for (const f of ['emu_fiber.h', 'emu_dispatch.h', 'metal_compat.h', 'metal_compat_end.h', 'emu_test_main.cc']) h.update(fs.readFileSync(path.join(EMU, f), 'utf8'));
  for (const f of ['mpsc_model.h', 'mpsc_runtime.cc']) h.update(fs.readFileSync(path.join(CPP, f), 'utf8'));
  h.update(fs.readFileSync(path.join(BRIDGE, 'mpsc_metal_caps.h'), 'utf8'));
  const dir = path.join(os.tmpdir(), 'mpsc-metal-emu-test', h.digest('hex').slice(0, 16));
  const exe = path.join(dir, 'emu_test');
  if (!fs.existsSync(exe)) {
    fs.mkdirSync(dir, { recursive: true });
    for (const [k, v] of Object.entries(files)) fs.writeFileSync(path.join(dir, k), v);
    const tmp = `${exe}.${process.pid}`;
    execFileSync('nice', ['g++', '-std=c++17', '-O1', '-Wno-attributes', ...flags, `-I${dir}`, `-I${EMU}`, `-I${path.join(EMU, 'include')}`, `-I${CPP}`, `-I${BRIDGE}`,
      path.join(dir, 'model_metal_emu.cc'), path.join(CPP, 'mpsc_runtime.cc'), path.join(EMU, 'emu_test_main.cc'), '-o', tmp, '-lpthread'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    fs.renameSync(tmp, exe);
  }
  return { exe, art };
}

export interface RunRequest { program: number; scalars: StepScalars; inputs: (Float32Array | Int32Array)[] }
export type RunResult = { ok: true; outputs: number[]; arena: Buffer } | { ok: false; error: string };

/** the test driver's input file (emu_test_main.cc's IN format): the tensor writes, then the runs */
export function encodeRuns(writes: { tensor: number; data: Float32Array }[], runs: RunRequest[]): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => { const x = Buffer.alloc(4); x.writeUInt32LE(n >>> 0); parts.push(x); };
  u32(writes.length);
  for (const w of writes) { u32(w.tensor); u32(w.data.byteLength); parts.push(Buffer.from(w.data.buffer, w.data.byteOffset, w.data.byteLength)); }
  u32(runs.length);
  for (const r of runs) {
    u32(r.program);
    const f = Buffer.alloc(4); f.writeFloatLE(r.scalars.lr); parts.push(f);
    u32(r.scalars.t); u32(r.scalars.seed); u32(r.scalars.counter);
    u32(r.inputs.length);
    for (const d of r.inputs) { u32(d.byteLength); parts.push(Buffer.from(d.buffer, d.byteOffset, d.byteLength)); }
  }
  return Buffer.concat(parts as unknown as Uint8Array[]);
}

export function runEmu(b: EmuBuild<CaseArtifacts>, writes: { tensor: number; data: Float32Array }[], runs: RunRequest[], env: Record<string, string> = {}): { results: RunResult[]; persistent: Buffer } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-emu-run-'));
  try {
    fs.writeFileSync(path.join(dir, 'in'), encodeRuns(writes, runs) as unknown as Uint8Array);
    execFileSync(b.exe, [path.join(dir, 'in'), path.join(dir, 'out')], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
    const o = fs.readFileSync(path.join(dir, 'out'));
    let at = 0;
    const results: RunResult[] = runs.map(() => {
      const st = o.readUInt32LE(at); at += 4;
      if (st !== 0) { const len = o.readUInt32LE(at); at += 4; const error = o.subarray(at, at + len).toString(); at += len; return { ok: false, error }; }
      const no = o.readUInt32LE(at); at += 4;
      const outputs: number[] = [];
      for (let i = 0; i < no; i++) { outputs.push(o.readDoubleLE(at)); at += 8; }
      const ab = Number(o.readBigUInt64LE(at)); at += 8;
      const arena = o.subarray(at, at + ab); at += ab;
      return { ok: true, outputs, arena };
    });
    const pb = Number(o.readBigUInt64LE(at)); at += 8;
    return { results, persistent: o.subarray(at, at + pb) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** the writes (each case's persistent inputs) and one run per case (program = the case's index), as runCases sends them */
export function caseRequests(b: EmuBuild<CaseArtifacts>, cases: OpCase[], scalars: StepScalars): { writes: { tensor: number; data: Float32Array }[]; runs: RunRequest[] } {
  const table = b.art.table;
  const writes: { tensor: number; data: Float32Array }[] = [];
  const runs: RunRequest[] = [];
  cases.forEach((c, ci) => {
    for (const [id, d] of c.data) {
      const v = c.program.graph.values[id];
      if (v.kind === 'input') continue;
      writes.push({ tensor: table.tensors.findIndex((t) => t.name === v.name), data: Float32Array.from(d) });
    }
    runs.push({ program: ci, scalars, inputs: c.program.inputs.map((id) => c.program.graph.values[id].dtype === 'i32' ? Int32Array.from(c.data.get(id)!) : Float32Array.from(c.data.get(id)!)) });
  });
  return { writes, runs };
}

/**
 * Runs every case once through the driver; returns per case the values of `check` (by value id) or
 * an error naming what is missing: a run that failed or has no result, no program as built for the
 * case, a checked value absent from the program as built or without a home, bytes beyond what the
 * driver returned. One case's problem never stops the others.
 */
export function runCases(b: EmuBuild<CaseArtifacts>, cases: OpCase[], scalars: StepScalars, env: Record<string, string> = {}): (Map<number, Float64Array> | string)[] {
  const table = b.art.table;
  const { writes, runs } = caseRequests(b, cases, scalars);
  const { results, persistent } = runEmu(b, writes, runs, env);
  return cases.map((c, ci) => {
    const r = results[ci];
    if (!r) return `the driver returned no result for run ${ci} (${results.length} results for ${cases.length} cases)`;
    if (!r.ok) return r.error;
    const built = b.art.programs[ci]?.program;
    if (!built) return `the build has no program ${ci} (${b.art.programs.length} programs for ${cases.length} cases)`;
    const layout = programLayout(built, table);
    const m = new Map<number, Float64Array>();
    for (const id of c.check) {
      const v = c.program.graph.values[id];
      const at = built.graph.values.findIndex((x) => x.name === v.name);
      if (at < 0) return `value ${v.name} is not in program ${built.name} as built (fused away?)`;
      const h = layout.homes[at];
      if (!h) return `value ${v.name} has no home in program ${built.name}'s memory plan`;
      const buf = h.region === 'arena' ? r.arena : h.region === 'persistent' ? persistent : null;
      if (!buf) return `value ${v.name} lives in the ${h.region} region, which the driver does not return`;
      const f = new Float64Array(numel(v.shape));
      // 16-bit values read back widened (bf16: the high half of an f32; f16: IEEE binary16)
      const w = v.dtype === 'f16' || v.dtype === 'bf16' ? 2 : 4;
      if (h.offset + w * f.length > buf.length) return `value ${v.name}: ${h.region} bytes ${h.offset}..${h.offset + w * f.length} beyond the ${buf.length} the driver returned`;
      const bf16 = new DataView(new ArrayBuffer(4));
      const read = (i: number): number => {
        const at = h.offset + w * i;
        if (v.dtype === 'i32') return buf.readInt32LE(at);
        if (v.dtype === 'f16') return halfToFloat(buf.readUInt16LE(at));
        if (v.dtype === 'bf16') { bf16.setUint32(0, buf.readUInt16LE(at) << 16); return bf16.getFloat32(0); }
        return buf.readFloatLE(at);
      };
      for (let i = 0; i < f.length; i++) f[i] = read(i);
      m.set(id, f);
    }
    return m;
  });
}
