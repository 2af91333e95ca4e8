/**
 * The CUDA flash attention (compiler/codegen-cuda/attention_cuda.ts, attention_f32.ts) without a GPU:
 * which nodes take the 16-bit tensor-core kernels (all-bf16 / all-fp16 operands, head widths
 * FLASH_HEAD_DIMS), which the fp32 ones (F32_HEAD_DIMS) and which keep the shared kernel,
 * the launch geometry and scratch of its kernels, the build report, and the generated kernels of
 * every 16-bit attention case of cuda_check (test/cuda_cases.ts cudaAttentionCases) compiled by
 * `nvcc -arch=sm_90a -Werror` with ptxas's resource report: no spills, no stack, static shared
 * memory within 48 KiB. The numbers themselves are checked on the GPU by bench/cuda_check.sh.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCuda } from '../compiler/codegen-cuda/index.js';
import { attentionReport, FLASH_HEAD_DIMS, flashForwardRows, flashRefusal } from '../compiler/codegen-cuda/attention_cuda.js';
import { ATTENTION_FAMILY, attnGeom, F32_HEAD_DIMS, f32Refusal, isForward } from '../compiler/codegen-cuda/attention_f32.js';
import type { KernelSpec } from '../compiler/kernels/kernel_types.js';
import { findNvcc } from '../runtime/cuda/session.js';
import { cudaAttentionCases } from './cuda_cases.js';

const cases = cudaAttentionCases();
const art = buildCuda(cases.map((c) => c.program), 'flash_cases');
const NV = findNvcc();

/** the kernels of case i's attention node */
function attnKernels(i: number): KernelSpec[] {
  return art.lowered[i].kernels.filter((k) => ATTENTION_FAMILY.includes(k.op));
}

function attnNode(i: number) {
  const g = cases[i].program.graph;
  return { g, n: g.nodes.find((n) => ATTENTION_FAMILY.includes(n.op))! };
}

/** the flash path a case's node takes by its operands: 16-bit tensor cores, fp32, or none (the shared kernel) */
function expectedPath(i: number): 'tc' | 'f32' | 'shared' {
  const { g, n } = attnNode(i);
  const q = g.values[n.inputs[isForward(n) ? 0 : 1]], D = attnGeom(g, n).D;
  if (q.dtype !== 'f32') return FLASH_HEAD_DIMS.includes(D) ? 'tc' : F32_HEAD_DIMS.includes(D) ? 'f32' : 'shared';
  return F32_HEAD_DIMS.includes(D) ? 'f32' : 'shared';
}

describe('which attention nodes the flash kernels take', () => {
  it('16-bit operands with a head width in FLASH_HEAD_DIMS: the tensor-core kernels; fp32: the fp32 ones; other widths: the shared kernel', () => {
    const seen = { tc: 0, f32: 0, shared: 0 };
    cases.forEach((c, i) => {
      const { g, n } = attnNode(i);
      const ks = attnKernels(i);
      const path = expectedPath(i);
      seen[path]++;
      if (path === 'shared') {
        expect(flashRefusal(g, n)).toMatch(/head width/);
        expect(f32Refusal(g, n)).toMatch(/head width/);
        expect(ks.some((k) => /flash attention/.test(k.label))).toBe(false);
        return;
      }
      expect(flashRefusal(g, n) === null).toBe(path === 'tc');
      // forward: one kernel; backward: Delta, dK/dV, dQ
      expect(ks.length).toBe(isForward(n) ? 1 : 3);
      const main = isForward(n) ? ks : ks.slice(1);
      for (const k of main) expect(k.label).toMatch(path === 'tc' ? /flash attention, (bf16|f16) tensor cores/ : /flash attention, fp32 on the CUDA cores/);
      if (!isForward(n)) expect(ks[0].label).toMatch(/Delta = rowsum/);
    });
    expect(seen.tc).toBeGreaterThanOrEqual(20);
    expect(seen.f32).toBeGreaterThanOrEqual(12);
    expect(seen.shared).toBe(2);
  });

  it('the build report names each path and why a node does not take the tensor-core one', () => {
    const lines = attentionReport(cases.map((c) => c.program.graph));
    expect(lines.some((l) => /on flash attention \((bf16|f16) tensor cores/.test(l))).toBe(true);
    expect(lines.some((l) => /on flash attention \(fp32 on the CUDA cores, attention_f32.ts: operands f32, f32, f32/.test(l))).toBe(true);
    expect(lines.some((l) => /shared 16x16-tile kernel: head width 8/.test(l))).toBe(true);
  });
});

describe('flash kernel geometry', () => {
  it('64 (16-bit; the 16-bit forward 128) or 32 (fp32) rows per block over (tiles, heads); the backward kernels share a Delta scratch of H*T floats', () => {
    cases.forEach((c, i) => {
      const { n } = attnNode(i);
      const path = expectedPath(i);
      if (path === 'shared') return;
      const rows = path === 'tc' ? 64 : 32;
      const g = c.program.graph;
      const { H: NH, T, S } = attnGeom(g, n), N = 1, H = NH;  // N * H heads
      const ks = attnKernels(i);
      if (isForward(n)) {
        expect(ks[0].groups).toEqual([Math.ceil(T / (path === 'tc' ? flashForwardRows() : rows)), N * H, 1]);
        expect(ks[0].tgsize).toEqual([128, 1, 1]);
        return;
      }
      const [delta, kv, dq] = ks;
      expect(delta.groups[0] * delta.tgsize[0]).toBeGreaterThanOrEqual(8 * N * H * T);  // 8 lanes per row
      expect(kv.groups).toEqual([Math.ceil(S / rows), N * H, 1]);
      expect(dq.groups).toEqual([Math.ceil(T / rows), N * H, 1]);
      for (const x of ks) expect(x.scratch).toBe(N * H * T * 4);
      // Delta is written before the two kernels that read it, and never by them
      expect(delta.body).toMatch(/mpsc_scratch\[row\] = acc/);
      for (const x of [kv, dq]) expect(x.body).not.toMatch(/mpsc_scratch\[[^\]]*\] =/);
    });
  });

  it('causal kernels skip the key tiles above the diagonal and mask only the tiles that cross it', () => {
    const body = (name: string) => attnKernels(cases.findIndex((c) => String(c.program.name) === name))[0].body;
    // S - T = 80: query tile q0 (of 128 rows; 64 with MPSC_CUDA_FLASH_FWD_ROWS=64) sees keys up to q0 + 127 + 80;
    // each warp's m16 tile (qw0, qw1: 32 rows a warp) masks the key tiles crossing its own diagonal
    const fr = flashForwardRows();
    expect(body('flash_1x2_t70_s150_d16_causal_f16_fwd')).toMatch(new RegExp(`kend = min\\(S, q0 \\+ ${fr + 80}\\);`));
    for (const qw of fr === 128 ? ['qw0', 'qw1'] : ['qw'])
      expect(body('flash_1x2_t70_s150_d16_causal_f16_fwd')).toMatch(new RegExp(`const bool edge = k0 \\+ 64 > S \\|\\| k0 \\+ 63 > ${qw} \\+ 80;`));
    expect(body('flash_1x2_t70_s150_d32_bf16_fwd')).toMatch(/kend = S;/);
    expect(body('flash_1x2_t70_s150_d32_bf16_fwd')).toMatch(/const bool edge = k0 \+ 64 > S;/);
    // fp32, 32-row tiles, S - T = 55
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd')).toMatch(/const int kend = min\(S, q0 \+ 87\);/);
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd')).toMatch(/const bool edge = k0 \+ 32 > S \|\| k0 \+ 31 > q0 \+ 55;/);
  });
});

describe.skipIf(!NV)('the flash kernels compiled by nvcc', () => {
  it('compile with -arch=sm_90a -Werror; ptxas: no spills, no stack, shared memory within 48 KiB', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-flash-'));
    const file = path.join(dir, 'k.cu');
    fs.writeFileSync(file, art.files['model_kernels.cuh']);
    const r = spawnSync(NV!.nvcc, ['-arch=sm_90a', '-fmad=true', '-c', file, '-o', path.join(dir, 'k.o'), '-Werror', 'all-warnings', '-Xptxas', '-v'], { encoding: 'utf8' });
    fs.rmSync(dir, { recursive: true, force: true });
    expect(r.status, r.stderr).toBe(0);
    // ptxas: "Compiling entry function 'NAME' for 'sm_90a'", then "N bytes stack frame, N bytes spill stores, N bytes spill loads", then "Used N registers, ... N bytes smem"
    const info = new Map<string, string>();
    let cur = '';
    for (const line of r.stderr.split('\n')) {
      const m = /Compiling entry function '([^']+)'/.exec(line);
      if (m) cur = m[1];
      else if (cur) info.set(cur, (info.get(cur) ?? '') + line + '\n');
    }
    const flash = art.lowered.flatMap((l) => l.kernels).filter((k) => /flash attention/.test(k.label) && !art.alias.has(k.name));
    expect(flash.length).toBeGreaterThanOrEqual(52);
    for (const k of flash) {
      const text = info.get(k.name) ?? '';
      expect(text, k.name).toMatch(/0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/);
      const regs = Number(/Used (\d+) registers/.exec(text)?.[1]);
      expect(regs, k.name).toBeLessThanOrEqual(255);
      const smem = Number(/(\d+) bytes smem/.exec(text)?.[1] ?? 0);
      expect(smem, k.name).toBeLessThanOrEqual(48 * 1024);
    }
  });
});
