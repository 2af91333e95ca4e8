/**
 * compiler/env_switch.ts: the build-time switches parsed in one place. Every reader rejects a typo with a
 * UserError (exit 1) naming the variable, the values it takes and the value it got, and an unset or empty
 * variable means the default.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { withEnv } from './env_helpers.js';
import { envChoice, envFlag, envInts, envList } from '../compiler/env_switch.js';
import { UserError } from '../compiler/errors.js';
import { flashDq, flashForwardRows, flashLdsm, flashMinBlocks, flashWgmma, flashWgmmaDelta, flashWgmmaFwdPipe, flashWgmmaFwdRows, flashWgmmaQRows, flashWgmmaPipe } from '../compiler/codegen-cuda/attention_cuda.js';
import { attnTf32x3Enabled, x3Async, x3BwdMerge, x3DeltaFold, x3KSplit } from '../compiler/codegen-cuda/attention_tf32x3.js';
import { smallFp32 } from '../compiler/codegen-cuda/gemm_cuda.js';
import { tf32x3ChunkTiles, tf32x3KMajor } from '../compiler/codegen-cuda/tf32x3.js';
import { smallEpiOn } from '../compiler/codegen-cuda/fusions.js';
import { smallGenMode } from '../compiler/codegen-cuda/cublaslt.js';
import { cudaLanes, reuseGap } from '../compiler/codegen-cuda/lanes.js';
import { rowBlock, ceUnroll, ceVec, ceSmem } from '../compiler/codegen-cuda/class_rows.js';
import { adamVec, ewVec, ewVec32, gradSumBlocks } from '../compiler/codegen-cuda/wide_ew_cuda.js';
import { finishMode } from '../compiler/codegen-cuda/layernorm_cuda.js';
import { lnGrad, lnVec } from '../compiler/codegen-cuda/layernorm_cuda.js';
import { convRound } from '../compiler/codegen-cuda/conv_cuda.js';
import { cublasLtChoice, cudaGemmChoice, GENERATOR_ENV, ltTuneChoice, ltTuneFile, tf32x3Choice, wgmmaArchCheck } from '../runtime/cuda/session.js';
import { cpuAmxChoice, cpuAmxGridChoice, cpuFmaGridChoice, cpuMrChoice, CPU_GENERATOR_ENV } from '../compiler/codegen-cpu/emit_program.js';
import { cpuInputsKey } from '../runtime/native/native_session.js';
import { tinyProgramSet } from './cpu_helpers.js';

function userError(f: () => unknown): UserError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return e as UserError;
  }
  throw new Error('expected a UserError, got none');
}

describe('envChoice / envFlag / envList / envInts', () => {
  it('unset or empty: the default; a listed value: itself; anything else: a UserError naming all three', () => {
    expect(envChoice('X', ['a', 'b'], 'b', undefined)).toBe(withEnv('X', undefined, () => 'b'));
    expect(withEnv('MPSC_TEST_SWITCH', '', () => envChoice('MPSC_TEST_SWITCH', ['a', 'b'], 'b'))).toBe('b');
    expect(envChoice('X', ['a', 'b'], 'b', 'a')).toBe('a');
    expect(userError(() => envChoice('X', ['a', 'b'], 'b', 'A')).message).toBe("error: X must be one of 'a', 'b', got 'A'");
    expect(withEnv('MPSC_TEST_SWITCH', 'c', () => userError(() => envChoice('MPSC_TEST_SWITCH', ['a', 'b'], 'a')).message)).toMatch(/MPSC_TEST_SWITCH .*got 'c'/);
  });
  it('flags take 0 and 1 only (not yes / true / on)', () => {
    expect(envFlag('F', true, '0')).toBe(false);
    expect(envFlag('F', false, '1')).toBe(true);
    expect(envFlag('F', true, '')).toBe(true);
    for (const v of ['yes', 'true', 'on', '2']) expect(userError(() => envFlag('F', true, v)).message).toBe(`error: F must be one of '0', '1', got '${v}'`);
  });
  it("lists: members once each, in the user's order; 'none' is empty; a stranger or a repeat is refused", () => {
    expect(envList('L', ['fwd', 'kv', 'q'], ['fwd'], 'q, fwd')).toEqual(['q', 'fwd']);
    expect(envList('L', ['fwd', 'kv', 'q'], ['fwd'], 'none')).toEqual([]);
    expect(envList('L', ['fwd', 'kv', 'q'], ['fwd'], '')).toEqual(['fwd']);
    expect(userError(() => envList('L', ['fwd', 'kv', 'q'], [], 'fwd,dq')).message).toMatch(/'dq' is not one of them/);
    expect(userError(() => envList('L', ['fwd', 'kv', 'q'], [], 'kv,kv')).message).toMatch(/'kv' is repeated/);
  });
  it('integer lists: the count and the range are checked', () => {
    expect(envInts('I', 3, 0, 8, [0, 0, 0], 'x', '4,0,3')).toEqual([4, 0, 3]);
    expect(envInts('I', 3, 0, 8, [0, 0, 0], 'x', undefined)).toEqual(withEnv('I', undefined, () => [0, 0, 0]));
    for (const v of ['4,0', '4,0,9', '4,0,1.5', 'a,b,c']) expect(userError(() => envInts('I', 3, 0, 8, [0, 0, 0], 'x', v)).message).toMatch(/^error: I=.*: expected 3 comma-separated integers 0..8 \(x\)$/);
  });
});

describe('every exported switch reader refuses a typo with a UserError and takes its default when unset', () => {
  const readers: [string, () => unknown, unknown][] = [
    ['MPSC_CONV_ROUND', convRound, 'rn'],
    ['MPSC_CUDA_FLASH_LDSM', () => [flashLdsm('fwd'), flashLdsm('kv'), flashLdsm('q')], [true, true, false]],
    ['MPSC_CUDA_FLASH_MINBLOCKS', flashMinBlocks, [0, 0, 0]],
    ['MPSC_CUDA_FLASH_FWD_ROWS', flashForwardRows, 128],
    ['MPSC_CUDA_FLASH_DQ', flashDq, 'recompute'],
    ['MPSC_CUDA_FLASH_WGMMA', () => [flashWgmma(64, 'fwd', true), flashWgmma(64, 'kv', true), flashWgmma(64, 'q', true), flashWgmma(64, 'fwd', false)], [true, true, true, false]],
    ['MPSC_CUDA_FLASH_WGMMA_PIPE', flashWgmmaPipe, true],
    ['MPSC_CUDA_FLASH_WGMMA_DELTA', flashWgmmaDelta, 'q'],
    ['MPSC_CUDA_FLASH_WGMMA_FWD_PIPE', flashWgmmaFwdPipe, false],
    ['MPSC_CUDA_FLASH_WGMMA_FWD_ROWS', flashWgmmaFwdRows, 64],
    ['MPSC_CUDA_FLASH_WGMMA_Q_ROWS', flashWgmmaQRows, 64],
    ['MPSC_CUDA_CE_ROW_BLOCK', rowBlock, 1024],
    ['MPSC_CUDA_CE_UNROLL', ceUnroll, 4],
    ['MPSC_CUDA_CE_VEC', ceVec, true],
    ['MPSC_CUDA_CE_SMEM', ceSmem, false],
    ['MPSC_CUDA_EW_VEC', ewVec, true],
    ['MPSC_CUDA_ADAM_VEC', adamVec, false],
    ['MPSC_CUDA_EW_VEC32', ewVec32, false],
    ['MPSC_CUDA_LN_VEC', lnVec, 'fwd'],
    ['MPSC_CUDA_LN_GRAD', lnGrad, 'regs'],
    ['MPSC_CUDA_ATTN_TF32X3', attnTf32x3Enabled, true],
    ['MPSC_CUDA_ATTN_X3_ASYNC', () => [x3Async('fwd'), x3Async('kv'), x3Async('q')], [true, true, true]],
    ['MPSC_CUDA_ATTN_X3_KSPLIT', x3KSplit, true],
    ['MPSC_CUDA_CUBLASLT', cublasLtChoice, true],
    ['MPSC_CUDA_TF32X3', tf32x3Choice, 'rule'],
    ['MPSC_CUDA_GEMM', cudaGemmChoice, 'cuda'],
    ['MPSC_CPU_AMX', cpuAmxChoice, true],
    ['MPSC_CPU_AMX_GRID', cpuAmxGridChoice, true],
    ['MPSC_CPU_MR', cpuMrChoice, 8],
    ['MPSC_CPU_FMA_GRID', cpuFmaGridChoice, true],
    ['MPSC_CUDA_FLASH_BWD_MERGE', x3BwdMerge, true],
    ['MPSC_CUDA_FLASH_DELTA_FOLD', x3DeltaFold, true],
    ['MPSC_CUDA_SMALL_FP32', smallFp32, 'x3'],
    ['MPSC_CUDA_SMALL_GEN', smallGenMode, '0'],
    ['MPSC_CUDA_LANES', cudaLanes, 3],
    ['MPSC_CUDA_REUSE_GAP', reuseGap, 2],
    ['MPSC_CUDA_LT_TUNE', ltTuneChoice, 'waves'],
    ['MPSC_CUDA_TF32X3_CHUNK_TILES', tf32x3ChunkTiles, false],
    ['MPSC_CUDA_TF32X3_KMAJOR', tf32x3KMajor, true],
    ['MPSC_CUDA_SMALL_EPI', smallEpiOn, true],
    ['MPSC_CUDA_GRAD_SUM_BLOCKS', gradSumBlocks, 512],
    ['MPSC_CUDA_LN_FINISH', finishMode, 'warp'],
  ];
  for (const [name, read, dflt] of readers) {
    it(name, () => {
      expect(withEnv(name, undefined, read)).toEqual(dflt);
      expect(withEnv(name, '', read)).toEqual(dflt);
      expect(withEnv(name, 'typo', () => userError(read).message)).toMatch(new RegExp(`^error: ${name}`));
    });
  }
});

describe('MPSC_CUDA_FLASH_WGMMA: which kernels, and a GPU other than Hopper', () => {
  it('a list picks kernels (fwd, kv, q); none, none; auto (the default) all three on Hopper only; only at head width 64', () => {
    const picks = (v: string | undefined, hopper = false) => withEnv('MPSC_CUDA_FLASH_WGMMA', v, () => [flashWgmma(64, 'fwd', hopper), flashWgmma(64, 'kv', hopper), flashWgmma(64, 'q', hopper), flashWgmma(32, 'fwd', hopper), flashWgmma(32, 'q', hopper)]);
    expect(picks('fwd')).toEqual([true, false, false, false, false]);
    expect(picks('kv,q')).toEqual([false, true, true, false, false]);
    expect(picks('fwd,kv,q')).toEqual([true, true, true, false, false]);
    expect(picks('none', true)).toEqual([false, false, false, false, false]);
    expect(picks('auto', true)).toEqual([true, true, true, false, false]);
    expect(picks(undefined, true)).toEqual([true, true, true, false, false]);
    expect(picks('auto', false)).toEqual([false, false, false, false, false]);
    expect(withEnv('MPSC_CUDA_FLASH_WGMMA', 'auto,fwd', () => userError(() => flashWgmma(64, 'fwd', true)).message)).toMatch(/^error: MPSC_CUDA_FLASH_WGMMA=auto,fwd: 'auto' stands alone/);
  });
  it('is a UserError naming the switch and the build\'s target before nvcc runs; on sm_90a, or unset, nothing', () => {
    expect(withEnv('MPSC_CUDA_FLASH_WGMMA', 'fwd,kv,q', () => userError(() => wgmmaArchCheck('80')).message)).toMatch(/^error: MPSC_CUDA_FLASH_WGMMA=fwd,kv,q needs a Hopper GPU \(sm_90a: wgmma\); this build targets sm_80\n  help: unset MPSC_CUDA_FLASH_WGMMA/);
    expect(withEnv('MPSC_CUDA_FLASH_WGMMA', 'q', () => userError(() => wgmmaArchCheck('89')).message)).toMatch(/^error: MPSC_CUDA_FLASH_WGMMA=q needs a Hopper GPU/);
    expect(() => withEnv('MPSC_CUDA_FLASH_WGMMA', 'fwd,kv,q', () => wgmmaArchCheck('90a'))).not.toThrow();
    expect(() => withEnv('MPSC_CUDA_FLASH_WGMMA', undefined, () => wgmmaArchCheck('80'))).not.toThrow();
    expect(() => withEnv('MPSC_CUDA_FLASH_WGMMA', 'auto', () => wgmmaArchCheck('80'))).not.toThrow();
  });
});

describe('the cuBLASLt tuning file (runtime/cuda/mpsc_cublaslt.cpp reads and appends it at create)', () => {
  it('is $MPSC_CUDA_LT_TUNE_FILE when set, else cublaslt-tune.tsv in the build cache', () => {
    expect(withEnv('MPSC_CUDA_LT_TUNE_FILE', undefined, () => ltTuneFile('/c'))).toBe(path.join('/c', 'cublaslt-tune.tsv'));
    expect(withEnv('MPSC_CUDA_LT_TUNE_FILE', '/x/t.tsv', () => ltTuneFile('/c'))).toBe('/x/t.tsv');
    expect(withEnv('MPSC_CUDA_LT_TUNE_FILE', undefined, () => withEnv('MPSC_CACHE_DIR', '/m', () => ltTuneFile()))).toBe(path.join('/m', 'cublaslt-tune.tsv'));
  });
});

/** the env switches with this name prefix (a regex source) that compiler/ reads through env_switch.ts's helpers */
function switchesRead(prefix: string): Set<string> {
  const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
  const files = fs.readdirSync(path.join(root, 'compiler'), { recursive: true }).map(String).filter((f) => f.endsWith('.ts'));
  const re = new RegExp(`env(?:Flag|Choice|Ints|List)(?:<[^>]*>)?\\('(${prefix}[A-Z0-9_]+)'`, 'g');
  return new Set(files.flatMap((f) => [...fs.readFileSync(path.join(root, 'compiler', f), 'utf8').matchAll(re)].map((m) => m[1])));
}

describe('the CUDA build key', () => {
  it('holds every MPSC_CUDA_* / MPSC_CONV_* switch the generator reads (a switch left out would let a variant reuse another\'s cached build: bench/NOTES.md phase 15)', () => {
    const read = switchesRead('MPSC_(?:CUDA|CONV)_');
    expect(read.size).toBeGreaterThan(25);
    // MPSC_CUDA_ATTN_TF32X3 enters the key on its own (cudaInputsKey)
    expect([...read].filter((k) => k !== 'MPSC_CUDA_ATTN_TF32X3' && !GENERATOR_ENV.includes(k))).toEqual([]);
  });
});

describe('the CPU build key', () => {
  it('holds every MPSC_CPU_* switch the generator reads, and a switch set builds another module', () => {
    const read = switchesRead('MPSC_CPU_');
    expect(read.size).toBeGreaterThanOrEqual(5);
    expect([...read].filter((k) => !CPU_GENERATOR_ENV.includes(k))).toEqual([]);
    const ps = tinyProgramSet();
    const base = withEnv('MPSC_CPU_AMX', undefined, () => cpuInputsKey(ps));
    for (const k of CPU_GENERATOR_ENV) expect(withEnv(k, k === 'MPSC_CPU_MR' ? '12' : '0', () => cpuInputsKey(ps)), k).not.toBe(base);
  });
});

