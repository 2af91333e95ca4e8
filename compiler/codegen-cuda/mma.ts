/**
 * mma: CUDA helper functions for 16-bit tensor-core products (inline PTX), used by the CUDA flash
 * attention (attention_cuda.ts). Consumes nothing; produces the helper text that the kernel file's
 * prelude emits once when a kernel asks for Helper 'mma16' (compiler/kernels/prelude.ts), and the
 * names the kernels call. The helpers use only 32-bit registers and PTX (no cuda_fp16.h /
 * cuda_bf16.h types), so they compile in any file.
 *
 * tf32x3MmaHelpers (Helper 'mma_tf32x3') adds the fp32 flash attention's 3xTF32 product on
 * `mma.sync.m16n8k8` TF32 (attention_tf32x3.ts), over cuda_dialect.ts's mpsc_mma16x8 / mpsc_split_tf32.
 *
 * The product is `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32` (sm_80+):
 * D[16x8] (fp32) = A[16x16] (16-bit) * B[16x8] (16-bit) + C[16x8] (fp32), one warp collectively.
 * With lane l of the warp, g = l / 4 (the "group") and t = l % 4 (the thread in the group), the
 * fragments each lane holds are (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
 * type"; a 32-bit register holds two 16-bit elements, the lower-indexed one in the low half):
 *   A (row-major 16x16), 4 registers: a[0] = (row g,     cols 2t, 2t+1)
 *                                     a[1] = (row g + 8, cols 2t, 2t+1)
 *                                     a[2] = (row g,     cols 2t+8, 2t+9)
 *                                     a[3] = (row g + 8, cols 2t+8, 2t+9)
 *   B (16x8, "col": k pairs adjacent), 2 registers: b[0] = (rows k = 2t, 2t+1, col g)
 *                                                   b[1] = (rows k = 2t+8, 2t+9, col g)
 *   C / D (16x8 fp32), 4 floats: c[0], c[1] = (row g, cols 2t, 2t+1); c[2], c[3] = (row g + 8, same cols)
 * Consequences the kernels rely on:
 *  - an A fragment of a row-major [rows][k] tile in shared memory is four 32-bit loads;
 *  - a B fragment of B = X^T for a row-major [n][k] tile X (scores Q K^T: B[k=d][n=key] = K[key][d])
 *    is two 32-bit loads, or half of a plain `ldmatrix.sync.aligned.m8n8.x4.shared.b16`
 *    (mpsc_ldsm_x4: lane (g, t) gets (row g; cols 2t, 2t+1) of each 8x8 matrix, so matrices
 *    (keys 8j.., cols 16kk..), (keys 8j.., cols 16kk+8..) are b[0], b[1] of n8 tile j);
 *  - a B fragment of a row-major [k][n] tile (P V: B[k=key][n=d] = V[key][d]) needs a transpose:
 *    `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16` (mpsc_ldsm_x4_trans) loads four 8x8 16-bit
 *    matrices whose 8 row addresses come from lanes 8i..8i+7 (matrix i -> register i) and gives
 *    lane (g, t) the elements (rows 2t, 2t+1; col g) of each: exactly b[0] or b[1] of an n8 tile;
 *  - the C fragments of two adjacent n8 tiles (cols 16kk..16kk+15) of a product are, packed to 16
 *    bits, the A fragment of the k16 step kk of the next product (P of Q K^T feeds P V):
 *    a = {pack(c[2kk][0], c[2kk][1]), pack(c[2kk][2], c[2kk][3]), pack(c[2kk+1][0], c[2kk+1][1]),
 *    pack(c[2kk+1][2], c[2kk+1][3])} (mpsc_pack_*: round to nearest even, `cvt.rn.*x2.f32`).
 */

/** the two 16-bit operand types of the products, as the kernel language names them */
export type Mma16Type = 'bfloat' | 'half';

/** suffix of the helper names for one operand type */
export const mmaSuffix = (t: Mma16Type): string => (t === 'bfloat' ? 'bf16' : 'f16');

const Q = '__device__ __forceinline__';

function typed(t: Mma16Type): string {
  const s = mmaSuffix(t);
  return (
    `// c (16x8 fp32) += a (16x16 ${s}) * b (16x8 ${s}), fp32 accumulation\n` +
    `${Q} void mpsc_mma_${s}(float* c, const uint* a, const uint* b) {\n` +
    `  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.${s}.${s}.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n` +
    `               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n` +
    `               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));\n}\n\n` +
    `// two floats rounded to ${s} (nearest even) in one register: lo in the low half\n` +
    `${Q} uint mpsc_pack_${s}(float lo, float hi) {\n` +
    `  uint r;\n  asm("cvt.rn.${s}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));\n  return r;\n}\n\n`
  );
}

/** The helper text (both operand types, ldmatrix plain and transposed, the 16-byte cp.async (its commit / wait: cuda_dialect.ts), the quad reductions). */
export function mma16Helpers(): string {
  return (
    `// 16-bit tensor-core products for the flash attention kernels (codegen-cuda/mma.ts has the fragment\n` +
    `// layouts): mma.sync m16n8k16 with fp32 accumulation, ldmatrix for transposed B fragments, cp.async tile copies\n` +
    typed('bfloat') + '\n' + typed('half') + '\n' +
    `// four 8x8 16-bit matrices from shared memory, transposed: lanes 8i..8i+7 give the row addresses\n` +
    `// (16-byte aligned) of matrix i, register i of lane (g, t) gets its elements (rows 2t, 2t+1; col g)\n` +
    `${Q} void mpsc_ldsm_x4_trans(uint* r, const unsigned short* p) {\n` +
    `  const uint a = (uint)__cvta_generic_to_shared(p);\n` +
    `  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"\n` +
    `               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));\n}\n\n` +
    `// four 8x8 16-bit matrices from shared memory: lanes 8i..8i+7 give the row addresses (16-byte aligned)\n` +
    `// of matrix i, register i of lane (g, t) gets its elements (row g; cols 2t, 2t+1)\n` +
    `${Q} void mpsc_ldsm_x4(uint* r, const unsigned short* p) {\n` +
    `  const uint a = (uint)__cvta_generic_to_shared(p);\n` +
    `  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"\n` +
    `               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));\n}\n\n` +
    `// asynchronous 16-byte copy global -> shared (cp.async, sm_80+), zero-filled when !full (src then unread)\n` +
    `${Q} void mpsc_cp_async16(unsigned short* dst, const unsigned short* src, bool full) {\n` +
    `  const uint d = (uint)__cvta_generic_to_shared(dst);\n` +
    `  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(full ? 16u : 0u) : "memory");\n}\n\n` +

    `// 32 bits (two 16-bit elements) of shared memory\n` +
    `${Q} uint mpsc_ld32(const unsigned short* p) {\n  return *reinterpret_cast<const uint*>(p);\n}\n\n` +
    `// max / sum over the 4 lanes of a group (the lanes holding one row of a C fragment)\n` +
    `${Q} float mpsc_quad_max(float v) {\n` +
    `  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));\n  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));\n}\n\n` +
    `${Q} float mpsc_quad_sum(float v) {\n` +
    `  v += __shfl_xor_sync(0xffffffffu, v, 1);\n  return v + __shfl_xor_sync(0xffffffffu, v, 2);\n}\n`
  );
}

/**
 * The wgmma flash kernels' tile copy (plain C++ over mma16Helpers' mpsc_cp_async16, so test/cuda_flash_emu.test.ts runs this
 * very text over the CPU shim): rows [r0, r0 + 64) of a [rows x 64] 16-bit slab into a 128B-swizzled tile.
 */
export function sw128LoadHelper(): string {
  const load = (name: string, tid: string, who: string) =>
    `// rows [r0, r0 + 64) of a [rows x 64] 16-bit slab (row stride st elements) into a 128B-swizzled tile by 16-byte\n` +
    `// cp.async (zeros past rows); ${who}, 4 copies each\n` +
    `${Q} void ${name}(unsigned short* tile, const unsigned short* src, int st, int r0, int rows) {\n` +
    `  #pragma unroll\n  for (int i = 0; i < 4; ++i) {\n` +
    `    const int e = ${tid} + 128 * i, r = e >> 3, c = e & 7;\n    const bool in = r0 + r < rows;\n` +
    `    mpsc_cp_async16(tile + r * 64 + ((c ^ (r & 7)) << 3), src + (size_t)(in ? r0 + r : 0) * st + c * 8, in);\n  }\n}\n`;
  return (
    load('mpsc_sw128_load', '(int)threadIdx.x', '128 threads') + '\n' +
    load('mpsc_sw128_load_wg', '(int)(threadIdx.x & 127u)', 'the 128 threads of the calling warpgroup (a block of several)')
  );
}

/**
 * The Hopper warpgroup products of the wgmma flash kernels (attention_cuda.ts forwardBodyWgmma, gradKVBodyWgmma,
 * gradQBodyWgmma; MPSC_CUDA_FLASH_WGMMA;
 * sm_90a only: emitted only for a build that asks for them), as checked on an H100 by bench/wgmma_probe.cu:
 * `wgmma.mma_async m64n64k16` with fp32 accumulation, d (the warpgroup's 64 x 64 fp32 tile) in the mma.sync C-fragment
 * layout per warp (warp w: rows 16w + g and + 8; n8 tile j: columns 8j + 2t, + 1), so d[j][e] is the 16-row C
 * fragments the flash steps already read; SS: both operands in shared memory (K-major), RS: A in registers (the
 * m16n8k16 A fragment per warp) and B in shared memory as stored row-major [k][n] (MN-major, imm-trans-b = 1). Shared
 * tiles are 64 rows of 128 bytes, 1024-byte aligned, the 16-byte chunk c of row r at chunk c ^ (r % 8) (the 128-byte
 * swizzle); the descriptor: start >> 4, LBO 16 bytes (unused by a swizzled K-major tile), SBO 1024 (the 8-row atom),
 * layout 128B swizzle; a k16 step inside a row is + 32 bytes, down the rows of an MN-major B + 2048 bytes.
 */
export function wgmma16Helpers(): string {
  // the 32 accumulator operands %0 .. %31 and their constraints, d[j][e] = register 4j + e
  const regs = Array.from({ length: 32 }, (_, i) => `%${i}`).join(', ');
  const outs = Array.from({ length: 32 }, (_, i) => `"+f"(d[${i >> 2}][${i & 3}])`).join(', ');
  const typedOps = (t: Mma16Type): string => {
    const s = mmaSuffix(t);
    return (
      `// d (64 x 64 fp32, C fragments per warp) (+)= A (64 x 16 ${s}, shared) * B^T (64 x 16 ${s}, shared, K-major); accumulate != 0 adds to d\n` +
      `${Q} void mpsc_wgmma_ss_${s}(float (&d)[8][4], unsigned long long da, unsigned long long db, int accumulate) {\n` +
      `  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %34, 0;\\n"\n` +
      `               "wgmma.mma_async.sync.aligned.m64n64k16.f32.${s}.${s} {${regs}}, %32, %33, p, 1, 1, 0, 0;\\n}\\n"\n` +
      `               : ${outs}\n` +
      `               : "l"(da), "l"(db), "r"(accumulate));\n}\n\n` +
      `// d (+)= A (64 x 16 ${s}: this warp's m16n8k16 A fragment a) * B (16 x 64 ${s}, shared, stored [k][n]: MN-major)\n` +
      `${Q} void mpsc_wgmma_rs_tb_${s}(float (&d)[8][4], const uint (&a)[4], unsigned long long db, int accumulate) {\n` +
      `  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %37, 0;\\n"\n` +
      `               "wgmma.mma_async.sync.aligned.m64n64k16.f32.${s}.${s} {${regs}}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\\n}\\n"\n` +
      `               : ${outs}\n` +
      `               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));\n}\n\n`
    );
  };
  return (
    `// Hopper warpgroup products (wgmma, sm_90a) of the flash kernels over 128B-swizzled shared tiles (codegen-cuda/mma.ts)\n` +
    typedOps('bfloat') + typedOps('half') +
    `// the descriptor of a 128B-swizzled tile (1024-byte aligned) from element p on: LBO 16 bytes, SBO 1024\n` +
    `${Q} unsigned long long mpsc_sw128_desc(const unsigned short* p) {\n` +
    `  const uint a = (uint)__cvta_generic_to_shared(p);\n` +
    `  return (unsigned long long)((a & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);\n}\n\n` +
    `// the first 1024-byte aligned place (in the shared address space) of dynamic shared memory tg: the wgmma dK/dV kernel's tiles\n` +
    `${Q} unsigned short* mpsc_sw128_base(float* tg) {\n` +
    `  const uint a = (uint)__cvta_generic_to_shared(tg);\n` +
    `  return reinterpret_cast<unsigned short*>(reinterpret_cast<char*>(tg) + ((1024u - (a & 1023u)) & 1023u));\n}\n\n` +
    sw128LoadHelper() + '\n' +
    `// generic-proxy writes (cp.async's) made visible to the products' async proxy; wgmma fence / commit / wait\n` +
    `${Q} void mpsc_fence_proxy_async() {\n  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");\n}\n\n` +
    `${Q} void mpsc_wgmma_fence() {\n  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n}\n\n` +
    `${Q} void mpsc_wgmma_commit() {\n  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n}\n\n` +
    `${Q} void mpsc_wgmma_wait0() {\n  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n}\n\n` +
    `// every committed product group but the youngest done\n` +
    `${Q} void mpsc_wgmma_wait1() {\n  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");\n}\n`
  );
}

/**
 * The 3xTF32 product of the fp32 flash attention (attention_tf32x3.ts): c (a 16x8 fp32 C fragment) +=
 * a (16x8) * b (8x8) with both operands split as x = hi + lo (mpsc_split_tf32_hl: hi = tf32(x) rounded to
 * nearest, ties away, as cvt.rna.tf32.f32 rounds, but as an integer add of half a TF32 ulp and a mask: ptxas
 * 13.0 expands the cvt to about four instructions for sm_90, so the 3xTF32 attention kernels' code is ~16%
 * shorter, with bitwise the same values for every finite x and inf (a NaN x may give hi = +-0 where the add
 * carries out of the exponent, but then lo = x - hi is NaN and so is the product); lo = x - hi, exact in fp32 and passed as is: the
 * tensor cores read its TF32 bits, a truncation whose dropped part is under 2^-10 |lo| <= 2^-21 |x|; no
 * rounding of lo, unlike cuda_dialect.ts mpsc_split_tf32); a*b ~ ah*bh + ah*bl + al*bh, the small products first
 * (al*bl, under 2^-21 |a b|, is left out), three `mma.sync.m16n8k8` TF32 with fp32 accumulation (mpsc_mma16x8).
 * m16n8k8 TF32 fragments, lane (g, t) = (l / 4, l % 4): A a[0] = (row g, k t), a[1] = (g + 8, t),
 * a[2] = (g, t + 4), a[3] = (g + 8, t + 4); B b[0] = (k t, col g), b[1] = (k t + 4, g); C as m16n8k16's.
 * The k order of a product is free (any permutation applied to both operands gives the same sum):
 * reading k slot t as column 2t and slot t + 4 as column 2t + 1 makes a C fragment of one product
 * ({c0, c2, c1, c3}: rows g, g + 8 at columns 2t, 2t + 1) the A fragment of the next one's k-step,
 * with B's rows 2t and 2t + 1 (cuda_dialect.ts has the plain helpers; these only add the product and split).
 */
export function tf32x3MmaHelpers(): string {
  return (
    `// c (16x8 fp32) += a (16x8) * b (8x8) as 3xTF32: a = ah + al, b = bh + bl (mpsc_split_tf32_hl), three m16n8k8 TF32 mma,\n` +
    `// the small products first; al * bl (under 2^-21 relative) left out (codegen-cuda/mma.ts: fragments)\n` +
    `${Q} void mpsc_mma_tf32x3(float* c, const uint* ah, const uint* al, const uint* bh, const uint* bl) {\n` +
    `  mpsc_mma16x8(c, al, bh);\n  mpsc_mma16x8(c, ah, bl);\n  mpsc_mma16x8(c, ah, bh);\n}\n\n` +
    `// x = hi + lo for mpsc_mma_tf32x3: hi = tf32(x) rounded to nearest, ties away (cvt.rna's value, by an integer add\n` +
    `// and a mask: two instructions where ptxas expands cvt.rna.tf32.f32 to four; a NaN x may give hi = +-0, lo is then\n` +
    `// NaN), lo = x - hi (exact in fp32) as is: the tensor cores read its TF32 bits (the truncated part is under 2^-21 |x|)\n` +
    `${Q} void mpsc_split_tf32_hl(float x, uint& hi, uint& lo) {\n` +
    `  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;\n  lo = __float_as_uint(x - __uint_as_float(hi));\n}\n`
  );
}
