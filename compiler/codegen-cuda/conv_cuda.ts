/**
 * conv_cuda: the CUDA backend's convolution kernels (conv2d, conv2d_grad_input, conv2d_grad_weight
 * with fp32 operands) as implicit GEMMs on the TF32 tensor cores, cuDNN's default under PyTorch.
 * Consumes an IR conv node (and an optional fused unary epilogue) in the CUDA dialect's lowering
 * context, with the shared GEMM view of it (compiler/kernels/gemm.ts gemmParts: M, N, K, groups,
 * kernel arguments, the store with bias and epilogue); produces KernelSpecs, or null where it does
 * not apply (16-bit operands, more than 2^31 elements, a grid over CUDA's limits: gemm_cuda.ts's
 * 64x64 kernels run those, and cublaslt.ts's build report says so).
 *
 * The kernel: 256 threads (8 warps), output tiles of BM x BN (BM 64, 128 or 256, BN 32, 64 or 128, from M and N),
 * K in steps of 16 through two shared-memory stages filled by cp.async (4-byte copies, zero-filled where
 * the im2col window leaves the image or the tile leaves the matrix): one k step in flight while another
 * is multiplied, one barrier per k step. Past 48 KB (a 256-row tile with its k table) the block's shared
 * memory is dynamic (cuda_dialect.ts; host.ts raises the kernel's limit at create), at most
 * SMEM_BLOCK so that two blocks share an SM. Each operand tile is stored along the dimension the global loads run on: an operand
 * contiguous along its rows (im2col of x and dy along the output pixels) as [16][R + 8], one
 * contiguous along k (the weights, dy and x in the weight gradient) as [R][16 + 4]; the pads make
 * the fragment reads conflict-free (Lay). Address generation is implicit im2col with the per-row part
 * (pixel -> image base and window origin, or channel -> filter offset) computed once per thread
 * before the K loop and only the per-k part inside it: for an operand loaded along its rows (the
 * im2col of x or dy, whose k part is the same for every row) read from a k table built once per
 * block in shared memory where it fits, else one decomposition of k per step and element column.
 * Where the offset separates into row + k parts (the forward, the unit-stride input gradient) the
 * table holds (k's offset part, tap index) and each row a mask of its window's taps inside the
 * image, so a copy is a table read, a bit test and an add; else (offset, tap shifts) and the
 * window's bounds tested per copy.
 *  - mma variant: warps 4 (m) x 2 (n), each (BM/4) x (BN/2) as m16n8k8 TF32 mma.sync tiles; operands
 *    rounded to the nearest TF32 value by cvt.rn.tf32.f32 (ties to even, NaN kept; one instruction: convRound),
 *    fp32 accumulation.
 *  - k-mode operands whose runs of 4 k are contiguous and aligned (the forward's weights, the weight gradient's dy)
 *    are copied 16 bytes at a time (Side.vec4).
 *  - plain variant (MPSC_CUDA_PLAIN=1): the same tiles and pipeline, fp32 FFMA, a (BM/16) x (BN/16)
 *    register block per thread: fp32 accuracy.
 * Build-time A/B switches (environment of the build, part of the CUDA build key: runtime/cuda/session.ts
 * GENERATOR_ENV; the defaults are the above): MPSC_CONV_TAPS=0 (the bounds-tested table everywhere),
 * MPSC_CONV_FRAG=vec (float2 / float4 fragment reads from [16][R + 4] / [R][16 + 8] tiles: Lay),
 * MPSC_CONV_STAGES=2|3 (stagesOf), MPSC_CONV_ROUND=rna|add (convRound), MPSC_CONV_BM256=0|1 (convTiles),
 * MPSC_CONV_VEC16=0 (4-byte copies everywhere: Side.vec4), MPSC_CONV_GI_VEC16=0 (the unit-stride input gradient's dy
 * gather copied 4 bytes at a time; by default, where W % 4 == 0, in runs of 4 rows, 16-byte copies where a run is inside
 * the image and aligned: Side.rowVec4, rowRuns; the seed CNN's train step 0.903 -> 0.886 ms on the H200, 5 Dec).
 * A conv2d with `pool_out` (fuse.ts rule 10: the global average pool after it folded in) adds what each thread stores
 * per column (psum), then the block's column sums over its BM rows (lanes by warp butterflies, the row warps in
 * order through the stages' shared memory) go to the scratch region, and a second kernel adds each image's row tiles
 * in order over OH * OW (poolPartials); only where OH * OW is a multiple of BM (a tile in one image), one group, no
 * split: else null, and gemm_cuda.ts runs the conv and the shared pool kernel after it. A conv2d_grad_input with
 * `c_sums` (rule 9: the bias gradient of the conv before, a sum of dx over N, H, W) takes the same column sums of every
 * row tile, and a block per channel adds them in tile order (groups 1; else gemm_cuda.ts adds the sum_to kernel).
 * The weight gradient's reduction dimension (batch x output pixels) is long and its output small:
 * it is split along K at build time (gemm_cuda.ts splitK with these tiles): per-chunk partial sums
 * into the scratch region, then gemm_cuda.ts's reduction kernel adds them in chunk order (no
 * atomics: the result does not depend on launch order).
 */
import { isHalf, numel, type Graph, type Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elementwise, kernelSpec, label, shapeOf, writeF } from '../kernels/common.js';
import { convGeom, gemmParts } from '../kernels/gemm.js';
import { splitK, splitReduceKernel, type Split } from './gemm_cuda.js';
import { envChoice, envFlag } from '../env_switch.js';

const THREADS = 256, BK = 16;

/**
 * The shared tiles' padding and how the mma variant reads its fragments. By default one 4-byte read per
 * fragment register, k indices kk + tq and kk + tq + 4, k-mode rows of BK + 4 floats, row-mode rows of
 * R + 8 (conflict-free). `vec` (MPSC_CONV_FRAG=vec at build time, an A/B variant: on the H200 its loop
 * came out longer under cvt.rna and the seed CNN's weight gradient 24% slower, 4 Dec): lane (gq, tq) of
 * an m16n8k8 step h feeds reduction indices 8h + 2tq and 8h + 2tq + 1 (every lane of A and B the same
 * pair, so the product sums the same 8 indices), read as one float2 from a k-mode tile (row length
 * kp = BK + 8: the 4 rows of a half-warp's 8-byte reads fall on distinct banks); a row-mode A tile
 * stores the warp's rows interleaved (the mma's rows gq and gq + 8 side by side, and for two 16-row
 * tiles all four: one float4), its row length R + 4 putting the 4 k rows of a quarter-warp on distinct
 * banks; the copies write each row to its interleaved column (vecPerm), so the accumulators keep their
 * natural rows.
 */
interface Lay { vec: boolean; kp: number; rp: number; round: (x: string) => string; stages: number }
/**
 * How the mma variant rounds an fp32 operand to TF32 (MPSC_CONV_ROUND at build time; the tensor core reads a .tf32
 * register's top 19 bits and drops the low 13). SASS counts from sm_90a cubins of the seed CNN's conv kernels
 * (bench/NOTES.md "v8 seedconv"):
 *  - 'rn' (the default since 4 Dec evening): cvt.rn.tf32.f32 (mpsc_tf32_rn, sm_90's conversion instruction: one
 *    F2FP): the nearest TF32 value, ties to even (IEEE's default rounding, unbiased), NaN and infinities kept. It
 *    differs from cvt.rna only where the low 13 bits are exactly 0x1000 (a tie: 1 in 8192 random mantissas), by one
 *    TF32 ulp in the direction of the tie, the same half-ulp error. On the H200 the seed CNN's three big conv kernels
 *    went 829.4 -> 787.2 us against cvt.rna (graph step 0.970 -> 0.928 ms with the 16-byte copies).
 *  - 'rna': cvt.rna.tf32.f32 (mpsc_tf32), to nearest, ties away from zero (the default until 4 Dec evening); NaN and
 *    infinities kept. ptxas emits FSETP |x| >= inf, an add of 0x1000 predicated on a finite x and a mask of the low 13
 *    bits; in these kernels, where the value only feeds the mma, it drops the mask: 2 instructions. No integer form
 *    that keeps NaN is shorter (a guarded add, or a clamp + VIADDMNMX: 2 as well).
 *  - 'add': bits + 0x1000, 1 instruction, the same as rna for finite values, but the canonical NaN 0x7fffffff wraps
 *    to -0 and its negation 0xffffffff to +0 (a NaN loss would not propagate): an A/B variant only.
 */
export type ConvRound = 'rna' | 'add' | 'rn';
const ROUNDS: readonly ConvRound[] = ['rna', 'add', 'rn'];
export function convRound(): ConvRound {
  return envChoice('MPSC_CONV_ROUND', ROUNDS, 'rn');
}
/** the rounding `r` of the float expression `x` as a C++ expression (a .tf32 register's bits) */
export function roundExpr(r: ConvRound, x: string): string {
  return r === 'add' ? `(__float_as_uint(${x}) + 0x1000u)` : r === 'rn' ? `mpsc_tf32_rn(${x})` : `mpsc_tf32(${x})`;
}
/** a K loop (per block: a split GEMM's chunk) of at least this many reduction indices is long: the 256-row tiles and 2 stages */
const LONG_K = 256;
/**
 * Shared-memory stages of the cp.async pipeline: 2 for tiles of 128 x 128 or 256 x 64 over a long K loop (one k step in
 * flight while one is multiplied: less shared memory per block, so more of the SM's 256 KB left to the L1 cache the
 * 4-byte im2col copies, cp.async.ca, reread through; with the 256-row tiles the seed CNN's grad_input went 391 -> 334 us
 * on the H200, its 128x128 weight gradient 269 -> 258, 4 Dec), else 3 (two in flight: smaller tiles take less shared
 * memory, and the seed CNN's 64x32 split weight gradient went 24.5 -> 33.0 us with 2; a short K loop, like the first
 * conv's K = 27, is latency: both its k steps in flight at once). MPSC_CONV_STAGES=2 or 3 at build time (an A/B
 * variant): that number for every kernel.
 */
function stagesOf(BM: number, BN: number, Kloop: number): number {
  const v = envChoice('MPSC_CONV_STAGES', ['auto', '2', '3'], 'auto');
  if (v !== 'auto') return +v;
  return BM * BN >= 128 * 128 && Kloop >= LONG_K ? 2 : 3;
}
const layOf = (vec: boolean, BM: number, BN: number, Kloop: number): Lay => {
  const r = convRound();
  return { vec, round: (x) => roundExpr(r, x), stages: stagesOf(BM, BN, Kloop), ...(vec ? { kp: BK + 8, rp: 4 } : { kp: BK + 4, rp: 8 }) };
};
/** grid.y (row tiles) and grid.z (groups x chunks) limits */
const GRID_YZ = 65535;
/** bytes of shared memory a block may take: two blocks per SM (H200: 228 KB per SM, 1 KB of it reserved per block) */
const SMEM_BLOCK = 110 * 1024;

type Mode = 'row' | 'k';

/**
 * One GEMM operand's global reads. `mode`: which index the global loads run along (row: the
 * tile's rows are consecutive in memory; k: the reduction index is). `rowDecl` declares a row's
 * constants (suffix s) from its global index, `kDecl` a reduction index's, `elem` the copy's
 * predicate and element offset from both.
 */
interface Side {
  buf: string;
  mode: Mode;
  rowDecl: (s: string, row: string) => string;
  kDecl: (s: string, k: string) => string;
  elem: (rs: string, ks: string) => { pred: string; off: string };
  /**
   * A row-mode operand whose element offset separates into a row part plus a k part (the forward's
   * im2col, the unit-stride input gradient's gather): `rowBase` (from rowDecl's constants) +
   * `koff` (from kDecl's), `n` taps, `kShift` kDecl's part without the offset (for the mask), `tap`
   * k's tap index. With the k table, its copies then test the row's tap mask (bit q: tap q of the
   * window lies inside the image) instead of the window bounds.
   */
  taps?: { n: number; kShift: (s: string, k: string) => string; rowBase: (s: string) => string; koff: (s: string) => string; tap: (s: string) => string };
  /**
   * A row-mode operand with `taps` whose rows 4i .. 4i + 3 lie in one image row and read consecutive elements at every
   * tap (the unit-stride input gradient's dy where W % 4 == 0): with the k table ('taps') and MPSC_CONV_GI_VEC16=1 at
   * build time, a thread copies 4 rows at a reduction index, one 16-byte cp.async where the 4 taps are inside the image
   * and the run's offset is a multiple of 4 (decided per copy at run time: 3x3, padding 1, W % 4 == 0 gives it for the
   * middle column of taps, kw = 1, a third of them), one 16-byte zero fill where all 4 are outside, else 4 4-byte copies
   * (rowRuns). Default 0 (unmeasured on the H200: bench/NOTES.md "v10 gradin"). The function declares run row `i`'s
   * constants that `elem`'s predicate reads (suffix `${i}`) from row 0's.
   */
  rowVec4?: (i: number) => string;
  /**
   * A k-mode operand whose runs of 4 reduction indices from a multiple of 4 are contiguous in memory, 16-byte aligned,
   * and all valid or all not (the forward's weights with K % 4 == 0; the weight gradient's dy with OH * OW % 4 == 0):
   * its copies are 16-byte cp.async, a quarter of the copy instructions (MPSC_CONV_VEC16=0 at build time, an A/B variant:
   * 4-byte copies; on the H200 the seed CNN's conv2d 281.1 -> 259.2 us, its weight gradient 256.8 -> 237.5 with them).
   */
  vec4?: boolean;
}

/**
 * How a row-mode A operand's copies get their k part: 'none' (decomposed per copy), 'bounds' (the k
 * table's offset and tap shifts, the window's bounds tested per copy), 'taps' (the k table's offset
 * and tap index, tested against the row's tap mask: one shift and one add per copy).
 */
type Tab = 'none' | 'bounds' | 'taps';
/** the tap index of k >= K in a 'taps' table: a bit no row mask has (at most 31 taps) */
const NO_TAP = 31;

type Geom = ReturnType<typeof convGeom>;

/** the two operands of a conv op's implicit GEMM (the index maps of gemm.ts gemmOf, split into row and k parts) */
function sidesOf(op: string, c: Geom, M: number, N: number, K: number): { a: Side; b: Side } {
  const HW = c.H * c.W, OHW = c.OH * c.OW, KK = c.KH * c.KW;
  // the k part of a row-mode A (im2col of x or dy): k = (channel, kh, kw) -> valid, tap shifts (tapShift), channel offset + `extra`
  const tapShift = (s: string, k: string) =>
    `const uint ak${s} = ${k};\n` +
    `const bool akv${s} = ak${s} < ${K}u;\n` +
    `const uint aq${s} = ak${s} % ${KK}u;\n` +
    `const int adh${s} = int(aq${s} / ${c.KW}u) * ${c.DH}, adw${s} = int(aq${s} % ${c.KW}u) * ${c.DW};\n`;
  const tapK = (chan: number, extra: (s: string) => string) => (s: string, k: string) =>
    tapShift(s, k) + `const int ako${s} = int((ak${s} / ${KK}u) * ${chan}u)${extra(s)};\n`;
  // the row part's head of a row-mode A: row m = (image, pixel of a plane of `plane` pixels) -> valid, pixel
  const pixRow = (plane: number, s: string, row: string) =>
    `const uint am${s} = ${row};\nconst bool arv${s} = am${s} < ${M}u;\nconst uint ap${s} = am${s} % ${plane}u;\n`;
  if (op === 'conv2d') {
    // A = im2col(x) [pixel (nb, oh, ow)][tap (c, kh, kw)], B = w [out channel][tap]
    return {
      a: {
        buf: 'x', mode: 'row',
        rowDecl: (s, row) =>
          pixRow(OHW, s, row) +
          `const int aih${s} = int(ap${s} / ${c.OW}u) * ${c.SH} - ${c.PH}, aiw${s} = int(ap${s} % ${c.OW}u) * ${c.SW} - ${c.PW};\n` +
          `const int ab${s} = int((am${s} / ${OHW}u) * ${c.C * HW}u + g * ${c.CG * HW}u) + aih${s} * ${c.W} + aiw${s};\n`,
        kDecl: tapK(HW, (s) => ` + adh${s} * ${c.W} + adw${s}`),
        elem: (r, k) => ({
          pred: `arv${r} && akv${k} && uint(aih${r} + adh${k}) < ${c.H}u && uint(aiw${r} + adw${k}) < ${c.W}u`,
          off: `ab${r} + ako${k}`,
        }),
        taps: { n: KK, kShift: tapShift, rowBase: (s) => `ab${s}`, koff: (s) => `ako${s}`, tap: (s) => `aq${s}` },
      },
      b: {
        buf: 'w', mode: 'k',
        rowDecl: (s, row) => `const uint bn${s} = ${row};\nconst bool brv${s} = bn${s} < ${N}u;\nconst int bb${s} = int((g * ${c.OG}u + bn${s}) * ${K}u);\n`,
        kDecl: (s, k) => `const uint bk${s} = ${k};\n`,
        elem: (r, k) => ({ pred: `brv${r} && bk${k} < ${K}u`, off: `bb${r} + int(bk${k})` }),
        vec4: K % 4 === 0,
      },
    };
  }
  if (op === 'conv2d_grad_input') {
    // A = dy gathered [input pixel (nb, ih, iw)][tap (o, kh, kw)], B = w [in channel][tap]
    const unit = c.SH === 1 && c.SW === 1;
    return {
      a: {
        buf: 'dy', mode: 'row',
        rowDecl: (s, row) =>
          pixRow(HW, s, row) +
          `const int ath${s} = int(ap${s} / ${c.W}u) + ${c.PH}, atw${s} = int(ap${s} % ${c.W}u) + ${c.PW};\n` +
          `const int ab${s} = int((am${s} / ${HW}u) * ${c.O * OHW}u + g * ${c.OG * OHW}u);\n`,
        kDecl: tapK(OHW, () => ''),
        elem: (r, k) => {
          const th = `(ath${r} - adh${k})`, tw = `(atw${r} - adw${k})`;
          return unit
            ? { pred: `arv${r} && akv${k} && uint${th} < ${c.OH}u && uint${tw} < ${c.OW}u`, off: `ab${r} + ako${k} + ${th} * ${c.OW} + ${tw}` }
            : {
              pred: `arv${r} && akv${k} && ${th} >= 0 && ${tw} >= 0 && ${th} % ${c.SH} == 0 && ${tw} % ${c.SW} == 0 && ${th} / ${c.SH} < ${c.OH} && ${tw} / ${c.SW} < ${c.OW}`,
              off: `ab${r} + ako${k} + (${th} / ${c.SH}) * ${c.OW} + ${tw} / ${c.SW}`,
            };
        },
        // unit stride: ab + (ath - adh) * OW + atw - adw = (ab + ath * OW + atw) + (-adh * OW - adw)
        taps: unit ? { n: KK, kShift: tapShift, rowBase: (s) => `ab${s} + ath${s} * ${c.OW} + atw${s}`, koff: (s) => `ako${s} - adh${s} * ${c.OW} - adw${s}`, tap: (s) => `aq${s}` } : undefined,
        // rows m .. m + 3 (m % 4 == 0) share an image row where W % 4 == 0 (M = NB * H * W too: all past M or none), and
        // with unit stride their offsets at a tap are rowBase(m) + koff + 0 .. 3
        rowVec4: unit && c.W % 4 === 0 ? (i) => `const bool arv${i} = arv0;\nconst int ath${i} = ath0, atw${i} = atw0 + ${i};\n` : undefined,
      },
      b: {
        // w[(g * OG + o) * CG + n][kh][kw]
        buf: 'w', mode: 'k',
        rowDecl: (s, row) => `const uint bn${s} = ${row};\nconst bool brv${s} = bn${s} < ${N}u;\nconst int bb${s} = int(g * ${c.OG * c.CG * KK}u + bn${s} * ${KK}u);\n`,
        kDecl: (s, k) => `const uint bk${s} = ${k};\nconst int bko${s} = int((bk${s} / ${KK}u) * ${c.CG * KK}u + bk${s} % ${KK}u);\n`,
        elem: (r, k) => ({ pred: `brv${r} && bk${k} < ${K}u`, off: `bb${r} + bko${k}` }),
      },
    };
  }
  // conv2d_grad_weight: A = dy [out channel][output pixel (nb, oh, ow)], B = im2col(x) [pixel][tap (c, kh, kw)] seen as [tap][pixel]
  return {
    a: {
      buf: 'dy', mode: 'k',
      rowDecl: (s, row) => `const uint am${s} = ${row};\nconst bool arv${s} = am${s} < ${M}u;\nconst int ab${s} = int((g * ${c.OG}u + am${s}) * ${OHW}u);\n`,
      kDecl: (s, k) => `const uint ak${s} = ${k};\nconst int ako${s} = int((ak${s} / ${OHW}u) * ${c.O * OHW}u + ak${s} % ${OHW}u);\n`,
      elem: (r, k) => ({ pred: `arv${r} && ak${k} < ${K}u`, off: `ab${r} + ako${k}` }),
      vec4: OHW % 4 === 0,
    },
    b: {
      buf: 'x', mode: 'k',
      rowDecl: (s, row) =>
        `const uint bn${s} = ${row};\n` +
        `const bool brv${s} = bn${s} < ${N}u;\n` +
        `const uint bq${s} = bn${s} % ${KK}u;\n` +
        `const int bdh${s} = int(bq${s} / ${c.KW}u) * ${c.DH}, bdw${s} = int(bq${s} % ${c.KW}u) * ${c.DW};\n` +
        `const int bb${s} = int((g * ${c.CG}u + bn${s} / ${KK}u) * ${HW}u) + bdh${s} * ${c.W} + bdw${s};\n`,
      kDecl: (s, k) =>
        `const uint bk${s} = ${k};\n` +
        `const uint bp${s} = bk${s} % ${OHW}u;\n` +
        `const int bih${s} = int(bp${s} / ${c.OW}u) * ${c.SH} - ${c.PH}, biw${s} = int(bp${s} % ${c.OW}u) * ${c.SW} - ${c.PW};\n` +
        `const int bko${s} = int((bk${s} / ${OHW}u) * ${c.C * HW}u) + bih${s} * ${c.W} + biw${s};\n`,
      elem: (r, k) => ({
        pred: `brv${r} && bk${k} < ${K}u && uint(bih${k} + bdh${r}) < ${c.H}u && uint(biw${k} + bdw${r}) < ${c.W}u`,
        off: `bb${r} + bko${k}`,
      }),
    },
  };
}

/** floats of one operand's tile in one stage */
const tileFloats = (mode: Mode, R: number, L: Lay) => (mode === 'row' ? BK * (R + L.rp) : R * L.kp);
/** the tile element (row r, reduction index k) of an operand stored in `mode` */
const at = (mode: Mode, R: number, L: Lay, base: string, r: string, k: string) => (mode === 'row' ? `${base}[(${k}) * ${R + L.rp}u + (${r})]` : `${base}[(${r}) * ${L.kp}u + (${k})]`);

const indent = (s: string, pad: string) => s.split('\n').map((l) => (l ? pad + l : l)).join('\n');

/** H200: 132 SMs; a grid of fewer 128-row tiles than this leaves SMs idle */
const SMS = 132;

/**
 * Tile shape for an M x N GEMM with G groups: BN 128 where N fills it, 32 for N of at most 32 (a
 * 32-channel layer wastes no half tile), else 64; BM 256 for BN 64 over a long K (below), else 128 where M fills it and the grid of 128-row
 * tiles still covers every SM or the GEMM is split along K (`split`: the weight gradient, whose
 * chunks fill the GPU anyway); else 64, twice the blocks (e.g. MNIST's 14x14 layers).
 */
export function convTiles(M: number, N: number, G: number, split: boolean, K: number): { BM: number; BN: number } {
  const BN = N >= 128 ? 128 : N > 32 ? 64 : 32;
  // 256-row tiles where BN is 64, the GEMM is not split, its K loop is long and the grid of 256-row tiles still covers
  // every SM (the seed CNN's grad_input: its A copies, the costly ones, then feed a 64x32 warp tile; not its first conv,
  // K = 27, bound by its store, nor the MNIST CNN's 98-tile layers). MPSC_CONV_BM256 at build time (A/B variants):
  // 0, never (as before 4 Dec evening); 1, wherever BN is 64, the GEMM is not split and M >= 256 (whatever K and grid)
  const bm256 = envChoice('MPSC_CONV_BM256', ['auto', '0', '1'], 'auto');
  if (bm256 !== '0' && BN === 64 && !split && M >= 256 && (bm256 === '1' || (K >= LONG_K && ceilDiv(M, 256) * G >= SMS))) return { BM: 256, BN };
  return { BM: M >= 128 && (split || ceilDiv(M, 128) * ceilDiv(N, BN) * G >= SMS) ? 128 : 64, BN };
}

interface Shape { BM: number; BN: number; M: number; N: number; K: number; L: Lay }

/**
 * One operand's per-thread copies of a stage: `pre` (before the K loop: the rows' constants), `load`
 * (inside: the k constants and the cp.async of each element into stage `ls` at reduction offset `lk`).
 */
function copies(side: Side, R: number, L: Lay, tileBase: string, tag: string, tab: Tab, perm?: (m: string) => string): { pre: string; load: string } {
  const per = (R * BK) / THREADS;
  const cp = (dst: string, p: { pred: string; off: string }) =>
    `{\n  const bool ok = ${p.pred};\n` +
    `  const float* src = ok ? ${side.buf} + (${p.off}) : ${side.buf};\n` +
    `  mpsc_cp_async4(&${dst}, src, ok);\n}\n`;
  if (side.mode === 'row' && tab === 'taps' && side.rowVec4 && !perm && envFlag('MPSC_CONV_GI_VEC16', true) && envFlag('MPSC_CONV_VEC16', true)) return rowRuns(side, R, L, tileBase, tag);
  if (side.mode === 'row') {
    // thread t copies row t % R at reduction indices t / R + (256 / R) j
    const step = THREADS / R;
    // `perm`: the shared-memory column of the thread's row (vecPerm), else the row itself
    let pre = `const uint ${tag}r = tidx % ${R}u, ${tag}k = tidx / ${R}u;\n` + side.rowDecl('0', `${tileBase} + ${tag}r`) +
      (perm ? `const uint ${tag}rp = ${perm(`${tag}r`)};\n` : '');
    if (tab === 'taps') {
      // the row's tap mask (bit q: tap q of its window inside the image; 0 past M) and its part of the offset
      const t = side.taps!;
      pre += `uint ${tag}msk = 0u;\nfor (uint qq = 0u; qq < ${t.n}u; ++qq) {\n` + indent(t.kShift('q', 'qq'), '  ') +
        `  if (${side.elem('0', 'q').pred}) ${tag}msk |= 1u << qq;\n}\nconst int ${tag}rb = ${t.rowBase('0')};\n`;
    }
    let load = '';
    for (let j = 0; j < per; j++) {
      const dst = at('row', R, L, `${tag}s`, perm ? `${tag}rp` : `${tag}r`, `${tag}k + ${step * j}u`);
      if (tab === 'taps') {
        load += `{\n  const int2 te = ktab[lk + ${tag}k + ${step * j}u];\n` +
          indent(cp(dst, { pred: `((${tag}msk >> uint(te.y)) & 1u) != 0u`, off: `${tag}rb + te.x` }), '  ') + `}\n`;
        continue;
      }
      const kd = tab === 'bounds'
        ? `const int2 te = ktab[lk + ${tag}k + ${step * j}u];\nconst bool akv${j} = true;\nconst int ako${j} = te.x, adh${j} = te.y >> 16, adw${j} = te.y & 0xffff;\n`
        : side.kDecl(`${j}`, `lk + ${tag}k + ${step * j}u`);
      load += `{\n` + indent(kd + cp(dst, side.elem('0', `${j}`)), '  ') + `}\n`;
    }
    return { pre, load };
  }
  if (side.vec4 && R >= 64 && envFlag('MPSC_CONV_VEC16', true)) {
    // thread t copies reduction indices 4 (t % 4) .. + 3 of rows t / 4 + 64 i, one 16-byte copy each (Side.vec4; the
    // tile's rows of kp floats keep every run's destination 16-byte aligned)
    let pre = `const uint ${tag}k = 4u * (tidx % 4u), ${tag}r = tidx / 4u;\n`;
    for (let i = 0; i < R / 64; i++) pre += side.rowDecl(`${i}`, `${tileBase} + ${tag}r + ${64 * i}u`);
    let load = side.kDecl('k', `lk + ${tag}k`);
    for (let i = 0; i < R / 64; i++) {
      const p = side.elem(`${i}`, 'k');
      load += `{\n  const bool ok = ${p.pred};\n  const float* src = ok ? ${side.buf} + (${p.off}) : ${side.buf};\n` +
        `  mpsc_cp_async16f(&${at('k', R, L, `${tag}s`, `${tag}r + ${64 * i}u`, `${tag}k`)}, src, ok);\n}\n`;
    }
    return { pre, load };
  }
  // thread t copies reduction index t % 16 of rows t / 16 + 16 i (the two half-warps' rows share 8 banks with Lay's
  // 24-float rows: 2-way conflicted 4-byte writes, as with 20; rows 2 apart would be conflict-free, but cost the seed
  // CNN's 128x128 weight gradient a register spill at its 128-register bound)
  let pre = `const uint ${tag}k = tidx % ${BK}u, ${tag}r = tidx / ${BK}u;\n`;
  for (let i = 0; i < per; i++) pre += side.rowDecl(`${i}`, `${tileBase} + ${tag}r + ${(THREADS / BK) * i}u`);
  let load = side.kDecl('k', `lk + ${tag}k`);
  for (let i = 0; i < per; i++) load += cp(at('k', R, L, `${tag}s`, `${tag}r + ${(THREADS / BK) * i}u`, `${tag}k`), side.elem(`${i}`, 'k'));
  return { pre, load };
}

/**
 * The copies of a row-mode operand with `taps` and `rowVec4` in runs of 4 rows (unless MPSC_CONV_GI_VEC16=0 or MPSC_CONV_VEC16=0): thread t copies
 * rows 4 (t % (R / 4)) .. + 3 at reduction indices t / (R / 4) + (1024 / R) j. Each row's tap mask as copies() builds
 * it, their AND (all 4 inside) and OR (any); per copy from the k table's (offset, tap): one 16-byte cp.async where all
 * 4 are inside and the first row's offset is a multiple of 4 (the destination is: rows 4i of R + 8 floats, 16-byte
 * stage bases), one 16-byte zero fill where none is, else the 4 rows' 4-byte copies, each by its own mask bit (the
 * image's left and right edges, and the taps whose offset is not aligned: at 3x3 padding 1, kw = 0 and 2), in an order
 * rotated by lane / 8 so that each 4-byte copy instruction of a warp writes 32 distinct banks. A warp's
 * 32 runs share the tap, and the offset's alignment where OH * OW and OW are multiples of 4: the branch is uniform but
 * at the edges.
 */
function rowRuns(side: Side, R: number, L: Lay, tileBase: string, tag: string): { pre: string; load: string } {
  const t = side.taps!, G = R / 4, step = THREADS / G, n = (R * BK) / THREADS / 4, four = [0, 1, 2, 3];
  let pre = `const uint ${tag}r = 4u * (tidx % ${G}u), ${tag}k = tidx / ${G}u;\n`;
  pre += side.rowDecl('0', `${tileBase} + ${tag}r`);
  for (const i of four) pre += (i ? side.rowVec4!(i) : '') + `uint ${tag}msk${i} = 0u;\n`;
  pre += `for (uint qq = 0u; qq < ${t.n}u; ++qq) {\n` + indent(t.kShift('q', 'qq'), '  ') +
    four.map((i) => `  if (${side.elem(`${i}`, 'q').pred}) ${tag}msk${i} |= 1u << qq;\n`).join('') +
    `}\nconst uint ${tag}all = ${tag}msk0 & ${tag}msk1 & ${tag}msk2 & ${tag}msk3, ${tag}any = ${tag}msk0 | ${tag}msk1 | ${tag}msk2 | ${tag}msk3;\n` +
    `const int ${tag}rb = ${t.rowBase('0')};\n` +
    // the 4-byte copies' rows rotated by lane / 8: a warp's copy i writes rows 4 lane + (i + lane / 8) % 4, 32 distinct
    // banks (in row order lanes l and l + 8 would share one: 4-way conflicted shared-memory writes); mr i: that row's mask
    `const uint ${tag}rot = (tidx / 8u) % 4u;\n` +
    four.map((i) => `const uint ${tag}mr${i} = ` + [0, 1, 2].map((r) => `(${tag}rot + ${i}u) % 4u == ${r}u ? ${tag}msk${r} : `).join('') + `${tag}msk3;\n`).join('');
  let load = '';
  for (let j = 0; j < n; j++) {
    const dst = at('row', R, L, `${tag}s`, `${tag}r`, `${tag}k + ${step * j}u`);
    load += `{\n  const int2 te = ktab[lk + ${tag}k + ${step * j}u];\n  const uint q = uint(te.y);\n  const int o = ${tag}rb + te.x;\n  float* d = &${dst};\n` +
      `  if (((${tag}all >> q) & 1u) != 0u && (o & 3) == 0) mpsc_cp_async16f(d, ${side.buf} + o, true);\n` +
      `  else if (((${tag}any >> q) & 1u) == 0u) mpsc_cp_async16f(d, ${side.buf}, false);\n  else {\n` +
      four.map((i) => `    { const uint e = (${tag}rot + ${i}u) % 4u; const bool ok = ((${tag}mr${i} >> q) & 1u) != 0u; mpsc_cp_async4(d + e, ok ? ${side.buf} + (o + int(e)) : ${side.buf}, ok); }\n`).join('') +
      `  }\n}\n`;
  }
  return { pre, load };
}

/**
 * Where the warp's accumulator row of m16n8k8 tile i, half h (rows gq + 8h) lies in a row-mode A tile
 * read by vector (Lay): 16-row tiles paired, each pair's 32 rows interleaved as [gq][i % 2][h] (one float4
 * per lane and k); a lone 16-row tile as [gq][h] (one float2).
 */
const vecRow = (MI: number, i: string, h: string) =>
  MI >= 2 ? `((${i}) / 2u) * 32u + 4u * gq + 2u * ((${i}) % 2u) + (${h})` : `2u * gq + (${h})`;
/**
 * Where the mma variant's copies put tile row m of a row-mode A read by vector (Lay): the inverse of vecRow
 * within each warp's rows (32-row groups for two 16-row tiles, 16 for one), so that an mma row keeps its
 * natural tile row: the accumulators are stored as without the interleave (consecutive lanes, consecutive
 * rows: whole 32-byte sectors of the NCHW output and of a fused mask).
 */
const vecPerm = (MI: number, m: string) =>
  MI >= 2 ? `((${m}) & ~31u) + 4u * ((${m}) & 7u) + 2u * (((${m}) >> 4u) & 1u) + (((${m}) >> 3u) & 1u)` : `((${m}) & ~15u) + 2u * ((${m}) & 7u) + (((${m}) >> 3u) & 1u)`;

/** the tensor-core product of one stage: 2 k-steps of 8, MI x NI m16n8k8 TF32 tiles per warp */
function mmaStage(a: Side, b: Side, s: Shape): string {
  const MI = s.BM / 64, NI = s.BN / 16;
  const A = (r: string, k: string) => at(a.mode, s.BM, s.L, 'as', r, k), B = (r: string, k: string) => at(b.mode, s.BN, s.L, 'bs', r, k);
  const mmas = `  #pragma unroll\n  for (uint i = 0u; i < ${MI}u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < ${NI}u; ++j) mpsc_mma16x8(cacc[i][j], af[i], bf[j]);\n}\n`;
  if (!s.L.vec) {
    return (
      `#pragma unroll\nfor (uint kk = 0u; kk < ${BK}u; kk += 8u) {\n` +
      `  uint af[${MI}][4], bf[${NI}][2];\n` +
      `  #pragma unroll\n  for (uint i = 0u; i < ${MI}u; ++i) {\n    const uint r = wm + 16u * i + gq;\n` +
      `    af[i][0] = ${s.L.round(A('r', 'kk + tq'))};\n    af[i][1] = ${s.L.round(A('r + 8u', 'kk + tq'))};\n` +
      `    af[i][2] = ${s.L.round(A('r', 'kk + tq + 4u'))};\n    af[i][3] = ${s.L.round(A('r + 8u', 'kk + tq + 4u'))};\n  }\n` +
      `  #pragma unroll\n  for (uint j = 0u; j < ${NI}u; ++j) {\n    const uint n = wn + 8u * j + gq;\n` +
      `    bf[j][0] = ${s.L.round(B('n', 'kk + tq'))};\n    bf[j][1] = ${s.L.round(B('n', 'kk + tq + 4u'))};\n  }\n` +
      mmas
    );
  }
  // lane (gq, tq) feeds k = kk + 2tq + c as fragment column tq + 4c (c = 0, 1): a[.][2c + h] (h: row gq + 8h), b[.][c]
  const R = s.L.round;
  const f2 = (e: string) => `*reinterpret_cast<const float2*>(&${e})`, f4 = (e: string) => `*reinterpret_cast<const float4*>(&${e})`;
  let aLoads: string;
  if (a.mode === 'row') {
    aLoads = MI >= 2
      ? `  #pragma unroll\n  for (uint p = 0u; p < ${MI / 2}u; ++p)\n    #pragma unroll\n    for (uint c = 0u; c < 2u; ++c) {\n` +
        `      const float4 v = ${f4(A(`wm + ${vecRow(MI, '2u * p', '0u')}`, 'kk + 2u * tq + c'))};\n` +
        `      af[2u * p][2u * c] = ${R('v.x')};\n      af[2u * p][2u * c + 1u] = ${R('v.y')};\n` +
        `      af[2u * p + 1u][2u * c] = ${R('v.z')};\n      af[2u * p + 1u][2u * c + 1u] = ${R('v.w')};\n    }\n`
      : `  #pragma unroll\n  for (uint c = 0u; c < 2u; ++c) {\n` +
        `    const float2 v = ${f2(A(`wm + ${vecRow(MI, '0u', '0u')}`, 'kk + 2u * tq + c'))};\n` +
        `    af[0][2u * c] = ${R('v.x')};\n    af[0][2u * c + 1u] = ${R('v.y')};\n  }\n`;
  } else {
    aLoads = `  #pragma unroll\n  for (uint i = 0u; i < ${MI}u; ++i)\n    #pragma unroll\n    for (uint h = 0u; h < 2u; ++h) {\n` +
      `      const float2 v = ${f2(A('wm + 16u * i + gq + 8u * h', 'kk + 2u * tq'))};\n` +
      `      af[i][h] = ${R('v.x')};\n      af[i][2u + h] = ${R('v.y')};\n    }\n`;
  }
  return (
    `#pragma unroll\nfor (uint kk = 0u; kk < ${BK}u; kk += 8u) {\n` +
    `  uint af[${MI}][4], bf[${NI}][2];\n` + aLoads +
    `  #pragma unroll\n  for (uint j = 0u; j < ${NI}u; ++j) {\n` +
    `    const float2 v = ${f2(B('wn + 8u * j + gq', 'kk + 2u * tq'))};\n` +
    `    bf[j][0] = ${R('v.x')};\n    bf[j][1] = ${R('v.y')};\n  }\n` +
    mmas
  );
}

/** the fp32 FFMA product of one stage: a (BM/16) x (BN/16) register block per thread */
function plainStage(a: Side, b: Side, s: Shape): string {
  const RI = s.BM / 16, RJ = s.BN / 16;
  return (
    `#pragma unroll\nfor (uint kk = 0u; kk < ${BK}u; ++kk) {\n  float av[${RI}], bv[${RJ}];\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < ${RI}u; ++i) av[i] = ${at(a.mode, s.BM, s.L, 'as', 'ty + 16u * i', 'kk')};\n` +
    `  #pragma unroll\n  for (uint j = 0u; j < ${RJ}u; ++j) bv[j] = ${at(b.mode, s.BN, s.L, 'bs', 'tx + 16u * j', 'kk')};\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < ${RI}u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < ${RJ}u; ++j) cacc[i][j] = fmaf(av[i], bv[j], cacc[i][j]);\n}\n`
  );
}

/**
 * The k table of a row-mode A operand (its reduction index's im2col part, the same for every row):
 * floats of shared memory it takes before the stages, and the loop filling it once per block. Entry
 * k (an int2): 'bounds': (offset, dh << 16 | dw), k >= K getting dh = 0x4000, outside every image
 * the table is used for (lowerConvCuda's test), so the copy's bounds test fails without a separate
 * k < K test; 'taps': (the k part of the offset, tap index), k >= K getting NO_TAP.
 */
const tableFloats = (s: Shape) => 2 * ceilDiv(s.K, BK) * BK;
function tableFill(a: Side, s: Shape, tab: Tab): string {
  const [x, y] = tab === 'taps' ? [a.taps!.koff('t'), `int(${a.taps!.tap('t')})`] : ['akot', '(adht << 16) | adwt'];
  const [x0, y0] = tab === 'taps' ? ['0', `${NO_TAP}`] : ['0', '0x40000000'];
  return (
    `// k table: A's reduction-index part of the im2col address (${tab === 'taps' ? 'offset, tap' : 'offset, dh << 16 | dw'}), once per block\n` +
    `int2* ktab = reinterpret_cast<int2*>(tg);\n` +
    `for (uint e = tidx; e < ${ceilDiv(s.K, BK) * BK}u; e += ${THREADS}u) {\n` +
    indent(a.kDecl('t', 'e'), '  ') +
    `  ktab[e].x = akvt ? ${x} : ${x0};\n  ktab[e].y = akvt ? ${y} : ${y0};\n}\n__syncthreads();\n`
  );
}

/**
 * The pooled output of a conv2d with `pool_out` (fuse.ts rule 10), after the stores: each thread's stored values `yv`
 * were added per column into psum (its rows in store order); the rows' threads of a column are added by butterflies
 * within the warp, the warps of a column in row order through shared memory (the stages are done), and the block's
 * column sums go to mpsc_scratch[row tile][column]: every tile's BM rows lie in one image (OH * OW % BM == 0).
 */
function poolPartials(s: Shape, tf32: boolean): string {
  // TF32: lane (gq, tq) holds rows gq + 8h of 16-row tiles, columns 2 tq + c of 8-column ones; the 4 warps sg % 4 share columns.
  // FFMA: thread (ty, tx) holds rows ty + 16 i, columns tx + 16 j; a warp is ty = 2 sg, 2 sg + 1; all 8 warps share columns
  const [cols, xors, writer, slot, col, rowsW] = tf32
    ? [`${s.BN / 16}u][2u`, [4, 8, 16], 'gq == 0u', 'sg % 4u', 'wn + 8u * j + 2u * tq + c', 4]
    : [`${s.BN / 16}u][1u`, [16], 'lane < 16u', 'sg', 'tx + 16u * j + c', 8];
  const [J, C2] = cols.split('][');
  return (
    `  // the pooled output's partial sums: this block's ${s.BM} rows (one image's) per column, the thread's rows (psum), the
` +
    `  // column's lanes (butterflies), then the ${rowsW} warps of the column in row order; into mpsc_scratch[row tile][column]
` +
    `  __syncthreads();
` +
    `  #pragma unroll
  for (uint j = 0u; j < ${J}; ++j)
    #pragma unroll
    for (uint c = 0u; c < ${C2}; ++c) {
` +
    `      float v = psum[j][c];
` + xors.map((o) => `      v += __shfl_xor_sync(0xffffffffu, v, ${o});
`).join('') +
    `      if (${writer}) tg[(${slot}) * ${s.BN}u + ${col}] = v;
    }
  __syncthreads();
` +
    `  if (tidx < ${s.BN}u && n0 + tidx < ${s.N}u) {
    float v = tg[tidx];
` +
    `    for (uint w = 1u; w < ${rowsW}u; ++w) v += tg[w * ${s.BN}u + tidx];
` +
    `    mpsc_scratch[tgid.y * ${s.N}u + n0 + tidx] = v;
  }
`
  );
}

/** one kernel body: the pipeline around `stage` (tensor cores or FFMA), then the stores; `tab`: A's k part from the k table; `pool`: the store defines yv, added into the pooled partials (poolPartials) */
function convBody(a: Side, b: Side, s: Shape, sp: Split | null, store: string, tf32: boolean, what: string, tab: Tab, pool = false): string {
  const aF = tileFloats(a.mode, s.BM, s.L), bF = tileFloats(b.mode, s.BN, s.L), stage = aF + bF;
  const T = tab !== 'none' ? tableFloats(s) : 0;
  const ca = copies(a, s.BM, s.L, 'm0', 'a', tab, tf32 && s.L.vec && a.mode === 'row' ? (m) => vecPerm(s.BM / 64, m) : undefined), cb = copies(b, s.BN, s.L, 'n0', 'b', 'none');
  const MI = s.BM / 64, NI = s.BN / 16, RI = s.BM / 16, RJ = s.BN / 16;
  const S = sp?.S ?? 1;
  const split = sp ? `  const uint kbeg = (tgid.z % ${S}u) * ${sp.Kc}u, kend = min(${s.K}u, kbeg + ${sp.Kc}u);\n` : `  const uint kbeg = 0u, kend = ${s.K}u;\n`;
  const psumAdd = pool ? `    psum[j][${tf32 ? 'q & 1u' : '0u'}] += yv;\n` : '';
  const out = (mi: string, ni: string, acc: string) =>
    `{\n  const uint mi = ${mi}, ni = ${ni};\n  if (mi < ${s.M}u && ni < ${s.N}u) {\n    const float acc = ${acc};\n` +
    (sp ? `    mpsc_scratch[(tgid.z * ${s.M}u + mi) * ${s.N}u + ni] = acc;\n` : indent(store, '  ') + '\n' + psumAdd) + `  }\n}\n`;
  const psum = pool ? `  float psum[${tf32 ? NI : RJ}][${tf32 ? 2 : 1}] = {};\n` : '';
  const acc = (tf32
    ? `  const uint gq = lane / 4u, tq = lane % 4u;\n  const uint wm = (sg % 4u) * ${s.BM / 4}u, wn = (sg / 4u) * ${s.BN / 2}u;\n` +
      `  float cacc[${MI}][${NI}][4];\n  #pragma unroll\n  for (uint i = 0u; i < ${MI}u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < ${NI}u; ++j)\n      #pragma unroll\n      for (uint q = 0u; q < 4u; ++q) cacc[i][j][q] = 0.0f;\n`
    : `  const uint tx = tidx % 16u, ty = tidx / 16u;\n  float cacc[${RI}][${RJ}];\n  #pragma unroll\n  for (uint i = 0u; i < ${RI}u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < ${RJ}u; ++j) cacc[i][j] = 0.0f;\n`) + psum;
  const stores = tf32
    ? `  #pragma unroll\n  for (uint i = 0u; i < ${MI}u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < ${NI}u; ++j)\n      #pragma unroll\n      for (uint q = 0u; q < 4u; ++q)\n` +
      indent(out('m0 + wm + 16u * i + gq + 8u * (q >= 2u ? 1u : 0u)', 'n0 + wn + 8u * j + 2u * tq + (q & 1u)', 'cacc[i][j][q]'), '        ')
    : `  #pragma unroll\n  for (uint i = 0u; i < ${RI}u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < ${RJ}u; ++j)\n` +
      indent(out('m0 + ty + 16u * i', 'n0 + tx + 16u * j', 'cacc[i][j]'), '      ');
  return (
    `  // ${what}\n` +
    `  // C[${s.M} x ${s.N}] = A[${s.M} x ${s.K}] * B[${s.K} x ${s.N}] per group: ${s.BM}x${s.BN} tile per block of 256 threads, k steps of ${BK} in ${s.L.stages} cp.async stages;\n` +
    `  // A tile ${a.mode === 'row' ? `[${BK}][${s.BM + s.L.rp}] (loads along m)` : `[${s.BM}][${s.L.kp}] (loads along k)`}, B tile ${b.mode === 'row' ? `[${BK}][${s.BN + s.L.rp}] (loads along n)` : `[${s.BN}][${s.L.kp}] (loads along k)`}${s.L.vec ? ', fragments read as float2 / float4' : ''}\n` +
    (sp ? `  // split K: block z = group * ${S} + chunk; chunk c sums k in [c * ${sp.Kc}, (c + 1) * ${sp.Kc})\n` : '') +
    `  const uint g = tgid.z / ${S}u;\n` + split +
    `  const uint m0 = tgid.y * ${s.BM}u, n0 = tgid.x * ${s.BN}u;\n` +
    indent(ca.pre + cb.pre, '  ') + acc +
    `  const uint nk = (kend - kbeg + ${BK - 1}u) / ${BK}u;\n` +
    (tab !== 'none' ? indent(tableFill(a, s, tab), '  ') : '') +
    // the copies of k step `tl` into stage `sl` (its group committed by every thread, with or without copies)
    `  const auto fill = [&](uint tl, uint sl) {\n` +
    `    if (tl < nk) {\n      // stage sl <- k in [kbeg + 16 tl, +16)\n      const uint lk = kbeg + tl * ${BK}u;\n` +
    `      float* as = tg + ${T ? `${T}u + ` : ''}sl * ${stage}u;\n      float* bs = as + ${aF}u;\n` +
    indent(ca.load + cb.load, '      ') +
    `    }\n    mpsc_cp_async_commit();\n  };\n` +
    `  // ${s.L.stages} stages: k steps 0..${s.L.stages - 2} in flight before the loop; step t waits for its own group (${s.L.stages - 2} younger may\n` +
    `  // still be in flight), one barrier (its copies visible to all; every warp done with step t - 1, whose stage the\n` +
    `  // copies of step t + ${s.L.stages - 1} then reuse), then the product of step t while those copies run\n` +
    `  #pragma unroll\n  for (uint sl = 0u; sl < ${s.L.stages - 1}u; ++sl) fill(sl, sl);\n` +
    `  uint rs = 0u, ws = ${s.L.stages - 1}u;\n` +
    `  for (uint t = 0u; t < nk; ++t) {\n` +
    `    mpsc_cp_async_wait<${s.L.stages - 2}>();\n    __syncthreads();\n` +
    `    fill(t + ${s.L.stages - 1}u, ws);\n` +
    `    {\n      const float* as = tg + ${T ? `${T}u + ` : ''}rs * ${stage}u;\n      const float* bs = as + ${aF}u;\n` +
    indent(tf32 ? mmaStage(a, b, s) : plainStage(a, b, s), '      ') +
    `    }\n    rs = rs == ${s.L.stages - 1}u ? 0u : rs + 1u;\n    ws = ws == ${s.L.stages - 1}u ? 0u : ws + 1u;\n  }\n` +
    stores + (pool ? poolPartials(s, tf32) : '')
  );
}

/** the conv ops this file lowers */
export const CONV_OPS: ReadonlySet<string> = new Set(['conv2d', 'conv2d_grad_input', 'conv2d_grad_weight']);

/** why a conv node stays on gemm_cuda.ts's 64x64 kernels, or null when conv_cuda.ts lowers it */
export function convFallbackReason(g: Graph, n: Node): string | null {
  if (!CONV_OPS.has(n.op)) return 'not a convolution';
  if (isHalf(g.values[n.inputs[0]].dtype) || isHalf(g.values[n.inputs[1]].dtype)) return '16-bit operands (the 64x64 kernel reads them widened)';
  const sizes = [...n.inputs.filter((i) => i >= 0).map((i) => numel(shapeOf(g, i))), ...n.outputs.map((o) => numel(shapeOf(g, o)))];
  if (Math.max(...sizes) >= 2 ** 31) return 'a tensor of 2^31 elements or more (32-bit offsets)';
  return null;
}

/** one line for `mpsc build`: which conv kernel a node gets */
export function convKernelNote(g: Graph, n: Node): string {
  const why = convFallbackReason(g, n);
  return why ? `gemm_cuda.ts 64x64 kernel (${why})` : 'TF32 implicit-GEMM conv kernel (conv_cuda.ts)';
}

/** The conv node's kernels (the GEMM, and for a split K its reduction), or null where this file does not apply (convFallbackReason). */
export function lowerConvCuda(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null {
  if (convFallbackReason(g, n)) return null;
  const parts = gemmParts(ctx, g, n, epilogue);
  if (!parts) return null;
  const { gm, args, what } = parts;
  const xs = n.op === 'conv2d' ? shapeOf(g, n.inputs[0]) : n.op === 'conv2d_grad_input' ? (n.attrs.x_shape as number[]) : shapeOf(g, n.inputs[1]);
  const ws = n.op === 'conv2d_grad_weight' ? (n.attrs.w_shape as number[]) : shapeOf(g, n.inputs[1]);
  const c = convGeom(n, xs, ws);
  const { BM, BN } = convTiles(gm.M, gm.N, gm.G, n.op === 'conv2d_grad_weight', gm.K);
  const sp = n.op === 'conv2d_grad_weight' ? splitK(gm.M, gm.N, gm.K, gm.G, BM, BN) : null;
  // a pooled output (fuse.ts rule 10) in the store where every row tile lies in one image of one group; else
  // gemm_cuda.ts runs this kernel and the pool after it (null here)
  const pool = n.attrs.pool_out === true;
  if (pool && (n.op !== 'conv2d' || sp || gm.G !== 1 || (c.OH * c.OW) % BM !== 0)) return null;
  // an input gradient's channel sums (fuse.ts rule 9: the bias gradient of the conv before) from the same column sums
  const sums = n.attrs.c_sums === true;
  if (sums && (n.op !== 'conv2d_grad_input' || sp || gm.G !== 1)) return null;
  const store = pool || sums ? `${gm.pre}      const float yv = ${parts.value};\n      ${writeF(ctx.d, g, parts.outId, gm.out, gm.idx, 'yv')}` : parts.store;
  const tiles: [number, number, number] = [ceilDiv(gm.N, BN), ceilDiv(gm.M, BM), gm.G * (sp?.S ?? 1)];
  if (tiles[1] > GRID_YZ || tiles[2] > GRID_YZ) return null;
  const { a, b } = sidesOf(n.op, c, gm.M, gm.N, gm.K);
  // 4-byte fragment reads by default; MPSC_CONV_FRAG=vec at build time: the vector reads (Lay; they need B loaded along k, as every conv's is)
  const s: Shape = { BM, BN, M: gm.M, N: gm.N, K: gm.K, L: layOf(b.mode === 'k' && envChoice('MPSC_CONV_FRAG', ['scalar', 'vec'], 'scalar') === 'vec', BM, BN, sp?.Kc ?? gm.K) };
  // the k table where it fits next to the stages in SMEM_BLOCK; 'bounds' where its dh = 0x4000 marker lies outside the images,
  // 'taps' where the offset separates and the window has at most 31 taps (MPSC_CONV_TAPS=0 at build time: 'bounds', for A/B)
  const fits = a.mode === 'row' && !sp && (tableFloats(s) + s.L.stages * (tileFloats(a.mode, BM, s.L) + tileFloats(b.mode, BN, s.L))) * 4 <= SMEM_BLOCK;
  const boundsOk = Math.max(c.H, c.W, c.OH, c.OW, c.PH, c.PW) < 8192 && (c.KH - 1) * c.DH < 8192 && (c.KW - 1) * c.DW < 8192;
  const tapsOk = a.taps !== undefined && a.taps.n <= NO_TAP && envFlag('MPSC_CONV_TAPS', true);
  const tab: Tab = !fits ? 'none' : tapsOk ? 'taps' : boundsOk ? 'bounds' : 'none';
  const tgmem = ((tab !== 'none' ? tableFloats(s) : 0) + s.L.stages * (tileFloats(a.mode, BM, s.L) + tileFloats(b.mode, BN, s.L))) * 4;
  // the pooled partials reuse the stages' shared memory: 8 row slots of BN columns (the FFMA variant's warps)
  if ((pool || sums) && 8 * BN * 4 > tgmem) return null;
  const name = ctx.next();
  const lbl = label(g, n) + what;
  const gemm: KernelSpec = {
    name, node: n.id, op: n.op, label: lbl + ` [conv_cuda.ts ${BM}x${BN} implicit GEMM${sp ? `, split K: ${sp.S} chunks of ${sp.Kc}, partial sums` : ''}]`, args,
    groups: tiles, tgsize: [THREADS, 1, 1], tgmem, sync: true,
    body: convBody(a, b, s, sp, store, false, `${n.op}: fp32 FFMA, ${BM / 16}x${BN / 16} register block per thread`, tab, pool || sums),
    // two blocks per SM (the tiles and SMEM_BLOCK assume it): at most 128 registers (ptxas fits the 3-stage 128x128 split-K
    // weight gradient, 148 unbounded, in 128 without spills)
    mma: { name: `${name}_mma`, tgsize: [THREADS, 1, 1], tgmem, sync: true, minBlocks: 2, body: convBody(a, b, s, sp, store, true, `${n.op}: TF32 mma.sync m16n8k8 (${{ rna: 'cvt.rna', rn: 'cvt.rn', add: 'half-ulp-add' }[convRound()]} operands, fp32 accumulate), 8 warps of ${BM / 4}x${BN / 2}`, tab, pool || sums) },
  };
  if (pool) {
    // the row tiles' column sums in the scratch region, then the pooled means (a thread per (image, channel): its
    // OH * OW / BM tiles in order)
    const TPI = (c.OH * c.OW) / BM, bytes = (gm.M / BM) * gm.N * 4, pooled = n.outputs[n.outputs.length - 1], u = (k: number) => ctx.d.u(k);
    gemm.label += ` + pooled output (column sums of each ${BM}-row tile)`;
    gemm.scratch = bytes;
    const finish = elementwise(ctx, g, n, [argOf(g, 'pooled', pooled, 'w')], c.NB * gm.N,
      `  // pooled[nb, c] (i = nb * ${gm.N} + c): the ${TPI} row tiles of image nb, column c, in tile order, over ${c.OH * c.OW}\n` +
      `  const uint nb = i / ${u(gm.N)}, c = i % ${u(gm.N)};\n  float s = 0.0f;\n` +
      `  for (uint t = 0u; t < ${u(TPI)}; ++t) s += mpsc_scratch[(nb * ${u(TPI)} + t) * ${u(gm.N)} + c];\n` +
      `  ${writeF(ctx.d, g, pooled, 'pooled', 'i', `s / ${ctx.d.f(c.OH * c.OW)}`)}\n`, ' [pooled output: sum of the row tiles]');
    return [gemm, { ...finish, scratch: bytes }];
  }
  if (sums) {
    // the row tiles' column sums in the scratch region, then a block per channel adding them: thread j the tiles j,
    // j + 256, ... in order, the warps' butterflies, the 8 warps in order
    const TM = ceilDiv(gm.M, BM), bytes = TM * gm.N * 4, out = n.outputs[n.outputs.length - 1], d = ctx.d, u = (k: number) => d.u(k);
    gemm.label += ` + channel sums (column sums of each ${BM}-row tile)`;
    gemm.scratch = bytes;
    const finish = kernelSpec(ctx, g, n, [argOf(g, 'y', out, 'w')], {
      groups: [gm.N, 1, 1], tgsize: [THREADS, 1, 1], tgmem: (THREADS / 32) * 4, sync: true,
      body:
        `  // channel c = block: the ${TM} row tiles' sums of column c, thread j tiles j, j + ${THREADS}, ... in order; the warps' butterflies, the warps in order\n` +
        `  const uint c = tgid.x;\n  float s = 0.0f;\n  for (uint t = tidx; t < ${u(TM)}; t += ${u(THREADS)}) s += mpsc_scratch[t * ${u(gm.N)} + c];\n` +
        `  s = ${d.simdSum('s')};\n  if (lane == 0u) tg[sg] = s;\n  ${d.barrier()}\n` +
        `  if (tidx == 0u) {\n    float r = 0.0f;\n    for (uint w = 0u; w < ${u(THREADS / 32)}; ++w) r += tg[w];\n    ${writeF(d, g, out, 'y', 'c', 'r')}\n  }\n`,
    }, ' [channel sums: the row tiles in order, a block per channel]');
    return [gemm, { ...finish, scratch: bytes }];
  }
  if (!sp) return [gemm];
  gemm.scratch = sp.S * gm.G * gm.M * gm.N * 4;
  return [gemm, splitReduceKernel(ctx, g, n, parts, sp, lbl)];
}
