/**
 * bench/wgmma_probe.cu (the Hopper wgmma products a FlashAttention-3-style forward needs) and bench/flash_wgmma_probe.cu
 * (a causal flash forward on them at GPT-2 small's shape), each checked against the CPU on the GPU machine by
 * bench/wgmma_probe.sh (bench/NOTES.md phase 25), compile here for sm_90a with nvcc, so the probes do not rot between
 * the device calls that run them. Running them needs the GPU: CI has nvcc but no GPU.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { NVCC_SM90A } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const NVCC = ['/usr/local/bin/nvcc', '/usr/local/cuda/bin/nvcc'].find((p) => fs.existsSync(p)) ?? 'nvcc';

/**
 * bench/<name>.cu compiled for sm_90a: its PTX's wgmma products from two shared-memory descriptors (SS) and with
 * register A fragments (RS), counted; ptxas's report for the object (-Xptxas -v, on stderr)
 */
function compileProbe(name: string): { ss: number; rs: number; ptxas: ReturnType<typeof spawnSync> & { stderr: string } } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-wgmma-'));
  try {
    const src = path.join(ROOT, `bench/${name}.cu`), ptx = path.join(dir, 'p.ptx');
    execFileSync(NVCC, [...NVCC_SM90A, '-std=c++17', '-O2', '-ptx', src, '-o', ptx], { stdio: ['ignore', 'pipe', 'pipe'] });
    const text = fs.readFileSync(ptx, 'utf8');
    const count = (re: RegExp) => (text.match(re) ?? []).length;
    const ptxas = spawnSync(NVCC, [...NVCC_SM90A, '-std=c++17', '-O2', '-Xptxas', '-v', '-c', src, '-o', path.join(dir, 'p.o')], { encoding: 'utf8' });
    return {
      ss: count(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd/g),
      rs: count(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, \{/g),
      ptxas,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** ptxas -v reports on stderr; a warning there (e.g. wgmma serialized for want of registers) would show */
function expectClean(r: ReturnType<typeof compileProbe>['ptxas']): void {
  expect(r.status, r.stderr).toBe(0);
  expect(r.stderr).toMatch(/0 bytes spill stores, 0 bytes spill loads/);
  expect(r.stderr).not.toMatch(/warning|serialized/i);
}

describe('bench/wgmma_probe.cu and bench/flash_wgmma_probe.cu', () => {
  it('compiles for sm_90a: its products are wgmma in the PTX, ptxas neither spills nor serializes them', () => {
    const p = compileProbe('wgmma_probe');
    // 4 S products from shared memory and 4 O products with register A fragments per repetition (unrolled; nvcc may
    // peel the repetition loop into several copies)
    expect(p.ss).toBeGreaterThanOrEqual(4);
    expect(p.rs).toBeGreaterThanOrEqual(4);
    expectClean(p.ptxas);
  }, 120_000);

  it('the flash forward probe compiles for sm_90a: 8 wgmma per key tile, no spills, no ptxas warning', () => {
    const p = compileProbe('flash_wgmma_probe');
    expect(p.ss).toBe(4);
    expect(p.rs).toBe(4);
    expectClean(p.ptxas);
  }, 120_000);
});
