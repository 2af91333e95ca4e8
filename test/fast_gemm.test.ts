/**
 * runtime/cpp/fast (sgemm.h, winograd.h, conv.h) against naive double-precision loops: compiles
 * test/native/fast_gemm_driver.cpp once, runs it, and checks every case it reports
 * (relative error < 1e-4, and nparts = 2, 3, 4, 8 bitwise equal to nparts = 1).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

interface Case {
  kind: string;
  name: string;
  err: number;
  same: boolean;
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
let dir = '';
let cases: Case[] = [];
let declared = -1;

/** compiles and runs the driver with extra flags; returns its cases and the count it declared */
interface DriverRun {
  cases: Case[];
  declared: number;
  dwChunks: number;
  /** winograd.h taken for the seed CNN's 64 -> 128 layer, LeNet's 32 -> 64, and a 16 -> 32 layer (it should not be) */
  wino: [number, number, number];
  /** the same for the grad-weight, and the seed layer's batch chunks (b32) */
  winoDw: [number, number, number];
  /** the conv cases whose grad-weight took winograd.h */
  winoDwCases: string[];
  /** the conv cases whose grad-weight ran as transposed batch chunks (conv.h detail::dw_t_chunks) */
  dwtCases: string[];
  /** detail::use_amx for the GPT's q/k/v projection, LeNet's fc1 (too few flops per packed element), the GPT's
   *  512 x 128 x 2048 grad-weight (a transposed A with N < 256) and the MLP's 256 x 256 x 784 (no dimension >= 1024) */
  amx: [number, number, number, number];
  /** detail::part_grid over 10 x 10 shapes and 1..16 parts: [rectangles off the 32-block grid or cells not covered
   *  exactly once, parts split in both axes] */
  grid: [number, number];
  /** detail::part_grid_fma over 13 x 13 shapes, 1..16 parts, direct A or not: [rectangles off the MR x NR tile grid or cells
   *  not covered exactly once, parts split in both axes among LeNet fc1's 8 parts and the MLP forward's (not a grid)] */
  gridFma: [number, number];
}

function runDriver(tag: string, flags: string[]): DriverRun {
  const exe = join(dir, `fast_gemm_driver_${tag}`);
  execFileSync(
    'nice',
    ['g++', '-O2', '-march=native', ...flags, '-std=c++17', '-pthread', '-Wall', '-Werror', '-o', exe,
      join(root, 'test/native/fast_gemm_driver.cpp')],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const out = execFileSync(exe, { encoding: 'utf8', maxBuffer: 16 << 20 });
  const found: Case[] = [];
  let count = -1;
  let dwChunks = -1;
  let wino: [number, number, number] = [-1, -1, -1];
  let winoDw: [number, number, number] = [-1, -1, -1];
  const winoDwCases: string[] = [];
  const dwtCases: string[] = [];
  let amx: [number, number, number, number] = [-1, -1, -1, -1];
  let grid: [number, number] = [-1, -1];
  let gridFma: [number, number] = [-1, -1];
  for (const line of out.split('\n')) {
    const gf = /^GRIDFMA (\d+) (\d+)$/.exec(line);
    if (gf) gridFma = [Number(gf[1]), Number(gf[2])];
    const g = /^GRID (\d+) (\d+)$/.exec(line);
    if (g) grid = [Number(g[1]), Number(g[2])];
    const a = /^AMX ([01]) ([01]) ([01]) ([01])$/.exec(line);
    if (a) amx = [Number(a[1]), Number(a[2]), Number(a[3]), Number(a[4])];
    const wc = /^WINODWCASE (\S+)$/.exec(line);
    if (wc) winoDwCases.push(wc[1]);
    const tc = /^DWTCASE (\S+)$/.exec(line);
    if (tc) dwtCases.push(tc[1]);
    const wd = /^WINODW ([01]) ([01]) (\d+)$/.exec(line);
    if (wd) winoDw = [Number(wd[1]), Number(wd[2]), Number(wd[3])];
    const w = /^WINO ([01]) ([01]) ([01])$/.exec(line);
    if (w) wino = [Number(w[1]), Number(w[2]), Number(w[3])];
    const q = /^DWCHUNKS batch_chunks (\d+)$/.exec(line);
    if (q) dwChunks = Number(q[1]);
    const m = /^CASE (\S+) (\S+) err=(\S+) same=([01])$/.exec(line);
    if (m) found.push({ kind: m[1], name: m[2], err: Number(m[3]), same: m[4] === '1' });
    const d = /^DONE (\d+)$/.exec(line);
    if (d) count = Number(d[1]);
  }
  return { cases: found, declared: count, dwChunks, wino, winoDw, winoDwCases, dwtCases, amx, grid, gridFma };
}

// the kernel of this machine's widest vectors (AVX-512 here: 16 lanes), and the 8-lane kernel
// that AVX2 machines and arm64 (NEON) compile, forced with -DMPSC_FAST_VW=8
// (the narrow build also caps grad-weight's batch chunks at 3, so a second chunk count is checked)
// and a build without Winograd and AMX (-DMPSC_FAST_WINOGRAD=0 -DMPSC_FAST_AMX=0), so the wide GEMM path
// stays checked on the shapes Winograd takes and the FMA kernel on the products the AMX tiles take
let dwChunks = -1;
let wino: [number, number, number] = [-1, -1, -1];
let winoDw: [number, number, number] = [-1, -1, -1];
let winoDwCases: string[] = [];
const none: DriverRun = { cases: [], declared: -1, dwChunks: -1, wino: [-1, -1, -1], winoDw: [-1, -1, -1], winoDwCases: [], dwtCases: [], amx: [-1, -1, -1, -1], grid: [-1, -1], gridFma: [-1, -1] };
let native = none;
let narrow = none;
let noWino = none;
let mr12 = none;
let mr8 = none;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'mpsc-fast-gemm-'));
  native = runDriver('native', []);
  ({ cases, declared, dwChunks, wino, winoDw, winoDwCases } = native);
  narrow = runDriver('vw8', ['-DMPSC_FAST_VW=8', '-DMPSC_FAST_CONV_DW_CHUNKS=3']);
  // also without the AMX tiles, so the 16-lane FMA kernel stays checked on the products AMX takes here, and with the FMA
  // path's parts always split along one axis (MPSC_FAST_FMA_GRID=0), on the shapes its grid takes too
  noWino = runDriver('nowino', ['-DMPSC_FAST_WINOGRAD=0', '-DMPSC_FAST_AMX=0', '-DMPSC_FAST_FMA_GRID=0']);
  // a 12-row micro-tile (24 accumulators; -DMPSC_FAST_MR is a documented override): every kernel that lays out
  // MR-row panels (the GEMM's packing, Winograd's transformed dy) must work at any MR, with the same bits
  mr12 = runDriver('mr12', ['-DMPSC_FAST_MR=12', '-DMPSC_FAST_AMX=0']);
  // its reference: the 8-row kernel on the same products, i.e. native where the tiles are absent, else an 8-row build
  // without them (on an AMX machine native's large products ran on the tiles, whose errors are their own)
  mr8 = native.amx[0] === 1 ? runDriver('mr8', ['-DMPSC_FAST_AMX=0']) : native;
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const bad = (kind: string | RegExp) =>
  cases
    .filter((c) => (typeof kind === 'string' ? c.kind === kind : kind.test(c.kind)))
    .filter((c) => !(c.err < 1e-4) || !c.same)
    .map((c) => `${c.kind} ${c.name} err=${c.err} same=${c.same}`);

describe('fast sgemm / conv core (runtime/cpp/fast)', () => {
  it('the driver ran to the end and reported every case', () => {
    expect(declared).toBeGreaterThan(0);
    expect(cases.length).toBe(declared);
  });

  it('the FMA path\'s grid of parts (detail::part_grid_fma, MPSC_FAST_FMA_GRID) covers every C element exactly once, in whole MR x NR tiles, and splits both axes of LeNet fc1 at 8 parts (not the MLP forward)', () => {
    for (const r of [native, mr12]) {
      expect(r.gridFma[0]).toBe(0);
      expect(r.gridFma[1]).toBe(8);
    }
  });

  it('a 12-row micro-tile build (-DMPSC_FAST_MR=12) passes every case with the same errors as the 8-row one (each element is the same chain whatever the tile)', () => {
    expect(mr12.declared).toBeGreaterThan(0);
    expect(mr12.cases.length).toBe(mr12.declared);
    expect(mr12.cases.filter((c) => !(c.err < 1e-4) || !c.same).map((c) => `${c.kind} ${c.name}`)).toEqual([]);
    expect(mr8.amx[0]).toBe(0);
    const errOf = new Map(mr8.cases.map((c) => [`${c.kind} ${c.name}`, c.err]));
    const shared = mr12.cases.filter((c) => errOf.has(`${c.kind} ${c.name}`));
    expect(shared.length).toBeGreaterThan(300);
    expect(shared.filter((c) => errOf.get(`${c.kind} ${c.name}`) !== c.err).map((c) => `${c.kind} ${c.name}`)).toEqual([]);
  });

  it('relu\'s gradient in the product\'s store (Epilogue::mask, fuse.ts rule 12 on the CPU): bit for bit the product and the separate select, every transpose, 1 to 8 parts, the narrow shape kept direct', () => {
    for (const r of [native, narrow, noWino, mr12]) {
      const m = r.cases.filter((c) => c.kind === 'sgemm_mask');
      expect(m.length).toBe(7);
      expect(m.filter((c) => !(c.err < 1e-4) || !c.same).map((c) => `${c.name} err=${c.err}`)).toEqual([]);
      expect(m.some((c) => c.name.endsWith('_noswap'))).toBe(true);
    }
  });

  it('the AMX path\'s grid of parts (detail::part_grid, MPSC_FAST_AMX_GRID) covers every C element exactly once, in whole 32 x 32 blocks, and splits both axes where that packs less', () => {
    expect(native.grid[0]).toBe(0);
    expect(native.grid[1]).toBeGreaterThan(0);
  });

  it('the 8-lane build (-DMPSC_FAST_VW=8: AVX2 / NEON width) passes every case too', () => {
    expect(narrow.declared).toBe(declared);
    expect(narrow.cases.length).toBe(declared);
    expect(narrow.cases.filter((c) => !(c.err < 1e-4) || !c.same).map((c) => `${c.kind} ${c.name} err=${c.err}`)).toEqual([]);
  });

  it('sgemm: all transposes, odd sizes, alpha/beta, epilogues, 1..3 parts', () => {
    const g = cases.filter((c) => c.kind === 'sgemm');
    expect(g.length).toBeGreaterThanOrEqual(4 * 11 + 4 * 7 + 2);
    for (const t of ['NN', 'NT', 'TN', 'TT']) expect(g.some((c) => c.name.startsWith(`${t}_1x1x1`))).toBe(true);
    expect(bad('sgemm')).toEqual([]);
    // sgemm_part (any parts) bit-equal to the direct blocked product; narrow outputs ("_swap": computed as
    // C^T = op(B)^T op(A)^T) among them: at least the 5 narrow workload-like shapes in both vector widths
    const swapped = (r: Case[]) => r.filter((c) => c.kind === 'sgemm_direct' && c.name.endsWith('_swap'));
    expect(swapped(cases).length).toBeGreaterThanOrEqual(5);
    expect(swapped(narrow.cases).length).toBeGreaterThanOrEqual(5);
    expect(bad('sgemm_direct')).toEqual([]);
  });

  it('sgemm with a transposed A sums its columns while packing (a_sums: a bias gradient next to its grad-weight), the exact sequential double chain for 1..3 parts, on the FMA kernel and the AMX tiles', () => {
    const s = cases.filter((c) => c.kind === 'sgemm_sums');
    expect(s.length).toBeGreaterThanOrEqual(2 * 11);
    expect(s.some((c) => c.name.startsWith('TN_160x272x1100_'))).toBe(true);  // the AMX path where available
    expect(bad('sgemm_sums')).toEqual([]);
    expect(noWino.cases.filter((c) => c.kind === 'sgemm_sums' && !c.same)).toEqual([]);
  });

  // amx.h: fp32 products as six bf16 tile products. Where -march=native gives AMX and Linux grants the
  // tiles (Sapphire Rapids and later Xeons: the GPU machine's host and some development / CI hosts; not AMD's), the large products run there;
  // elsewhere the driver reports AMX 0 0 and these products run on the FMA kernel, checked by the cases above
  it('sgemm on the AMX tiles (where available): every transpose, edges, chunked and whole K, 1, 2, 3, 4, 8 parts bitwise equal, error within 4x the FMA kernel', () => {
    const amx = cases.filter((c) => c.kind === 'sgemm_amx');
    if (native.amx[0] === 1) {
      // 3 beta-0 shapes x 4 transposes in the AMX block, the GPT's q/k/v projection and grad-weight (the MLP-like
      // 256 x 784 x 64 grad-weight has no dimension >= 1024: the FMA kernel, amx::pays)
      expect(amx.length).toBe(4 * 3 + 2);
      for (const t of ['NN', 'NT', 'TN', 'TT']) expect(amx.some((c) => c.name.startsWith(`${t}_160x272x1100_`))).toBe(true);
      expect(native.amx.slice(1)).toEqual([0, 0, 0]);
    } else {
      expect(native.amx).toEqual([0, 0, 0, 0]);
      expect(amx).toEqual([]);
    }
    expect(bad('sgemm_amx')).toEqual([]);
    // inf, NaN and values near FLT_MAX in the operands: finite exactly where float64 is (4 transposes)
    expect(cases.filter((c) => c.kind === 'sgemm_special').length).toBe(4);
    if (native.amx[0] === 1) expect(cases.filter((c) => c.kind === 'sgemm_special' && c.name.endsWith('_amx')).length).toBe(2);
    expect(bad('sgemm_special')).toEqual([]);
    expect(noWino.cases.filter((c) => c.kind === 'sgemm_special').length).toBe(4);
    expect(noWino.cases.filter((c) => c.kind === 'sgemm_special').filter((c) => !(c.err < 1e-4) || !c.same)).toEqual([]);
    expect(noWino.amx).toEqual([0, 0, 0, 0]);
    expect(noWino.cases.filter((c) => c.kind === 'sgemm_amx')).toEqual([]);
    expect(narrow.amx).toEqual([0, 0, 0, 0]);
  });

  it('conv2d forward (plain and fused bias+relu)', () => {
    expect(cases.filter((c) => c.kind.startsWith('conv_fwd')).length).toBe(2 * 34);
    expect(bad(/^conv_fwd/)).toEqual([]);
  });

  it('conv2d grad-input', () => {
    expect(cases.filter((c) => c.kind === 'conv_grad_input').length).toBe(34);
    expect(bad('conv_grad_input')).toEqual([]);
  });

  it('conv2d grad-weight and grad-bias', () => {
    expect(cases.filter((c) => c.kind === 'conv_grad_weight').length).toBe(34);
    expect(bad('conv_grad_weight')).toEqual([]);
    expect(bad('conv_grad_bias')).toEqual([]);
  });

  it('Winograd F(2x2, 3x3) for 3x3 stride-1 layers with enough channels (seed 64 -> 128 and LeNet 32 -> 64, not 16 -> 32), at both widths; the build without it passes every case on the wide path', () => {
    expect(wino).toEqual([1, 1, 0]);
    expect(narrow.wino).toEqual([1, 1, 0]);
    expect(noWino.wino).toEqual([0, 0, 0]);
    expect(noWino.declared).toBe(declared);
    expect(noWino.cases.length).toBe(declared);
    expect(noWino.cases.filter((c) => !(c.err < 1e-4) || !c.same).map((c) => `${c.kind} ${c.name} err=${c.err}`)).toEqual([]);
    for (const label of ['wino_odd_', 'wino_pad0_', 'wino_pad2_', 'wino_blocks_', 'wino_seed_'])
      for (const kind of ['conv_fwd', 'conv_fwd_bias_relu', 'conv_grad_input'])
        expect(cases.some((c) => c.kind === kind && c.name.startsWith(label))).toBe(true);
  });

  it('grad-weight by F(2x2, 3x3) for the same shapes (seed 64 -> 128 in 8 batch chunks, not LeNet), at both widths; the wide path without Winograd', () => {
    expect(winoDw).toEqual([1, 0, 8]);
    expect(narrow.winoDw).toEqual([1, 0, 3]);
    expect(noWino.winoDw).toEqual([0, 0, 8]);
    // the shapes with 32 or more tiles per batch chunk; the others stay on the wide path
    expect(winoDwCases).toEqual(['wino_blocks', 'wino_seed', 'wino_dw_span', 'wino_dw_odd', 'wino_dw_n1']);
    expect(narrow.winoDwCases).toEqual(['wino_blocks', 'wino_seed', 'wino_dw_span', 'wino_dw_odd', 'wino_dw_n1']);
    expect(noWino.winoDwCases).toEqual([]);
    for (const label of winoDwCases)
      expect(cases.some((c) => c.kind === 'conv_grad_weight' && c.name.startsWith(`${label}_`))).toBe(true);
  });

  it('grad-weight in batch chunks (two phases, partial sums in a shared block): 8 chunks, and 3 in the narrow build', () => {
    expect(dwChunks).toBe(8);
    expect(narrow.dwChunks).toBe(3);
    expect(cases.some((c) => c.kind === 'conv_grad_weight' && c.name.startsWith('batch_chunks_'))).toBe(true);
  });

  it('grad-weight chunks computed transposed (dW^T = col dy^T, col read in place): LeNet 32 -> 64, several K and o blocks, a partial channel tile, dilation with OW != W, groups, at both widths and without Winograd', () => {
    const dwt = ['wide_out', 'dwt_lenet', 'dwt_blocks', 'dwt_dil', 'dwt_g2'];
    for (const run of [native, narrow, noWino]) expect(dwt.filter((l) => !run.dwtCases.includes(l))).toEqual([]);
    for (const label of dwt)
      expect(cases.some((c) => c.kind === 'conv_grad_weight' && c.name.startsWith(`${label}_`))).toBe(true);
  });

  it('covers stride 2, dilation 2, groups 2, depthwise, 1 channel, 1x1, chunked im2col and the stride-1 wide and direct paths', () => {
    for (const label of ['stride2_', 'dilation2_', 'groups2_', 'depthwise_', 'one_channel_', 'pointwise_', 'chunked_', 'wide_dil_pad_g2_', 'direct_bigpad_'])
      expect(cases.some((c) => c.kind === 'conv_fwd' && c.name.startsWith(label))).toBe(true);
  });
});
