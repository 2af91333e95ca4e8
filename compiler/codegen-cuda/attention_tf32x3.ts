/**
 * attention_tf32x3: the CUDA backend's fp32 flash attention on the tensor cores as 3xTF32 (split
 * precision: each fp32 operand x = hi + lo, both TF32, a*b ~ ah*bh + ah*bl + al*bh on three
 * `mma.sync.m16n8k8` TF32 with fp32 accumulation; mma.ts mpsc_mma_tf32x3 and the fragment layouts),
 * so the products keep about 21 bits of each operand: fp32-level accuracy (issue 14 allows split
 * precision for matmuls, not plain TF32). For `attention` / `attention_grad` nodes and their packed
 * forms attention_qkv / attention_qkv_grad whose operands are all fp32, with a head width in
 * TF32X3_HEAD_DIMS and fp32 lse (tf32x3Refusal); MPSC_CUDA_ATTN_TF32X3=0 (at generation time) sends
 * them to the CUDA-core kernels of attention_f32.ts instead, for A/B. Consumes those nodes (CUDA
 * dialect context); produces KernelSpecs with the IR semantics and saved tensors (o, lse) of the
 * shared kernel, through attention_f32.ts flashKernels (the same Delta kernel, grids and arguments).
 * Called by attention_cuda.ts lowerAttentionCuda, which decides which nodes come here.
 *
 * Same structure as the other flash paths (FlashAttention-2: online softmax over streamed tiles in the
 * forward; backward = Delta + a dK/dV kernel per key tile + a dQ kernel per query tile, no atomics):
 * 128 threads = 4 warps per block, a warp owns 16 rows of the block's 64 (queries; keys in the dK/dV
 * kernel), the streamed tiles have BC rows (32 in the forward, 16 in the backward). By default
 * (x3Async) the streamed tiles are double-buffered: the next tile's 16-byte cp.async copies (and, in the
 * dK/dV kernel, 4-byte ones of its lse / Delta rows) are issued after this step's barrier and land
 * while it computes, one barrier per step; at D = 64 that is 51 KiB per block in dynamic shared memory
 * (4 blocks per SM; the packed layout's dK/dV kernel bounded to 128 registers for it, KV_MIN_BLOCKS). With
 * MPSC_CUDA_ATTN_X3_ASYNC=none (A/B) each step loads its tiles by float4 between two barriers into
 * static tiles (34.8 / 43.6 / 43.5 KB). Tiles sit in shared memory as fp32, row-major with a pitch of D + 4
 * floats, 4 or 20 mod 32 banks, so every fragment read is free of bank conflicts: rows g (0..7) at
 * column t (0..3) fall on banks 4g + t or 20g + t mod 32, and rows 2t, 2t + 1 at column g on 8t + g
 * (+ 4 or 20), 32 distinct banks each; operands are split into hi / lo as the fragments are read (hi by
 * round to nearest, ties away, as cvt.rna, lo = x - hi: mma.ts mpsc_split_tf32_hl). The first product of a
 * step (S = Q K^T; S^T = K Q^T and dP^T = V dO^T; S and dP = dO V^T) gives C fragments in registers;
 * softmax / dS work on them in fp32; they are the A fragments of the second product (O += P V;
 * dV += P^T dO, dK += dS^T Q; dQ += dS K) by mma.ts's permuted k order (k slot t = column 2t, slot
 * t + 4 = column 2t + 1; B rows 2t, 2t + 1), so no shuffle or shared-memory pass sits between them.
 * Softmax statistics (running max, sums), lse, Delta and every accumulator are fp32; softmax in base 2.
 * The dK/dV kernel's score products accumulate even and odd k-steps apart (more independent mma
 * chains; see `scores`; MPSC_CUDA_ATTN_X3_KSPLIT=0: one accumulator per n-tile). The softmax and P / dS
 * statements are attention_steps.ts's, shared with the 16-bit kernels.
 * Causal: tiles above the diagonal are never loaded, a warp whose 16 rows see none of a tile skips
 * its products, the element mask applies only in tiles crossing the diagonal or the T / S edge.
 * Relies on: 16-byte aligned rows (the device plan aligns values to 64 bytes; D and the packed
 * offsets are multiples of 4 floats), sm_80+ (mma.sync TF32, cp.async), 4 x 52 KiB of shared memory per SM
 * (sm_90: 227 KiB).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { attnGeom, deltaButterfly, deltaTerms, flashKernels, headOffsets, indexType, isForward, lit, lseValue, type AttnGeom } from './attention_f32.js';
import { forwardStore, kvProbStep, qProbStep, softmaxStep } from './attention_steps.js';
import { SMEM_STATIC_MAX } from './cuda_dialect.js';
import { envFlag, envList } from '../env_switch.js';

/** head widths of the 3xTF32 kernels (multiples of the k8 step; 64 is gpt_char's and GPT-2's, wider exceeds 48 KiB) */
export const TF32X3_HEAD_DIMS: readonly number[] = [16, 32, 48, 64];

/** blocks per SM the double-buffered dK/dV kernel's registers must allow (lowerAttentionTf32x3) */
const KV_MIN_BLOCKS = 4;
/** rows per block (4 warps x 16); threads per block */
const BR = 64;
const THREADS = 128;
/** rows of a streamed tile: forward (Q 64 + K, V 32 rows: 35 KiB at D = 64), backward (two 64-row + two 16-row tiles: 44 KiB) */
const BC_FWD = 32, BC_BWD = 16;
const LOG2E = Math.LOG2E;

/**
 * MPSC_CUDA_ATTN_TF32X3 (generation time): 1 (default) these kernels for fp32 attention, 0 the CUDA-core ones
 * (attention_f32.ts); part of the CUDA build cache's inputs key (runtime/cuda/session.ts cudaInputsKey)
 */
export function attnTf32x3Enabled(): boolean {
  return envFlag('MPSC_CUDA_ATTN_TF32X3', true);
}

/** the three kernels of a 3xTF32 attention node: forward, dK/dV, dQ */
export type X3Kernel = 'fwd' | 'kv' | 'q';

/**
 * Whether kernel `k` streams its tiles with cp.async double buffering (the next tile copied while this one
 * computes) rather than synchronous loads between two barriers: MPSC_CUDA_ATTN_X3_ASYNC at build time, a
 * comma list of fwd / kv / q or `none`; default all three. At D = 64 the double buffers take 51 KiB
 * (dynamic shared memory): 4 blocks per SM instead of 6 (forward) and 5 (dQ); the dK/dV kernel goes 3 -> 4
 * (lowerAttentionTf32x3's bound). Measured (H200, gpt_char, per layer, against =none with one accumulator):
 * forward 112 -> 99 us, dK/dV 215 -> 193, dQ 158 -> 146; graph step 22.96 -> 22.67 ms.
 */
export function x3Async(k: X3Kernel): boolean {
  return envList<X3Kernel>('MPSC_CUDA_ATTN_X3_ASYNC', ['fwd', 'kv', 'q'], ['fwd', 'kv', 'q']).includes(k);
}

/**
 * Whether the dK/dV kernel's score products accumulate even and odd k-steps apart (`scores` two):
 * MPSC_CUDA_ATTN_X3_KSPLIT at build time, 1 (default) or 0, for A/B on the GPU.
 */
export function x3KSplit(): boolean {
  return envFlag('MPSC_CUDA_ATTN_X3_KSPLIT', true);
}

/**
 * Whether the backward's dK/dV and dQ kernels run as ONE launch (MPSC_CUDA_FLASH_BWD_MERGE at build time, 1 by
 * default, 0 for A/B): blocks y < H run the dK/dV body, y >= H the dQ body for head y - H (the two read the same
 * operands and Delta and write disjoint parts of the gradients), so the dQ blocks fill the SMs the dK/dV blocks
 * leave idle instead of waiting for them: at gpt_tiny's T = 64 each kernel is one block of 64 rows per head, 128
 * blocks on 132 SMs. Both double-buffered (x3Async kv and q) with the same arguments and grid width, and, where the
 * dK/dV kernel is held to 128 registers, a head width of at most 32 or a causal head (a non-causal D = 64 merged
 * kernel spilled), else two launches; the merged kernel keeps the dK/dV kernel's register bound and the larger
 * shared-memory tile. Measured (H100, 6 Dec): gpt_tiny 0.705 -> 0.690 ms; gpt_char fp32 (D = 64, causal) 24.34 -> 24.09.
 */
export function x3BwdMerge(): boolean {
  return envFlag('MPSC_CUDA_FLASH_BWD_MERGE', true);
}

/**
 * Whether a merged backward over one key tile per head (S <= 64: gpt_tiny, char_gpt) computes Delta = rowsum(dO * O)
 * itself instead of the Delta kernel before it (MPSC_CUDA_FLASH_DELTA_FOLD at build time; on by default, =0 keeps
 * the Delta kernel): the
 * dK/dV half for all T query rows, the dQ half for its block's rows, each into shared memory in the Delta kernel's
 * own order (deltaRows: the same bits), while the first tiles' copies are in flight. With one key tile no row is
 * computed twice by the dK/dV blocks; the backward of such a layer becomes one launch instead of two on the step's
 * longest path. Measured (H100, 6 Dec 2026; `node --import tsx bench/cuda_env_ab.ts --workload gpt_tiny_b32_t64
 * --rounds 3 --steps 50 base fold:MPSC_CUDA_FLASH_DELTA_FOLD=1`): gpt_tiny 0.692 -> 0.686 ms per step (rounds
 * 0.697 0.689 0.692 vs 0.686 0.683 0.689; -0.9%, less than the predicted ~-3%). `MPSC_CUDA_FLASH_DELTA_FOLD=1
 * CUDA_CHECK_CASES=flash CUDA_CHECK_SPECS=char_gpt.model bench/cuda_check.sh kernels parity` passed there: 36/36
 * flash cases in all five configurations (fp32 worst 2.45e-6); char_gpt fp32 parity 2.08e-7, merged launches
 * bitwise over 159 tensors.
 */
export function x3DeltaFold(): boolean {
  return envFlag('MPSC_CUDA_FLASH_DELTA_FOLD', true);
}

/**
 * Delta = rowsum(dO * O) of the query rows [r0, r0 + 16 passes) of head bh into the shared floats `dst` (rows past T:
 * 0), summed as attention_f32.ts's Delta kernel sums them (deltaTerms, deltaButterfly), so the bits are the Delta
 * kernel's; every thread of the block takes part (the shuffles)
 */
function deltaRows(gm: AttnGeom, r0: string, passes: number, dst: string): string {
  const ix = indexType(gm);
  return (
    `  {  // Delta = rowsum(dO * O) of ${16 * passes} query rows from ${r0}, 8 lanes per row in the Delta kernel's order\n` +
    `    const int part = threadIdx.x & 7;\n` +
    `    #pragma unroll\n    for (int pass = 0; pass < ${passes}; ++pass) {\n` +
    `      const int rl = pass * 16 + (threadIdx.x >> 3), qi = ${r0} + rl;\n` +
    `      float acc = 0.0f;\n` +
    `      if (qi < T) {\n        const ${ix} base = ooff + (${ix})qi * RO;\n` +
    deltaTerms(gm.D, `${gm.buf.dout}[base + c] * ${gm.buf.o}[base + c]`, '        ') + `      }\n` +
    deltaButterfly('      ') +
    `      if (part == 0) ${dst}[rl] = acc;\n    }\n  }\n`
  );
}

/** the dK/dV and dQ kernels of a backward node as one launch (x3BwdMerge), or null where they cannot share one */
function mergeBackward(kv: KernelSpec, q: KernelSpec, gm: AttnGeom): KernelSpec | null {
  const sig = (k: KernelSpec) => JSON.stringify(k.args.map((a) => [a.name, a.value, a.access]));
  const words = asyncWords(gm), dkv = smem(words.kv).decl, dq = smem(words.q).decl;
  if (sig(kv) !== sig(q) || kv.groups[0] !== q.groups[0] || kv.groups[1] !== gm.H || q.groups[1] !== gm.H || !kv.body.includes(dkv) || !q.body.includes(dq)) return null;
  const both = smem(Math.max(words.kv, words.q));
  const ind = (b: string) => b.replace(/\n+$/, '').replace(/^(?=.)/gm, '  ') + '\n';
  const body = both.decl +
    `  if (blockIdx.y < ${gm.H}) {  // dK, dV of head blockIdx.y\n` + ind(kv.body.replace(dkv, '')) +
    `  } else {  // dQ of head blockIdx.y - ${gm.H}\n` + ind(q.body.replace(dq, '').replace(/\bblockIdx\.y\b/g, `(blockIdx.y - ${gm.H})`)) + `  }\n`;
  return {
    ...kv, label: kv.label.replace(/: dK, dV\]$/, ': dK, dV and dQ in one launch (blocks y < H: dK / dV, y >= H: dQ)]'),
    groups: [kv.groups[0], 2 * gm.H, 1], tgmem: both.tgmem, body, ...(kv.scratch || q.scratch ? { scratch: Math.max(kv.scratch ?? 0, q.scratch ?? 0) } : {}),
  };
}

/** why a node does not run on the 3xTF32 kernels (null: they take it) */
export function tf32x3Refusal(g: Graph, n: Node): string | null {
  if (!attnTf32x3Enabled()) return 'switched off (MPSC_CUDA_ATTN_TF32X3=0)';
  const ops = { attention: [0, 1, 2], attention_grad: [0, 1, 2, 3, 4], attention_qkv: [0], attention_qkv_grad: [0, 1, 2] }[n.op as 'attention'] ?? [];
  const types = ops.map((i) => g.values[n.inputs[i]].dtype);
  if (!types.every((t) => t === 'f32')) return `operands ${types.join(', ')} (the 3xTF32 kernels take fp32 ones)`;
  if (!n.outputs.every((v) => g.values[v].dtype === 'f32')) return 'a 16-bit output (the 3xTF32 kernels store fp32)';
  const D = attnGeom(g, n).D;
  if (!TF32X3_HEAD_DIMS.includes(D)) return `head width ${D} (the 3xTF32 kernels take ${TF32X3_HEAD_DIMS.join(', ')})`;
  if (g.values[lseValue(n)].dtype !== 'f32') return `lse stored as ${g.values[lseValue(n)].dtype}`;
  return null;
}

/** text builders of one geometry */
function text(gm: AttnGeom) {
  const D = gm.D, P = D + 4, NK = D / 8, shift = gm.S - gm.T, ix = indexType(gm);
  const buf = (name: string) => gm.buf[name];
  const ind = (s: string) => s.replace(/^(?=.)/gm, '  ');
  /** the hi / lo split of four (A) or two (B) shared-memory floats into `h[]`, `l[]` */
  const split = (h: string, l: string, xs: string[]) =>
    `uint ${h}[${xs.length}], ${l}[${xs.length}];\n` + xs.map((x, i) => `mpsc_split_tf32_hl(${x}, ${h}[${i}], ${l}[${i}]);\n`).join('');
  return {
    P, NK, shift, ind,
    consts:
      `  constexpr int T = ${gm.T}, S = ${gm.S}, P = ${P};  // queries, keys, tile pitch (floats)\n` +
      `  constexpr float SC = ${lit(gm.scale * LOG2E)};  // scale * log2(e): scores in base 2\n` +
      `  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, t = l & 3;\n` +
      `  const int bh = blockIdx.y;\n` + headOffsets(gm),
    /** rows [r0, r0 + n) of [rows x D] slabs (logical buffer, head offset, row stride) into shared tiles by float4, zeros past `rows` */
    load: (r0: string, n: number, rows: string, pairs: [string, string, string, string][]) =>
      `  for (int e = threadIdx.x; e < ${(n * D) / 4}; e += ${THREADS}) {\n` +
      `    const int r = e / ${D / 4}, c = (e % ${D / 4}) * 4;\n    const bool in = ${r0} + r < ${rows};\n` +
      pairs.map(([dst, src, off, st]) =>
        `    *reinterpret_cast<float4*>(${dst} + r * P + c) = in ? *reinterpret_cast<const float4*>(${buf(src)} + ${off} + (${ix})(${r0} + r) * ${st} + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);\n`).join('') +
      `  }\n`,
    /** the same rows by 16-byte cp.async (zero-filled past `rows`; the caller commits the group) */
    asyncLoad: (r0: string, n: number, rows: string, pairs: [string, string, string, string][]) =>
      `  for (int e = threadIdx.x; e < ${(n * D) / 4}; e += ${THREADS}) {\n` +
      `    const int r = e / ${D / 4}, c = (e % ${D / 4}) * 4;\n    const bool in = ${r0} + r < ${rows};\n` +
      pairs.map(([dst, src, off, st]) =>
        `    mpsc_cp_async16(reinterpret_cast<unsigned short*>(${dst} + r * P + c), reinterpret_cast<const unsigned short*>(${buf(src)} + ${off} + (${ix})(in ? ${r0} + r : 0) * ${st} + c), in);\n`).join('') +
      `  }\n`,
    /**
     * The streamed-tile loop up to its body (the body closes it with `  }`): v from v0 below vend by `bc`.
     * async (cp.async double buffering): `decl(ph)` declares this step's tile pointers from the buffer
     * phase ph (0 / 1, flipped every step, also past a `continue`); `copy(r0, ph)` issues the copies of the
     * tile at r0 into buffer ph, committed as one group: the first before the loop (with whatever the
     * caller issued before it), the next one after this step's barrier, so it lands while this step
     * computes. Synchronous: `copy(v, '')` between two barriers (decl unused: static tiles). `issued`: statements
     * run once before the loop, after the first copies are issued (they land meanwhile; the loop's first barrier
     * publishes the shared memory it writes).
     */
    stream: (async: boolean, v: string, v0: string, vend: string, bc: number, decl: (ph: string) => string, copy: (r0: string, ph: string) => string, issued = '') =>
      async
        ? copy(v0, '0') + `  mpsc_cp_async_commit();\n` + issued +
          `  for (int ${v} = ${v0}, ph = 0; ${v} < ${vend}; ${v} += ${bc}, ph ^= 1) {\n` + ind(decl('ph')) +
          `    mpsc_cp_async_wait_all();\n    __syncthreads();  // this step's tiles are in place; the other buffer's are consumed\n` +
          `    if (${v} + ${bc} < ${vend}) {  // the next step's tiles, copied while this one computes\n` +
          ind(ind(copy(`${v} + ${bc}`, 'ph ^ 1'))) + `      mpsc_cp_async_commit();\n    }\n`
        : issued + `  for (int ${v} = ${v0}; ${v} < ${vend}; ${v} += ${bc}) {\n` +
          `    __syncthreads();  // the previous tiles are consumed (and the block's own loaded)\n` + ind(copy(v, '')) + `    __syncthreads();\n`,
    /**
     * acc[nt][4] = rows a0.. (16, of shared tile A) times rows 0 .. 8 nt of shared tile B, transposed,
     * over the D features: the 16 x 8nt scores of the warp as C fragments. `two`: the even and odd
     * k-steps accumulate apart (added at the end), for the dK/dV kernel (nt = 2, 3 warps per scheduler):
     * one accumulator per n-tile chains all 3 D / 8 mma of the product one after another (each waits
     * for the previous one's sum); the forward (nt = 4) has chains enough, and the dQ kernel spills
     * with them at D = 64 (separate layout)
     */
    scores: (acc: string, A: string, a0: string, Bt: string, nt: number, two = false) => {
      const into = two ? `(kk & 1) ? ${acc}_odd[j] : ${acc}[j]` : `${acc}[j]`;
      return (
        `  float ${acc}[${nt}][4]${two ? `, ${acc}_odd[${nt}][4];  // even / odd k-steps` : ';'}\n` +
        `  #pragma unroll\n  for (int j = 0; j < ${nt}; ++j)\n    #pragma unroll\n    for (int e = 0; e < 4; ++e) { ${acc}[j][e] = 0.0f;${two ? ` ${acc}_odd[j][e] = 0.0f;` : ''} }\n` +
        `  #pragma unroll\n  for (int kk = 0; kk < ${NK}; ++kk) {\n` +
        `    const float* a = ${A} + (${a0} + g) * P + kk * 8 + t;\n` +
        ind(ind(split('ah', 'al', ['a[0]', 'a[8 * P]', 'a[4]', 'a[8 * P + 4]']))) +
        `    #pragma unroll\n    for (int j = 0; j < ${nt}; ++j) {\n` +
        `      const float* b = ${Bt} + (j * 8 + g) * P + kk * 8 + t;\n` +
        ind(ind(ind(split('bh', 'bl', ['b[0]', 'b[4]'])))) +
        `      mpsc_mma_tf32x3(${into}, ah, al, bh, bl);\n    }\n  }\n` +
        (two ? `  #pragma unroll\n  for (int j = 0; j < ${nt}; ++j)\n    #pragma unroll\n    for (int e = 0; e < 4; ++e) ${acc}[j][e] += ${acc}_odd[j][e];\n` : '')
      );
    },
    /**
     * acc[D/8][4] += C (the warp's 16 x 8nt fp32 C fragments in registers, as A in the permuted k order)
     * times shared tile Y (8nt rows x D)
     */
    times: (acc: string, c: string, Y: string, nt: number) =>
      `  #pragma unroll\n  for (int kk = 0; kk < ${nt}; ++kk) {\n` +
      ind(ind(split('ah', 'al', [`${c}[kk][0]`, `${c}[kk][2]`, `${c}[kk][1]`, `${c}[kk][3]`]))) +
      `    const float* y = ${Y} + (kk * 8 + 2 * t) * P + g;\n` +
      `    #pragma unroll\n    for (int jd = 0; jd < ${NK}; ++jd) {\n` +
      ind(ind(ind(split('bh', 'bl', ['y[jd * 8]', 'y[P + jd * 8]'])))) +
      `      mpsc_mma_tf32x3(${acc}[jd], ah, al, bh, bl);\n    }\n  }\n`,
    zero: (acc: string) =>
      `  float ${acc}[${NK}][4];\n  #pragma unroll\n  for (int j = 0; j < ${NK}; ++j) { ${acc}[j][0] = 0.0f; ${acc}[j][1] = 0.0f; ${acc}[j][2] = 0.0f; ${acc}[j][3] = 0.0f; }\n`,
    /** the warp's [16 x D] accumulator rows base + g, base + g + 8 (below `rows`) into `out` (fp32) at head offset `off`, row stride `st` */
    storeRows: (out: KernelArg, acc: string, base: string, rows: string, off: string, st: string, mul: [string, string] = ['', '']) =>
      `  {\n    const int r0 = ${base} + g, r1 = r0 + 8;\n` +
      `    #pragma unroll\n    for (int j = 0; j < ${NK}; ++j) {\n      const int c = j * 8 + 2 * t;\n` +
      `      if (r0 < ${rows}) *reinterpret_cast<float2*>(${out.name} + ${off} + (${ix})r0 * ${st} + c) = make_float2(${acc}[j][0]${mul[0]}, ${acc}[j][1]${mul[0]});\n` +
      `      if (r1 < ${rows}) *reinterpret_cast<float2*>(${out.name} + ${off} + (${ix})r1 * ${st} + c) = make_float2(${acc}[j][2]${mul[1]}, ${acc}[j][3]${mul[1]});\n` +
      `    }\n  }\n`,
  };
}

/**
 * the double-buffered kernels' shared tiles: `words` floats as `sm`, static, or past 48 KiB the dialect's
 * dynamic `tg` (the KernelSpec's tgmem: its launch passes the bytes, host.ts raises the kernel's limit)
 */
function smem(words: number): { decl: string; tgmem: number } {
  const bytes = words * 4;
  return bytes > SMEM_STATIC_MAX
    ? { decl: `  float* const sm = tg;  // ${bytes} bytes of dynamic shared memory\n`, tgmem: bytes }
    : { decl: `  __shared__ __align__(16) float sm[${words}];\n`, tgmem: 0 };
}

/** shared floats of each kernel when double-buffered: its own 64-row tile(s), two buffers of its streamed tiles (and the dK/dV kernel's lse / Delta) */
function asyncWords(gm: AttnGeom): { fwd: number; kv: number; q: number } {
  const P = gm.D + 4;
  return { fwd: BR * P + 4 * BC_FWD * P, kv: 2 * BR * P + 4 * BC_BWD * P + 4 * BC_BWD, q: 2 * BR * P + 4 * BC_BWD * P };
}

function forwardBody(gm: AttnGeom, o: KernelArg): string {
  const x = text(gm), P = x.P, NT = BC_FWD / 8, as = x3Async('fwd');
  const edge = `k0 + ${BC_FWD} > S` + (gm.causal ? ` || k0 + ${BC_FWD - 1} > qw + ${x.shift}` : '');
  /** double-buffered: K, V of buffer ph after the Q tile */
  const kvAt = (ph: string, i: number) => `sm + ${BR * P + i * BC_FWD * P} + (${ph}) * ${2 * BC_FWD * P}`;
  return (
    `  // flash attention forward, fp32 as 3xTF32 on the tensor cores: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // block (64-query tile, head), warp w its queries qw.., key / value tiles of ${BC_FWD} streamed${as ? ' (cp.async, double-buffered)' : ''}\n` +
    x.consts +
    (as ? smem(asyncWords(gm).fwd).decl + `  float* const Qs = sm;\n` : `  __shared__ __align__(16) float Qs[${BR * P}], Ks[${BC_FWD * P}], Vs[${BC_FWD * P}];\n`) +
    `  // the last query tiles see the most keys: they start first\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n` +
    (as ? x.asyncLoad : x.load)('q0', BR, 'T', [['Qs', 'q', 'qoff', 'RQ']]) +
    x.zero('acc') +
    `  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8: running max (base 2), partial sums\n` +
    `  const int kend = ${gm.causal ? `min(S, q0 + ${BR + x.shift})` : 'S'};\n` +
    x.stream(as, 'k0', '0', 'kend', BC_FWD, (ph) => `  const float* const Ks = ${kvAt(ph, 0)};\n  const float* const Vs = Ks + ${BC_FWD * P};\n`,
      (r0, ph) => (as ? x.asyncLoad : x.load)(r0, BC_FWD, 'S', [[as ? kvAt(ph, 0) : 'Ks', 'k', 'koff', 'RK'], [as ? kvAt(ph, 1) : 'Vs', 'v', 'voff', 'RV']])) +
    (gm.causal ? `    if (k0 > qw + ${15 + x.shift}) continue;  // none of the warp's queries sees this tile\n` : '') +
    x.ind(x.scores('s', 'Qs', 'w * 16', 'Ks', NT)) +
    softmaxStep(gm, NT, x.NK, false, 's', ['m0', 'm1'], ['l0', 'l1'], 'acc', 'qw', edge) +
    `    // O += P V (P's C fragments as A in the permuted k order)\n` +
    x.ind(x.times('acc', 's', 'Vs', NT)) +
    `  }\n` +
    forwardStore(false, ['m0', 'm1'], ['l0', 'l1'], 'qw', (mul) => x.storeRows(o, 'acc', 'qw', 'T', 'ooff', 'RO', mul))
  );
}

function gradKVBody(gm: AttnGeom, dk: KernelArg, dv: KernelArg, fold = false): string {
  const x = text(gm), P = x.P, NT = BC_BWD / 8, as = x3Async('kv'), two = x3KSplit();
  // fold (S <= BR: this block streams every query tile): Delta of all T rows computed first into Dall (deltaRows)
  const tPad = Math.ceil(gm.T / 16) * 16;
  const edge = `q0 + ${BC_BWD} > T` + (gm.causal ? ` || kw + 15 > q0 + ${x.shift}` : '');
  // the first query tile holding a query that sees key k0 (query i sees key j iff i >= j - (S - T))
  const qbeg = gm.causal ? `max(0, k0 - ${x.shift}) / ${BC_BWD} * ${BC_BWD}` : '0';
  /** double-buffered: Q, dO of buffer ph after K and V; then lse, Delta of buffer ph after all tiles */
  const qoAt = (ph: string, i: number) => `sm + ${2 * BR * P + i * BC_BWD * P} + (${ph}) * ${2 * BC_BWD * P}`;
  const ldAt = (ph: string, i: number) => `sm + ${2 * BR * P + 4 * BC_BWD * P + i * BC_BWD} + (${ph}) * ${2 * BC_BWD}`;
  // lse and Delta of the tile's queries (zero past T): stored by cp.async as they are (lse scaled to base 2 at its use), or loaded and scaled
  const rowValues = (r0: string, ph: string) =>
    `  if (threadIdx.x < ${BC_BWD}) {\n    const int qi = ${r0} + threadIdx.x;\n` +
    (as
      ? `    mpsc_cp_async4(${ldAt(ph, 0)} + threadIdx.x, lse + (size_t)bh * T + (qi < T ? qi : 0), qi < T);\n` +
        (fold ? '' : `    mpsc_cp_async4(${ldAt(ph, 1)} + threadIdx.x, mpsc_scratch + (size_t)bh * T + (qi < T ? qi : 0), qi < T);\n`) + `  }\n`
      : `    Ls[threadIdx.x] = qi < T ? lse[(size_t)bh * T + qi] * ${lit(LOG2E)} : 0.0f;\n` +
        (fold ? '' : `    Ds[threadIdx.x] = qi < T ? mpsc_scratch[(size_t)bh * T + qi] : 0.0f;\n`) + `  }\n`);
  if (fold && !as) throw new Error('internal: the Delta fold is made for the double-buffered dK/dV kernel only');
  return (
    `  // flash attention backward, dK and dV, fp32 as 3xTF32 on the tensor cores: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // block (64-key tile, head), warp w its keys kw..; query tiles of ${BC_BWD} streamed${as ? ' (cp.async, double-buffered)' : ''}: S^T = K Q^T, dP^T = V dO^T\n` +
    x.consts +
    (as
      ? smem(asyncWords(gm).kv).decl + `  float* const Ks = sm;\n  float* const Vs = sm + ${BR * P};\n`
      : `  __shared__ __align__(16) float Ks[${BR * P}], Vs[${BR * P}], Qs[${BC_BWD * P}], Os[${BC_BWD * P}];\n` +
        `  __shared__ float Ls[${BC_BWD}]${fold ? '' : `, Ds[${BC_BWD}]`};  // lse (base 2)${fold ? '' : ' and Delta'} of the query tile\n`) +
    (fold ? `  __shared__ float Dall[${tPad}];  // Delta of every query row (deltaRows, below)\n` : '') +
    `  const int k0 = blockIdx.x * ${BR}, kw = k0 + w * 16;\n` +
    (as ? x.asyncLoad : x.load)('k0', BR, 'S', [['Ks', 'k', 'koff', 'RK'], ['Vs', 'v', 'voff', 'RV']]) +
    x.zero('dka') + x.zero('dva') +
    `  const int qbeg = ${qbeg};\n` +
    x.stream(as, 'q0', 'qbeg', 'T', BC_BWD,
      (ph) => `  const float* const Qs = ${qoAt(ph, 0)};\n  const float* const Os = Qs + ${BC_BWD * P};  // dO\n` +
        `  const float* const Ls = ${ldAt(ph, 0)};\n  const float* const Ds = ${fold ? 'Dall + q0;  // lse (natural log); Delta of the query tile (deltaRows above)' : `Ls + ${BC_BWD};  // lse (natural log) and Delta of the query tile`}\n`,
      (r0, ph) => (as ? x.asyncLoad : x.load)(r0, BC_BWD, 'T', [[as ? qoAt(ph, 0) : 'Qs', 'q', 'qoff', 'RQ'], [as ? qoAt(ph, 1) : 'Os', 'dout', 'ooff', 'RO']]) + rowValues(r0, ph),
      fold ? deltaRows(gm, '0', tPad / 16, 'Dall') : '') +
    (gm.causal ? `    if (kw > q0 + ${BC_BWD - 1 + x.shift}) continue;  // none of this tile's queries sees the warp's keys\n` : '') +
    x.ind(x.scores('st', 'Ks', 'w * 16', 'Qs', NT, two)) + x.ind(x.scores('dpt', 'Vs', 'w * 16', 'Os', NT, two)) +
    kvProbStep(gm, NT, edge, as ? `Ls[qc] * ${lit(LOG2E)}` : 'Ls[qc]') +
    `    // dV += P^T dO, dK += dS^T Q (the scale folded into dS; C fragments as A in the permuted k order)\n` +
    x.ind(x.times('dva', 'st', 'Os', NT)) + x.ind(x.times('dka', 'dpt', 'Qs', NT)) +
    `  }\n` +
    x.storeRows(dk, 'dka', 'kw', 'S', 'koff', 'RK') + x.storeRows(dv, 'dva', 'kw', 'S', 'voff', 'RV')
  );
}

function gradQBody(gm: AttnGeom, dq: KernelArg, fold = false): string {
  const x = text(gm), P = x.P, NT = BC_BWD / 8, as = x3Async('q');
  // fold: Delta of the block's 64 rows computed into Dall while the Q / dO / first K, V copies land, then read per row
  const deltaOf = (r: string) => (fold ? `Dall[${r} - q0]` : `mpsc_scratch[(size_t)bh * T + ${r}]`);
  const dRows = `  const float D0 = r0 < T ? ${deltaOf('r0')} : 0.0f, D1 = r1 < T ? ${deltaOf('r1')} : 0.0f;\n`;
  const edge = `k0 + ${BC_BWD} > S` + (gm.causal ? ` || k0 + ${BC_BWD - 1} > qw + ${x.shift}` : '');
  /** double-buffered: K, V of buffer ph after Q and dO */
  const kvAt = (ph: string, i: number) => `sm + ${2 * BR * P + i * BC_BWD * P} + (${ph}) * ${2 * BC_BWD * P}`;
  return (
    `  // flash attention backward, dQ, fp32 as 3xTF32 on the tensor cores: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // block (64-query tile, head), warp w its queries qw..; key tiles of ${BC_BWD} streamed${as ? ' (cp.async, double-buffered)' : ''}: S = Q K^T, dP = dO V^T, dQ += dS K\n` +
    x.consts +
    (as
      ? smem(asyncWords(gm).q).decl + `  float* const Qs = sm;\n  float* const Os = sm + ${BR * P};  // dO\n`
      : `  __shared__ __align__(16) float Qs[${BR * P}], Os[${BR * P}], Ks[${BC_BWD * P}], Vs[${BC_BWD * P}];\n`) +
    (fold ? `  __shared__ float Dall[${BR}];  // Delta of the block's query rows (deltaRows, below)\n` : '') +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n` +
    (as ? x.asyncLoad : x.load)('q0', BR, 'T', [['Qs', 'q', 'qoff', 'RQ'], ['Os', 'dout', 'ooff', 'RO']]) +
    `  const int r0 = qw + g, r1 = r0 + 8;\n` +
    `  const float L0 = r0 < T ? lse[(size_t)bh * T + r0] * ${lit(LOG2E)} : 0.0f, L1 = r1 < T ? lse[(size_t)bh * T + r1] * ${lit(LOG2E)} : 0.0f;\n` +
    (fold ? '' : dRows) +
    x.zero('dqa') +
    `  const int kend = ${gm.causal ? `min(S, q0 + ${BR + x.shift})` : 'S'};\n` +
    x.stream(as, 'k0', '0', 'kend', BC_BWD, (ph) => `  const float* const Ks = ${kvAt(ph, 0)};\n  const float* const Vs = Ks + ${BC_BWD * P};\n`,
      (r0, ph) => (as ? x.asyncLoad : x.load)(r0, BC_BWD, 'S', [[as ? kvAt(ph, 0) : 'Ks', 'k', 'koff', 'RK'], [as ? kvAt(ph, 1) : 'Vs', 'v', 'voff', 'RV']]),
      fold ? deltaRows(gm, 'q0', BR / 16, 'Dall') + `  __syncthreads();  // Dall in place\n` + dRows : '') +
    (gm.causal ? `    if (k0 > qw + ${15 + x.shift}) continue;  // none of the warp's queries sees this tile\n` : '') +
    x.ind(x.scores('s', 'Qs', 'w * 16', 'Ks', NT)) + x.ind(x.scores('dp', 'Os', 'w * 16', 'Vs', NT)) +
    qProbStep(gm, NT, edge) +
    `    // dQ += dS K (the scale folded into dS; C fragments as A in the permuted k order)\n` +
    x.ind(x.times('dqa', 's', 'Ks', NT)) +
    `  }\n` +
    x.storeRows(dq, 'dqa', 'qw', 'T', 'qoff', 'RQ')
  );
}

/** The 3xTF32 flash kernels of an attention-family node (tf32x3Refusal null). */
export function lowerAttentionTf32x3(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const gm = attnGeom(g, n), words = asyncWords(gm);
  ctx.helpers.add('mma16');  // the quad reductions, the 16-byte cp.async
  ctx.helpers.add('mma_tf32x3');
  const dyn = (k: X3Kernel) => (x3Async(k) ? smem(words[k]).tgmem : 0);
  // the double-buffered dK/dV kernel with split score accumulators and 32-bit head offsets (the packed layout's)
  // at 4 blocks per SM (__launch_bounds__(128, 4): 128 registers, no spills at gpt_char's D = 64, ptxas 13.0; 165
  // unbounded: 3 blocks); 51 KiB of shared memory each fits 4. Unbounded otherwise: the separate layout's
  // 64-bit offsets spill 12 bytes at 128, the synchronous kernel 12, the single-accumulator one 4.
  const bound = !isForward(n) && x3Async('kv') && x3KSplit() && indexType(gm) === 'int';
  // merged only where the dK/dV kernel's register bound leaves the dQ body room: at D = 64 the bounded merged kernel
  // spilled 32 bytes in a non-causal packed case (ptxas) but not in the causal ones (gpt_char: 25.03 -> 24.74 ms merged),
  // so wider non-causal heads keep two launches (test/cuda_attention.test.ts compiles every case: no spills)
  const merge = !isForward(n) && x3BwdMerge() && x3Async('kv') && x3Async('q') && (!bound || gm.D <= 32 || gm.causal);
  // one key tile per head: the merged kernel computes Delta itself (x3DeltaFold)
  const fold = merge && gm.S <= BR && x3DeltaFold();
  const ks = flashKernels(ctx, g, n, {
    what: `fp32 as 3xTF32 on the tensor cores, ${BR} rows per block`, rows: BR,
    forward: (_args, o) => forwardBody(gm, o), gradKV: (_args, dk, dv) => gradKVBody(gm, dk, dv, fold), gradQ: (_args, dq) => gradQBody(gm, dq, fold),
    tgmem: { forward: dyn('fwd'), gradKV: dyn('kv'), gradQ: dyn('q') }, foldDelta: fold,
  });
  if (isForward(n)) return ks;
  // [Delta,] dK/dV, dQ
  const first = fold ? 0 : 1, kv = bound ? { ...ks[first], minBlocks: KV_MIN_BLOCKS } : ks[first];
  const merged = merge ? mergeBackward(kv, ks[first + 1], gm) : null;
  return [...ks.slice(0, first), ...(merged ? [merged] : [kv, ks[first + 1]])];
}
