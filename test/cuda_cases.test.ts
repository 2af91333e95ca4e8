/**
 * The path of bench/cuda_check.sh's kernel part from the build to the verdicts, without a GPU:
 * the cases (cuda_cases.ts cudaKernelCases: the Metal op cases, the CUDA long cases, the merged
 * launch case), the CUDA build of all of them (buildCuda: fusion, views, merged launches), the
 * view of that build the case runner reads (cudaCaseBuild), runCases parsing the driver's result
 * file, and judgeCases. The driver here is a stand-in: a script copying a result file written in
 * emu_test_main.cc's format by a "perfect device" that stores each checked value's float64
 * reference where the CUDA plan's kernels write it (the last kernel argument writing that value).
 * So every case must come back equal to its reference: that proves the runner reads each checked
 * value where the generated CUDA graph leaves it, for every case. Then the failures: a run that
 * reports an error, programs out of step with the cases, a result file cut short, must each fail
 * the cases concerned by name and leave the others judged (the device sweep at cudafast@69e0a14
 * aborted all 267 cases on one undefined read instead).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCuda, type CudaArtifacts, type CudaGemm } from '../compiler/codegen-cuda/index.js';
import { planKernels } from '../compiler/codegen-cuda/plan.js';
import { numel } from '../compiler/ir/graph.js';
import { cudaCaseBuild, cudaKernelCases, judgeCases } from './cuda_cases.js';
import { reference, runCases, type OpCase } from './metal_harness.js';

const SCALARS = { lr: 0.05, t: 3, seed: 987654321, counter: 5 };
const cases = cudaKernelCases();
const refs = cases.map((c) => reference(c, SCALARS));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-cases-test-'));
/** the stand-in driver: copies $FAKE_RESULT to the result path (emu_test_main.cc's second argument) */
const exe = path.join(dir, 'driver.sh');
fs.writeFileSync(exe, '#!/bin/sh\nexec cp "$FAKE_RESULT" "$2"\n', { mode: 0o755 });

/** where the CUDA plan's kernels leave each checked value: the last argument writing it, per case */
function homes(a: CudaArtifacts, c: OpCase, ci: number): Map<number, number> {
  const p = a.plan.programs[ci];
  const m = new Map<number, number>();
  for (const id of c.check) {
    const v = c.program.graph.values[id];
    const w = planKernels(p).flatMap((n) => n.args).filter((x) => x.value === v.name && x.access !== 'r').at(-1);
    if (!w) throw new Error(`case ${c.program.name}: no kernel of the CUDA plan writes ${v.name}`);
    expect(w.bytes, `${c.program.name} ${v.name}`).toBe(4 * numel(v.shape));
    m.set(id, w.offset);
  }
  return m;
}

/** the result file of a device that computes every case exactly (float32-rounded reference); `error` runs report a failure */
function perfectResult(a: CudaArtifacts, error = new Map<number, string>()): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); parts.push(b); };
  const u64 = (n: number) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(n)); parts.push(b); };
  const persistent = Buffer.alloc(a.plan.persistent.bytes);
  cases.forEach((c, ci) => {
    const msg = error.get(ci);
    if (msg) { u32(1); u32(Buffer.byteLength(msg)); parts.push(Buffer.from(msg)); return; }
    const arena = Buffer.alloc(a.plan.programs[ci].arenaBytes);
    for (const [id, off] of homes(a, c, ci)) {
      const inArena = off >= a.plan.arena.offset && off < a.plan.arena.offset + a.plan.arena.bytes;
      const buf = inArena ? arena : persistent, base = off - (inArena ? a.plan.arena.offset : a.plan.persistent.offset);
      const i32 = c.program.graph.values[id].dtype === 'i32';
      refs[ci].get(id)!.forEach((x, k) => (i32 ? buf.writeInt32LE(x, base + 4 * k) : buf.writeFloatLE(x, base + 4 * k)));
    }
    u32(0); u32(0); u64(arena.length); parts.push(arena);
  });
  u64(persistent.length); parts.push(persistent);
  return Buffer.concat(parts as unknown as Uint8Array[]);
}

function run(a: CudaArtifacts, result: Buffer, programs = cudaCaseBuild(a, exe).art.programs) {
  const file = path.join(dir, 'result');
  fs.writeFileSync(file, result as unknown as Uint8Array);
  const got = runCases({ exe, art: { table: a.table, programs } }, cases, SCALARS, { FAKE_RESULT: file });
  // the module's references (judgeCases would recompute all of them at every call)
  return { got, verdicts: judgeCases(cases, got, SCALARS, () => 1e-6, refs) };
}

describe.each(['cuda', 'shared'] as CudaGemm[])('cuda_check kernel cases, %s GEMMs, through a stand-in driver', (gemm) => {
  const a = buildCuda(cases.map((c) => c.program), `cuda_kernel_cases_${gemm}`, { gemm });

  it('every case comes back equal to its reference from where the CUDA plan writes it', () => {
    expect(cases.length).toBeGreaterThan(260);
    expect(cases.map((c) => c.program.name)).toContain('independent_updates');
    expect(cases.map((c) => c.program.name)).toContain('long_layernorm_grad');
    const { got, verdicts } = run(a, perfectResult(a));
    expect(got.filter((r) => typeof r === 'string')).toEqual([]);
    expect(verdicts.filter((v) => !v.ok).flatMap((v) => v.problems)).toEqual([]);
    expect(Math.max(...verdicts.map((v) => v.worst))).toBeLessThan(1e-6);
  });

  it('a failed run, programs out of step with the cases, or a short result file fail the cases concerned by name', () => {
    const bad = cases.findIndex((c) => String(c.program.name) === 'long_embedding_grad');
    const failed = run(a, perfectResult(a, new Map([[bad, 'CUDA error: an illegal memory access']]))).verdicts;
    expect(failed.filter((v) => !v.ok).map((v) => v.name)).toEqual(['long_embedding_grad']);
    expect(failed[bad].problems).toEqual(['long_embedding_grad: CUDA error: an illegal memory access']);

    // the build's programs one short (the undefined read of the device run): the last case fails, naming its index
    const programs = cudaCaseBuild(a, exe).art.programs;
    const short = run(a, perfectResult(a), programs.slice(0, -1)).verdicts;
    expect(short.filter((v) => !v.ok).map((v) => v.name)).toEqual(['independent_updates']);
    expect(short.at(-1)!.problems[0]).toMatch(/^independent_updates: the build has no program \d+/);

    // each case paired with another case's program: its values are not there
    const swapped = run(a, perfectResult(a), [programs[1], programs[0], ...programs.slice(2)]).verdicts;
    expect(swapped.slice(0, 2).map((v) => v.ok)).toEqual([false, false]);
    expect(swapped[0].problems[0]).toMatch(/value \S+ is not in program/);
    expect(swapped.slice(2).every((v) => v.ok)).toBe(true);

    // a result file without the persistent block: the cases whose checked values are persistent fail
    const full = perfectResult(a);
    const cut = Buffer.concat([full.subarray(0, full.length - a.plan.persistent.bytes - 8), Buffer.alloc(8)] as unknown as Uint8Array[]);
    const noPersistent = run(a, cut).verdicts;
    const persistentCases = cases.filter((c) => c.check.some((id) => c.program.graph.values[id].kind !== 'activation')).map((c) => c.program.name);
    expect(persistentCases.length).toBeGreaterThan(5);
    expect(noPersistent.filter((v) => !v.ok).map((v) => v.name)).toEqual(persistentCases);
    expect(noPersistent.find((v) => !v.ok)!.problems[0]).toMatch(/persistent bytes \d+\.\.\d+ beyond the 0 the driver returned/);
  });
});
