/**
 * The CUDA flash attention (compiler/codegen-cuda/attention_cuda.ts, attention_tf32x3.ts, attention_f32.ts)
 * without a GPU: which nodes take the 16-bit tensor-core kernels (all-bf16 / all-fp16 operands, head widths
 * FLASH_HEAD_DIMS), which the fp32 3xTF32 tensor-core ones (TF32X3_HEAD_DIMS), which the fp32 CUDA-core
 * ones (F32_HEAD_DIMS; all fp32 nodes with MPSC_CUDA_ATTN_TF32X3=0) and which keep the shared kernel,
 * the launch geometry and scratch of its kernels, the build report, and the generated kernels of
 * every attention case of cuda_check (both fp32 paths) (test/cuda_cases.ts cudaAttentionCases) compiled by
 * `nvcc` for sm_90a (test/nvcc_target.ts) with `-Werror` with ptxas's resource report: no spills, no stack, static shared
 * memory within 48 KiB. The numbers themselves are checked on the GPU by bench/cuda_check.sh.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCuda } from '../compiler/codegen-cuda/index.js';
import { withEnv } from './env_helpers.js';
import { attentionReport, FLASH_HEAD_DIMS, flashForwardRows, flashRefusal, lowerAttentionCuda } from '../compiler/codegen-cuda/attention_cuda.js';
import { ATTENTION_FAMILY, attnGeom, F32_HEAD_DIMS, f32Refusal, isForward } from '../compiler/codegen-cuda/attention_f32.js';
import { TF32X3_HEAD_DIMS, tf32x3Refusal, x3Async, x3KSplit } from '../compiler/codegen-cuda/attention_tf32x3.js';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import type { KernelSpec } from '../compiler/kernels/kernel_types.js';
import { cudaInputsKey, findNvcc } from '../runtime/cuda/session.js';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { cudaAttentionCases } from './cuda_cases.js';
import { NVCC_SM90A } from './nvcc_target.js';

const cases = cudaAttentionCases();
/** the cases built with MPSC_CUDA_ATTN_TF32X3 set to `x3` (the fp32 nodes' path is chosen at generation time) */
function withX3<T>(x3: string, f: () => T): T {
  const before = process.env.MPSC_CUDA_ATTN_TF32X3;
  process.env.MPSC_CUDA_ATTN_TF32X3 = x3;
  try {
    return f();
  } finally {
    if (before === undefined) delete process.env.MPSC_CUDA_ATTN_TF32X3;
    else process.env.MPSC_CUDA_ATTN_TF32X3 = before;
  }
}
const art = withX3('1', () => buildCuda(cases.map((c) => c.program), 'flash_cases'));
const artOff = withX3('0', () => buildCuda(cases.map((c) => c.program), 'flash_cases'));
/** with MPSC_CUDA_FLASH_DELTA_FOLD=0 (on by default: Delta inside the 3xTF32 backward where S <= 64): the separate Delta kernel there too */
const artNoFold = withEnv('MPSC_CUDA_FLASH_DELTA_FOLD', '0', () => withX3('1', () => buildCuda(cases.map((c) => c.program), 'flash_cases')));
/** the 16-bit backward with dQ from the stored dS^T tiles (MPSC_CUDA_FLASH_DQ=stored): the cases it changes, 16-bit gradients */
const storedCases = cases.filter((c) => /_grad$/.test(String(c.program.name)) && c.program.graph.nodes.some((n) => ATTENTION_FAMILY.includes(n.op) && flashRefusal(c.program.graph, n) === null));
const artStored = withEnv('MPSC_CUDA_FLASH_DQ', 'stored', () => withX3('1', () => buildCuda(storedCases.map((c) => c.program), 'flash_cases_stored')));
/** the 16-bit cases with MPSC_CUDA_FLASH_WGMMA=fwd,kv,q MPSC_CUDA_FLASH_WGMMA_PIPE=0: head width 64 on Hopper's warpgroup products (forward, dK/dV, dQ; v34's backward bodies), the others unchanged */
const cases16 = cases.filter((c) => c.program.graph.nodes.some((n) => ATTENTION_FAMILY.includes(n.op) && flashRefusal(c.program.graph, n) === null));
const artWgmma = withEnv('MPSC_CUDA_FLASH_WGMMA_PIPE', '0', () => withEnv('MPSC_CUDA_FLASH_WGMMA', 'fwd,kv,q', () => withX3('1', () => buildCuda(cases16.map((c) => c.program), 'flash_cases_wgmma'))));
/** the same with the wgmma backward's products overlapped (MPSC_CUDA_FLASH_WGMMA_PIPE=1, the default) */
const artWgPipe = withEnv('MPSC_CUDA_FLASH_WGMMA_PIPE', '1', () => withEnv('MPSC_CUDA_FLASH_WGMMA', 'fwd,kv,q', () => withX3('1', () => buildCuda(cases16.map((c) => c.program), 'flash_cases_wgmma'))));
/** the wgmma variants off by default: the forward's softmax overlapped (MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1), the Delta kernel (MPSC_CUDA_FLASH_WGMMA_DELTA=kernel) */
const artWgAlt = withEnv('MPSC_CUDA_FLASH_WGMMA_FWD_PIPE', '1', () => withEnv('MPSC_CUDA_FLASH_WGMMA_DELTA', 'kernel', () => withEnv('MPSC_CUDA_FLASH_WGMMA', 'fwd,kv,q', () => withX3('1', () => buildCuda(cases16.map((c) => c.program), 'flash_cases_wgmma')))));
/** the wgmma forward and dQ kernels with 128 queries per block in two warpgroups (MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128, MPSC_CUDA_FLASH_WGMMA_Q_ROWS=128, off by default) */
const artWgFwd2 = withEnv('MPSC_CUDA_FLASH_WGMMA_Q_ROWS', '128', () => withEnv('MPSC_CUDA_FLASH_WGMMA_FWD_ROWS', '128', () => withEnv('MPSC_CUDA_FLASH_WGMMA', 'fwd,kv,q', () => withX3('1', () => buildCuda(cases16.map((c) => c.program), 'flash_cases_wgmma')))));
const NV = findNvcc();

/** the kernels of case i's attention node (built with the 3xTF32 kernels on, or off; `noFold`: without the Delta fold) */
function attnKernels(i: number, x3 = true, noFold = false): KernelSpec[] {
  return (noFold ? artNoFold : x3 ? art : artOff).lowered[i].kernels.filter((k) => ATTENTION_FAMILY.includes(k.op) && !FINISH.test(k.label));
}
/** fuse.ts rule 15's finish (the qkv_sum cases: a node with `sum_out`), after the flash kernels */
const FINISH = /: sum of \d+ blocks/;
const isSumCase = (i: number) => /^flash_qkv_sum_/.test(String(cases[i].program.name));

function attnNode(i: number) {
  const g = cases[i].program.graph;
  return { g, n: g.nodes.find((n) => ATTENTION_FAMILY.includes(n.op))! };
}

type Path = 'tc' | 'x3' | 'f32' | 'shared';
/** the flash path a case's node takes by its operands: 16-bit tensor cores, fp32 as 3xTF32 (x3 on) or on the CUDA cores, or none (the shared kernel) */
function expectedPath(i: number, x3 = true): Path {
  const { g, n } = attnNode(i);
  const q = g.values[n.inputs[isForward(n) ? 0 : 1]], D = attnGeom(g, n).D;
  if (q.dtype !== 'f32') return FLASH_HEAD_DIMS.includes(D) ? 'tc' : F32_HEAD_DIMS.includes(D) ? 'f32' : 'shared';
  return x3 && TF32X3_HEAD_DIMS.includes(D) ? 'x3' : F32_HEAD_DIMS.includes(D) ? 'f32' : 'shared';
}

const LABEL: Record<Exclude<Path, 'shared'>, RegExp> = {
  tc: /flash attention, (bf16|f16) tensor cores/, x3: /flash attention, fp32 as 3xTF32 on the tensor cores/, f32: /flash attention, fp32 on the CUDA cores/,
};

describe('which attention nodes the flash kernels take', () => {
  for (const [x3, noFold] of [[true, false], [false, false], [true, true]]) {
    it(`16-bit operands with a head width in FLASH_HEAD_DIMS: the tensor-core kernels; fp32: the ${x3 ? '3xTF32' : 'CUDA-core (MPSC_CUDA_ATTN_TF32X3=0)'} ones; other widths: the shared kernel${noFold ? ' (MPSC_CUDA_FLASH_DELTA_FOLD=0)' : ''}`, () => {
      const seen = { tc: 0, x3: 0, f32: 0, shared: 0 };
      cases.forEach((c, i) => {
        const { g, n } = attnNode(i);
        const ks = attnKernels(i, x3, noFold);
        const path = expectedPath(i, x3);
        seen[path]++;
        if (path === 'shared') {
          expect(flashRefusal(g, n)).toMatch(/head width/);
          expect(f32Refusal(g, n)).toMatch(/head width/);
          expect(ks.some((k) => /flash attention/.test(k.label))).toBe(false);
          return;
        }
        expect(flashRefusal(g, n) === null).toBe(path === 'tc');
        // forward: one kernel; backward: Delta, dK/dV, dQ (3xTF32 on the packed layout, D <= 32 or causal: Delta, then dK/dV
        // and dQ in one launch; 3xTF32 with one key tile per head, S <= 64: no Delta kernel, the bodies compute it,
        // unless MPSC_CUDA_FLASH_DELTA_FOLD=0)
        const merged = ks.some((k) => /dK, dV and dQ in one launch/.test(k.label));
        expect(merged).toBe(path === 'x3' && n.op === 'attention_qkv_grad' && (attnGeom(g, n).D <= 32 || attnGeom(g, n).causal));
        const folded = !noFold && path === 'x3' && !isForward(n) && attnGeom(g, n).S <= 64;
        expect(ks.length).toBe(isForward(n) ? 1 : (merged ? 1 : 2) + (folded ? 0 : 1));
        const main = isForward(n) || folded ? ks : ks.slice(1);
        for (const k of main) expect(k.label).toMatch(LABEL[path]);
        if (!isForward(n) && !folded) expect(ks[0].label).toMatch(/Delta = rowsum/);
        if (folded) for (const k of ks) expect(k.body).toMatch(/Delta = rowsum\(dO \* O\) of \d+ query rows/);
      });
      expect(seen.tc).toBeGreaterThanOrEqual(20);
      expect(x3 ? seen.x3 : seen.f32).toBeGreaterThanOrEqual(12);
      expect(x3 ? seen.f32 : seen.x3).toBe(0);
      expect(seen.shared).toBe(3);
    });
  }

  it('the build report names each path and why a node does not take the tensor-core one', () => {
    const graphs = cases.map((c) => c.program.graph);
    const lines = withX3('1', () => attentionReport(graphs));
    expect(lines.some((l) => /on flash attention \((bf16|f16) tensor cores/.test(l))).toBe(true);
    expect(lines.some((l) => /on flash attention \(fp32 as 3xTF32 on the tensor cores, attention_tf32x3.ts\)/.test(l))).toBe(true);
    expect(lines.some((l) => /shared 16x16-tile kernel: head width 8/.test(l))).toBe(true);
    expect(lines.some((l) => /wgmma/.test(l))).toBe(false);
    // on Hopper with MPSC_CUDA_FLASH_WGMMA=auto: the 16-bit head-width-64 nodes are said to be on wgmma
    const hopper = withEnv('MPSC_CUDA_FLASH_WGMMA', 'auto', () => withX3('1', () => attentionReport(graphs, true)));
    expect(hopper.some((l) => /on flash attention \((bf16|f16) tensor cores, wgmma \(sm_90a\), attention_cuda.ts\)/.test(l))).toBe(true);
    expect(hopper.some((l) => /on flash attention \((bf16|f16) tensor cores, attention_cuda.ts\)/.test(l))).toBe(true);
    const off = withX3('0', () => attentionReport(graphs));
    expect(off.some((l) => /on flash attention \(fp32 on the CUDA cores, attention_f32.ts: switched off \(MPSC_CUDA_ATTN_TF32X3=0\)\)/.test(l))).toBe(true);
    // a 16-bit node is refused by the 3xTF32 kernels for its operands
    const i = cases.findIndex((c) => expectedPath(cases.indexOf(c)) === 'tc');
    expect(withX3('1', () => tf32x3Refusal(attnNode(i).g, attnNode(i).n))).toMatch(/operands (bf16|f16)/);
  });
});

describe('MPSC_CUDA_ATTN_TF32X3', () => {
  it('is part of the CUDA build cache key (the fp32 attention kernels differ), and a value other than 0 / 1 is refused', () => {
    const model = checkFile(path.resolve(path.dirname(new URL(import.meta.url).pathname), '../specs/char_gpt.model'));
    const ps = buildPrograms(model, { batch: model.train.batch });
    const on = withX3('1', () => cudaInputsKey(ps)), off = withX3('0', () => cudaInputsKey(ps));
    expect(on).not.toBe(off);
    const before = process.env.MPSC_CUDA_ATTN_TF32X3;
    delete process.env.MPSC_CUDA_ATTN_TF32X3;
    try {
      expect(cudaInputsKey(ps)).toBe(on);  // default: on
    } finally {
      if (before !== undefined) process.env.MPSC_CUDA_ATTN_TF32X3 = before;
    }
    expect(() => withX3('yes', () => cudaInputsKey(ps))).toThrow(/MPSC_CUDA_ATTN_TF32X3 must be one of '0', '1', got 'yes'/);
  });
});

describe('MPSC_CUDA_ATTN_X3_ASYNC, MPSC_CUDA_ATTN_X3_KSPLIT (the 3xTF32 kernels\' A/B switches)', () => {
  /** f with the environment variables `env` set (undefined: unset) */
  function withEnv<T>(env: Record<string, string | undefined>, f: () => T): T {
    const before = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    const put = (e: Record<string, string | undefined>) => {
      for (const [k, v] of Object.entries(e)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    };
    put(env);
    try {
      return f();
    } finally {
      put(before);
    }
  }
  it('are part of the CUDA build cache key; bad values are refused', () => {
    const model = checkFile(path.resolve(path.dirname(new URL(import.meta.url).pathname), '../specs/char_gpt.model'));
    const ps = buildPrograms(model, { batch: model.train.batch });
    const unset = { MPSC_CUDA_ATTN_X3_ASYNC: undefined, MPSC_CUDA_ATTN_X3_KSPLIT: undefined };
    const keys = [unset, { ...unset, MPSC_CUDA_ATTN_X3_ASYNC: 'none' }, { ...unset, MPSC_CUDA_ATTN_X3_ASYNC: 'kv' }, { ...unset, MPSC_CUDA_ATTN_X3_KSPLIT: '0' }]
      .map((e) => withEnv(e, () => cudaInputsKey(ps)));
    expect(new Set(keys).size).toBe(4);
    expect(() => withEnv({ MPSC_CUDA_ATTN_X3_ASYNC: 'fwd,dq' }, () => x3Async('fwd'))).toThrow(/MPSC_CUDA_ATTN_X3_ASYNC=fwd,dq: expected a comma list of 'fwd', 'kv', 'q' \(each once\), or 'none'; 'dq' is not one of them/);
    expect(() => withEnv({ MPSC_CUDA_ATTN_X3_KSPLIT: '2' }, () => x3KSplit())).toThrow(/MPSC_CUDA_ATTN_X3_KSPLIT must be one of '0', '1', got '2'/);
  });
  it('the two-warpgroup wgmma forward (MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128) with the overlapped one-warpgroup forward (MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1): a UserError naming both', () => {
    const c = cases.find((x) => String(x.program.name) === 'flash_2x3_t130_s130_d64_causal_bf16_fwd')!;
    const g = c.program.graph, n = g.nodes.find((x) => ATTENTION_FAMILY.includes(x.op))!;
    const lower = () => { let k = 0; return lowerAttentionCuda({ next: () => `k${k++}`, helpers: new Set(), d: CUDA }, g, n, true); };
    const env = { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_FWD_ROWS: '128' };
    expect(withEnv(env, lower)![0].tgsize[0]).toBe(256);
    const err = (() => { try { withEnv({ ...env, MPSC_CUDA_FLASH_WGMMA_FWD_PIPE: '1' }, lower); } catch (e) { return e as Error; } return null; })();
    expect(err?.name).toBe('UserError');
    expect(err?.message).toMatch(/MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128 and MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1 do not combine/);
  });
  it('double-buffered kernels stream by cp.async, past 48 KiB of tiles in dynamic shared memory; the synchronous ones by loads between barriers', () => {
    const i = cases.findIndex((c) => String(c.program.name) === 'flash_f32_2x3_t70_s70_d64_causal_grad');
    const j = cases.findIndex((c) => String(c.program.name) === 'flash_f32_2x1_t64_s64_d48_grad');
    expect(i).toBeGreaterThanOrEqual(0);
    expect(j).toBeGreaterThanOrEqual(0);
    const lowered = (k: number, env: Record<string, string | undefined>) => withEnv(env, () => {
      const { g, n } = attnNode(k);
      let c = 0;
      return lowerAttentionCuda({ next: () => `k${c++}`, helpers: new Set(), d: CUDA }, g, n)!;
    });
    // D = 64: two 64-row tiles of pitch 68 and two buffers of two 16-row ones (+ lse, Delta: 2 x 2 x 16) = 52480 bytes (dK/dV), 52224 (dQ)
    const [, kv, dq] = lowered(i, { MPSC_CUDA_ATTN_X3_ASYNC: undefined });
    expect([kv.tgmem, dq.tgmem]).toEqual([52480, 52224]);
    for (const k of [kv, dq]) expect(k.body).toMatch(/float\* const sm = tg;[\s\S]*mpsc_cp_async16\([\s\S]*mpsc_cp_async_wait_all\(\);\n\s*__syncthreads\(\);/);
    expect(kv.body).toMatch(/mpsc_cp_async4\(/);
    // D = 48: static shared memory (S = 64: by default no Delta kernel, the bodies compute it)
    const dkdvDq = lowered(j, {}).filter((k) => !/Delta = rowsum/.test(k.label));
    expect(dkdvDq).toHaveLength(2);
    for (const k of dkdvDq) {
      expect(k.tgmem).toBe(0);
      expect(k.body).toMatch(/__shared__ __align__\(16\) float sm\[\d+\];/);
    }
    // only the dK/dV kernel double-buffered; single score accumulators
    const [, kv1, dq1] = lowered(i, { MPSC_CUDA_ATTN_X3_ASYNC: 'kv', MPSC_CUDA_ATTN_X3_KSPLIT: '0' });
    expect(kv1.body).toMatch(/mpsc_cp_async16/);
    expect(kv1.body).not.toMatch(/st_odd/);
    expect(dq1.tgmem).toBe(0);
    expect(dq1.body).not.toMatch(/mpsc_cp_async/);
    expect(kv.body).toMatch(/st_odd/);
  });
});

describe('flash kernel geometry', () => {
  for (const [x3, noFold] of [[true, false], [false, false], [true, true]]) it(`64 (16-bit, 3xTF32) or 32 (fp32 CUDA cores) rows per block over (tiles, heads); the backward kernels share a Delta scratch of H*T floats${!x3 ? ' (MPSC_CUDA_ATTN_TF32X3=0)' : noFold ? ' (MPSC_CUDA_FLASH_DELTA_FOLD=0: also where S <= 64)' : ' (3xTF32: none where S <= 64)'}`, () => {
    cases.forEach((c, i) => {
      const { n } = attnNode(i);
      const path = expectedPath(i, x3);
      if (path === 'shared') return;
      const rows = path === 'f32' ? 32 : 64;
      const g = c.program.graph;
      const { H: NH, T, S } = attnGeom(g, n), N = 1, H = NH;  // N * H heads
      const ks = attnKernels(i, x3, noFold);
      if (isForward(n)) {
        expect(ks[0].groups).toEqual([Math.ceil(T / (path === 'tc' ? flashForwardRows() : rows)), N * H, 1]);
        expect(ks[0].tgsize).toEqual([128, 1, 1]);
        return;
      }
      // 3xTF32 with one key tile per head: Delta inside the dK/dV and dQ bodies (x3DeltaFold, on by default), no scratch
      const folded = !noFold && path === 'x3' && S <= 64;
      const delta = folded ? undefined : ks[0];
      const [kv, dq] = folded ? ks : ks.slice(1);
      if (delta) expect(delta.groups[0] * delta.tgsize[0]).toBeGreaterThanOrEqual(8 * N * H * T);  // 8 lanes per row
      if (dq) {
        expect(kv.groups).toEqual([Math.ceil(S / rows), N * H, 1]);
        expect(dq.groups).toEqual([Math.ceil(T / rows), N * H, 1]);
      } else {
        // one launch: block rows y < H the dK/dV body, y >= H the dQ body of head y - H
        expect(T).toBe(S);
        expect(kv.groups).toEqual([Math.ceil(S / rows), 2 * N * H, 1]);
        expect(kv.body).toMatch(new RegExp(`if \\(blockIdx\\.y < ${N * H}\\) \\{`));
        expect(kv.body).toMatch(new RegExp(`const int bh = \\(blockIdx\\.y - ${N * H}\\);`));
      }
      // (rule 15's partial rows after Delta: the sum cases' test below)
      if (!isSumCase(i)) for (const x of ks) expect(x.scratch).toBe(folded ? undefined : N * H * T * 4);
      // Delta is written before the kernels that read it, and never by them
      if (delta) expect(delta.body).toMatch(/mpsc_scratch\[row\] = acc/);
      if (!isSumCase(i)) for (const x of delta ? ks.slice(1) : ks) expect(x.body).not.toMatch(/mpsc_scratch\[[^\]]*\] =/);
      if (!delta) for (const x of ks) expect(x.body).not.toMatch(/mpsc_scratch/);
    });
  });

  it('fuse.ts rule 15 (the qkv_sum cases): the dK/dV and dQ kernels write partial rows of 3C after Delta in the scratch region, one per (batch, 64-row tile); the finish adds them', () => {
    const idx = cases.map((_, i) => i).filter((i) => isSumCase(i) && expectedPath(i) === 'tc');
    expect(idx).toHaveLength(2);
    // a head width the flash kernels refuse: the shared kernel for the unfused node, then a sum_to kernel writing the sums
    const refused = cases.map((_, i) => i).filter((i) => isSumCase(i) && expectedPath(i) === 'shared');
    expect(refused).toHaveLength(1);
    for (const i of refused) {
      const { g, n } = attnNode(i);
      const ks = art.lowered[i].kernels.filter((k) => k.node === n.id);
      expect(ks.some((k) => /flash attention/.test(k.label))).toBe(false);
      expect(ks.filter((k) => k.args.some((a) => a.value === n.outputs[1] && a.access !== 'r')).length).toBeGreaterThan(0);
      expect(ks[ks.length - 1].args.some((a) => a.value === n.outputs[1])).toBe(true);
      expect(g.values[n.outputs[1]].shape).toEqual([3 * 2 * 8]);
    }
    for (const i of idx) {
      const { g, n } = attnNode(i);
      const { T } = attnGeom(g, n), H = Number(n.attrs.heads), N = g.values[n.outputs[0]].shape[0], W = g.values[n.outputs[0]].shape[2];
      const all = art.lowered[i].kernels.filter((k) => ATTENTION_FAMILY.includes(k.op));
      const flash = all.filter((k) => !FINISH.test(k.label)), finish = all.filter((k) => FINISH.test(k.label));
      expect(finish).toHaveLength(1);
      expect(all[all.length - 1]).toBe(finish[0]);
      const G = N * Math.ceil(T / 64), base = Math.ceil(N * H * T / 4) * 4;
      expect(finish[0].label).toMatch(new RegExp(`dsum: sum of ${G} blocks`));
      // the dK/dV and dQ kernels each add their part (and reach past Delta); the Delta kernel none
      const adding = flash.filter((k) => /fuse.ts rule 15/.test(k.body));
      expect(adding.map((k) => (/: dK, dV\]$/.test(k.label) ? 'kv' : 'q')).sort()).toEqual(['kv', 'q']);
      for (const k of [...adding, finish[0]]) expect(k.scratch, k.label).toBe((base + G * W) * 4);
      for (const k of adding) {
        expect(k.body).toMatch(new RegExp(`const size_t prow = ${base} \\+ `));
        // its only scratch writes: the partial row
        expect(k.body.match(/mpsc_scratch\[[^\]]*\] =/g)).toEqual([expect.stringMatching(/^mpsc_scratch\[prow \+/)]);
      }
    }
  });

  it('causal kernels skip the key tiles above the diagonal and mask only the tiles that cross it', () => {
    const body = (name: string, x3 = true) => attnKernels(cases.findIndex((c) => String(c.program.name) === name), x3)[0].body;
    // S - T = 80: query tile q0 (of 128 rows; 64 with MPSC_CUDA_FLASH_FWD_ROWS=64) sees keys up to q0 + 127 + 80;
    // each warp's m16 tile (qw0, qw1: 32 rows a warp) masks the key tiles crossing its own diagonal
    const fr = flashForwardRows();
    expect(body('flash_1x2_t70_s150_d16_causal_f16_fwd')).toMatch(new RegExp(`kend = min\\(S, q0 \\+ ${fr + 80}\\);`));
    for (const qw of fr === 128 ? ['qw0', 'qw1'] : ['qw'])
      expect(body('flash_1x2_t70_s150_d16_causal_f16_fwd')).toMatch(new RegExp(`const bool edge = k0 \\+ 64 > S \\|\\| k0 \\+ 63 > ${qw} \\+ 80;`));
    expect(body('flash_1x2_t70_s150_d32_bf16_fwd')).toMatch(/kend = S;/);
    expect(body('flash_1x2_t70_s150_d32_bf16_fwd')).toMatch(/const bool edge = k0 \+ 64 > S;/);
    // fp32 on the CUDA cores, 32-row tiles, S - T = 55
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd', false)).toMatch(/const int kend = min\(S, q0 \+ 87\);/);
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd', false)).toMatch(/const bool edge = k0 \+ 32 > S \|\| k0 \+ 31 > q0 \+ 55;/);
    // fp32 as 3xTF32: 64-query blocks, 32-key tiles; a warp (16 queries from qw) skips a tile none of its queries sees
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd')).toMatch(/const int kend = min\(S, q0 \+ 119\);/);
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd')).toMatch(/const bool edge = k0 \+ 32 > S \|\| k0 \+ 31 > qw \+ 55;/);
    expect(body('flash_f32_1x2_t45_s100_d32_causal_fwd')).toMatch(/if \(k0 > qw \+ 70\) continue;/);
  });
});

describe.skipIf(!NV)('the flash kernels compiled by nvcc', () => {
  for (const mode of ['x3', 'f32', 'stored', 'nofold', 'wgmma', 'wgpipe', 'wgalt', 'wgfwd2'] as const) it(`compile for sm_90a -Werror; ptxas: no spills, no stack, shared memory within 48 KiB${{ x3: '', f32: ' (MPSC_CUDA_ATTN_TF32X3=0)', stored: ' (MPSC_CUDA_FLASH_DQ=stored)', nofold: ' (MPSC_CUDA_FLASH_DELTA_FOLD=0)', wgmma: ' (MPSC_CUDA_FLASH_WGMMA=fwd,kv,q MPSC_CUDA_FLASH_WGMMA_PIPE=0: the 16-bit kernels)', wgpipe: ' (the same, MPSC_CUDA_FLASH_WGMMA_PIPE=1)', wgalt: ' (the same, MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1 MPSC_CUDA_FLASH_WGMMA_DELTA=kernel)', wgfwd2: ' (the same, MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128 MPSC_CUDA_FLASH_WGMMA_Q_ROWS=128)' }[mode]}`, () => {
    const x3 = mode !== 'f32', a = { x3: art, f32: artOff, stored: artStored, nofold: artNoFold, wgmma: artWgmma, wgpipe: artWgPipe, wgalt: artWgAlt, wgfwd2: artWgFwd2 }[mode];
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-flash-'));
    const file = path.join(dir, 'k.cu');
    fs.writeFileSync(file, a.files['model_kernels.cuh']);
    const r = spawnSync(NV!.nvcc, [...NVCC_SM90A, '-fmad=true', '-c', file, '-o', path.join(dir, 'k.o'), '-Werror', 'all-warnings', '-Xptxas', '-v'], { encoding: 'utf8' });
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
    const flash = a.lowered.flatMap((l) => l.kernels).filter((k) => /flash attention/.test(k.label) && !a.alias.has(k.name));
    const stored = flash.filter((k) => /: (dK, dV, dS\^T stored|dQ = dS K from the stored dS\^T)\]$/.test(k.label));
    if (mode === 'wgmma' || mode === 'wgpipe' || mode === 'wgalt' || mode === 'wgfwd2') {
      // head width 64 on wgmma (its PTX in the body's helpers): the forward, or dK/dV and dQ; the other widths on mma.sync as before
      const d64 = cases16.filter((c) => c.program.graph.nodes.some((n) => ATTENTION_FAMILY.includes(n.op) && attnGeom(c.program.graph, n).D === 64));
      const [f64, g64] = [/_fwd$/, /_grad$/].map((re) => d64.filter((c) => re.test(String(c.program.name))).length);
      expect(Math.min(f64, g64)).toBeGreaterThanOrEqual(3);
      const onWg = flash.filter((k) => /wgmma \(sm_90a\), 64 rows per block/.test(k.label));
      // (wgfwd2: the forwards and dQ kernels at 128 rows per block, two warpgroups of 256 threads)
      const two = flash.filter((k) => /wgmma \(sm_90a\), 128 rows per block \(two warpgroups\)(: dQ and Delta)?\]$/.test(k.label));
      expect(two).toHaveLength(mode === 'wgfwd2' ? f64 + g64 : 0);
      expect(two.every((k) => k.tgsize[0] === 256)).toBe(true);
      expect(onWg).toHaveLength((mode === 'wgfwd2' ? g64 : f64 + 2 * g64));
      expect(onWg.filter((k) => /: dK, dV\]$/.test(k.label))).toHaveLength(g64);
      expect(flash.filter((k) => /tensor cores, (64|128) rows per block/.test(k.label)).length).toBeGreaterThan(0);
      expect(a.files['model_kernels.cuh']).toMatch(/wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16/);
      // the overlapped backward waits for all but the youngest group between its product groups
      expect(a.files['model_kernels.cuh'].includes('mpsc_wgmma_wait1();')).toBe(mode !== 'wgmma');
      // Delta: computed by the dQ kernel (the default), or by its own kernel (wgalt)
      expect(flash.filter((k) => /: dQ and Delta\]$/.test(k.label))).toHaveLength(mode === 'wgalt' ? 0 : g64);
      expect(a.files['model_kernels.cuh'].includes('softmax overlapped with the previous tile')).toBe(mode === 'wgalt');
      // ptxas keeps the product groups asynchronous (it serializes them, info C7515, when plain instructions write an accumulator while a group is in flight)
      expect(r.stderr).not.toMatch(/C7515|wgmma\.mma_async instructions are serialized/);
    } else if (mode === 'stored') {
      // every 16-bit gradient's dK/dV and dQ kernels store / read dS^T
      expect(storedCases.length).toBeGreaterThanOrEqual(5);
      expect(stored).toHaveLength(2 * storedCases.length);
    } else {
      // (3xTF32: the packed backward's dK/dV and dQ are one kernel)
      const mergedX3 = flash.filter((k) => /dK, dV and dQ in one launch/.test(k.label)).length;
      expect(mergedX3 > 0).toBe(x3);
      // (with the fold, on by default, the Delta kernels of the S <= 64 3xTF32 backward cases are gone: their bodies compute it)
      const foldedX3 = flash.filter((k) => /Delta = rowsum\(dO \* O\) of \d+ query rows/.test(k.body)).length;
      expect(foldedX3 > 0).toBe(mode === 'x3');
      expect(flash.length + mergedX3 + foldedX3).toBeGreaterThanOrEqual(52);
      // the fp32 nodes' kernels are this build's path
      expect(flash.filter((k) => (x3 ? LABEL.x3 : LABEL.f32).test(k.label)).length + mergedX3).toBeGreaterThanOrEqual(18);
      expect(stored).toHaveLength(0);
    }
    for (const k of flash) {
      const text = info.get(k.name) ?? '';
      expect(text, k.name).toMatch(/0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/);
      const regs = Number(/Used (\d+) registers/.exec(text)?.[1]);
      expect(regs, k.name).toBeLessThanOrEqual(255);
      const smem = Number(/(\d+) bytes smem/.exec(text)?.[1] ?? 0);
      expect(smem, k.name).toBeLessThanOrEqual(48 * 1024);
    }
  }, 300_000);
});
