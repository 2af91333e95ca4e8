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

describe('bench/wgmma_probe.cu and bench/flash_wgmma_probe.cu', () => {
  it('compiles for sm_90a: its products are wgmma in the PTX, ptxas neither spills nor serializes them', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-wgmma-'));
    try {
      const src = path.join(ROOT, 'bench/wgmma_probe.cu');
      const ptx = path.join(dir, 'p.ptx');
      execFileSync(NVCC, [...NVCC_SM90A, '-std=c++17', '-O2', '-ptx', src, '-o', ptx], { stdio: ['ignore', 'pipe', 'pipe'] });
      const text = fs.readFileSync(ptx, 'utf8');
      // 4 S products from shared memory and 4 O products with register A fragments per repetition (unrolled; nvcc may
      // peel the repetition loop into several copies)
      expect((text.match(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd/g) ?? []).length).toBeGreaterThanOrEqual(4);
      expect((text.match(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, \{/g) ?? []).length).toBeGreaterThanOrEqual(4);
      // ptxas -v reports on stderr; a warning there (e.g. wgmma serialized for want of registers) would show
      const r = spawnSync(NVCC, [...NVCC_SM90A, '-std=c++17', '-O2', '-Xptxas', '-v', '-c', src, '-o', path.join(dir, 'p.o')], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/0 bytes spill stores, 0 bytes spill loads/);
      expect(r.stderr).not.toMatch(/warning|serialized/i);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('the flash forward probe compiles for sm_90a: 8 wgmma per key tile, no spills, no ptxas warning', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-wgmma-'));
    try {
      const src = path.join(ROOT, 'bench/flash_wgmma_probe.cu');
      const ptx = path.join(dir, 'f.ptx');
      execFileSync(NVCC, [...NVCC_SM90A, '-std=c++17', '-O2', '-ptx', src, '-o', ptx], { stdio: ['ignore', 'pipe', 'pipe'] });
      const text = fs.readFileSync(ptx, 'utf8');
      expect((text.match(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd/g) ?? []).length).toBe(4);
      expect((text.match(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, \{/g) ?? []).length).toBe(4);
      const r = spawnSync(NVCC, [...NVCC_SM90A, '-std=c++17', '-O2', '-Xptxas', '-v', '-c', src, '-o', path.join(dir, 'f.o')], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/0 bytes spill stores, 0 bytes spill loads/);
      expect(r.stderr).not.toMatch(/warning|serialized/i);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
