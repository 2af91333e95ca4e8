/**
 * cuda_dialect: the CUDA C++ dialect of the GPU kernel language (compiler/kernels/dialect.ts),
 * the second target after MSL. Produces CUDA C++ for nvcc (sm_90a and older): generic
 * pointers (no address-space qualifiers), `extern "C" __global__` kernels taking the buffers
 * and StepParams by value, `__shared__` memory sized at compile time, the built-ins computed
 * from threadIdx / blockIdx / blockDim, `__syncthreads()`, SIMD-group reductions as warp
 * butterflies (`__shfl_xor_sync` over the full warp: the kernels call them with whole warps in
 * uniform control flow), single-precision libm names (`expf`; nvcc gets `-fmad=true` and no
 * fast math, so results stay within 1e-4 of the float64 reference), and the 8x8 matrix unit on
 * the tensor cores as 3xTF32 (split precision: fp32 accuracy, unlike plain TF32, which PyTorch
 * does not use for fp32 matmuls either): `mma.sync.m16n8k8` with the upper 8 rows zero.
 * The step scalars are read through a pointer (`spp`) into device memory, so a captured CUDA
 * graph never needs re-capture when lr / t / seed / counter change.
 * 16-bit buffers (a 16-bit train precision) are `__half` (cuda_fp16.h) and `__nv_bfloat16`
 * (cuda_bf16.h), included only by files whose kernels use them; read through `__half2float` /
 * `__bfloat162float` (exact) and written through `__float2half_rn` / `__float2bfloat16_rn`
 * (round to nearest even, overflow to inf, subnormals kept).
 */
import { CStyleDialect, eight, type Builtin, type ElemType, type HalfElem, type VecElem, type KernelDecl, type MathFn, builtinsOf } from '../kernels/dialect.js';

const TYPE: Record<ElemType, string> = { float: 'float', int: 'int', half: '__half', bfloat: '__nv_bfloat16' };

const TIDX = '(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))';
const DEFINE: Record<Builtin, string> = {
  gid: 'const uint3 gid = make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y, blockIdx.z * blockDim.z + threadIdx.z);',
  tgid: 'const uint3 tgid = blockIdx;',
  tid: 'const uint3 tid = threadIdx;',
  tidx: `const uint tidx = ${TIDX};`,
  lane: `const uint lane = ${TIDX} % 32u;`,
  sg: `const uint sg = ${TIDX} / 32u;`,
};

class CudaDialect extends CStyleDialect {
  readonly name = 'cuda';
  /**
   * programmatic dependent launch (pdl.ts): every kernel first waits for the grids before it in its stream
   * (`griddepcontrol.wait`: their completion and memory), then lets the next grid launch; the host launches a
   * kernel with the PDL attribute only right after another generated kernel
   */
  constructor(readonly pdl = false) {
    super();
  }
  readonly helperQual = '__device__ __forceinline__';
  readonly space = { global: '', constant: '', shared: '', local: '' };
  protected readonly mathNames: Record<MathFn, string> = {
    exp: 'expf', expm1: 'expm1f', log: 'logf', log1p: 'log1pf', sqrt: 'sqrtf', tanh: 'tanhf', erf: 'erff', erfc: 'erfcf',
    pow: 'powf', abs: 'fabsf', max: 'fmaxf', min: 'fminf',
  };
  readonly mma = {
    declAcc: (m: string) => `mpsc_acc8 ${m} = {{0.0f, 0.0f}};`,
    declOperand: (m: string) => `mpsc_mat8 ${m};`,
    load: (m: string, src: string, ld: number, col: string, row: string) => `${m} = mpsc_mat8{${src} + (${row}) * ${ld}u + (${col}), ${ld}u};`,
    mac: (acc: string, a: string, b: string) => `mpsc_mat8_mac(${acc}, ${a}, ${b});`,
    store: (m: string, dst: string, ld: number, col: string, row: string) => `mpsc_mat8_store(${m}, ${dst} + (${row}) * ${ld}u + (${col}), ${ld}u);`,
  };
  fileHeader(halves: ReadonlySet<HalfElem>): string {
    const inc = (halves.has('half') ? '#include <cuda_fp16.h>\n' : '') + (halves.has('bfloat') ? '#include <cuda_bf16.h>\n' : '');
    return `#include <cuda_runtime.h>\n#include <math.h>\n${inc}typedef unsigned int uint;\n`;
  }
  typeName(t: ElemType): string {
    return TYPE[t];
  }
  toFloat(t: HalfElem, x: string): string {
    return t === 'half' ? `__half2float(${x})` : `__bfloat162float(${x})`;
  }
  fromFloat(t: HalfElem, x: string): string {
    return t === 'half' ? `__float2half_rn(${x})` : `__float2bfloat16_rn(${x})`;
  }
  mulhi(a: string, b: string): string {
    return `__umulhi(${a}, ${b})`;
  }
  exp2(x: string): string {
    return `exp2f(${x})`;
  }
  fma(a: string, b: string, c: string): string {
    return `fmaf(${a}, ${b}, ${c})`;
  }
  /** one 16-byte load (uint4), its four pairs widened by __bfloat1622float2 / __half22float2 (exact); f32: two float4 loads */
  load8(t: VecElem, ptr: string, v: string, names: readonly string[]): string {
    eight('load8', names);
    if (t === 'float') {
      const q = `${names[0]}_f`;
      return `const float4 ${q}0 = *reinterpret_cast<const float4*>(${ptr} + 8u * (${v})), ${q}1 = *reinterpret_cast<const float4*>(${ptr} + 8u * (${v}) + 4u);\n` +
        `    const float ${names.map((x, k) => `${x} = ${q}${k >> 2}.${'xyzw'[k & 3]}`).join(', ')};`;
    }
    const q = `${names[0]}_q`, pair = t === 'half' ? '__half2' : '__nv_bfloat162', wide = t === 'half' ? '__half22float2' : '__bfloat1622float2';
    const parts = ['x', 'y', 'z', 'w'].map((c, i) => `${names[2 * i]}_p = ${wide}(*reinterpret_cast<const ${pair}*>(&${q}.${c}))`);
    return `const uint4 ${q} = *reinterpret_cast<const uint4*>(${ptr} + 8u * (${v}));\n` +
      `    const float2 ${parts.join(', ')};\n` +
      `    const float ${names.map((x, k) => `${x} = ${names[k & ~1]}_p.${k & 1 ? 'y' : 'x'}`).join(', ')};`;
  }
  /** four pairs rounded by __floats2bfloat162_rn / __floats2half2_rn (each to nearest even, as fromFloat), one 16-byte store; f32: two float4 stores */
  store8(t: VecElem, ptr: string, v: string, vals: readonly string[]): string {
    eight('store8', vals);
    if (t === 'float') {
      return `{ *reinterpret_cast<float4*>(${ptr} + 8u * (${v})) = make_float4(${vals.slice(0, 4).join(', ')}); ` +
        `*reinterpret_cast<float4*>(${ptr} + 8u * (${v}) + 4u) = make_float4(${vals.slice(4).join(', ')}); }`;
    }
    const pack = t === 'half' ? '__floats2half2_rn' : '__floats2bfloat162_rn', pair = t === 'half' ? '__half2' : '__nv_bfloat162';
    const h = [0, 1, 2, 3].map((i) => `const ${pair} h${i} = ${pack}(${vals[2 * i]}, ${vals[2 * i + 1]});`).join(' ');
    return `{ ${h} uint4 q; q.x = *reinterpret_cast<const uint*>(&h0); q.y = *reinterpret_cast<const uint*>(&h1); ` +
      `q.z = *reinterpret_cast<const uint*>(&h2); q.w = *reinterpret_cast<const uint*>(&h3); *reinterpret_cast<uint4*>(${ptr} + 8u * (${v})) = q; }`;
  }
  barrier(): string {
    return '__syncthreads();';
  }
  simdSum(v: string): string {
    return `mpsc_warp_sum(${v})`;
  }
  simdMax(v: string): string {
    return `mpsc_warp_max(${v})`;
  }
  helpers(): string {
    const q = this.helperQual;
    return (this.pdl ? pdlHelper(q) : '') + (
      `// SIMD-group (warp of 32) reductions: butterflies over the full warp, every lane gets the result\n` +
      `${q} float mpsc_warp_sum(float v) {\n` +
      `  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n  return v;\n}\n\n` +
      `${q} float mpsc_warp_max(float v) {\n` +
      `  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n  return v;\n}\n\n` +
      `// asynchronous copies global -> shared (cp.async, sm_80+; mma.ts adds a 16-byte one for 16-bit tiles): a 4-byte copy,\n` +
      `// zero-filled when !ok (src then unread); commit closes this thread's group of copies; wait<N> waits until\n` +
      `// at most its N youngest committed groups are in flight (a __syncthreads() then makes every thread's visible)\n` +
      `${q} void mpsc_cp_async4(float* dst, const float* src, bool ok) {\n` +
      `  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"((uint)__cvta_generic_to_shared(dst)), "l"(src), "r"(ok ? 4u : 0u) : "memory");\n}\n\n` +
      `// 4 floats in one copy (src and dst 16-byte aligned), zero-filled when !ok\n` +
      `${q} void mpsc_cp_async16f(float* dst, const float* src, bool ok) {\n` +
      `  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" :: "r"((uint)__cvta_generic_to_shared(dst)), "l"(src), "r"(ok ? 16u : 0u) : "memory");\n}\n\n` +
      `${q} void mpsc_cp_async_commit() {\n  asm volatile("cp.async.commit_group;" ::: "memory");\n}\n\n` +
      `template <int N>\n${q} void mpsc_cp_async_wait() {\n  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");\n}\n\n` +
      `${q} void mpsc_cp_async_wait_all() {\n  mpsc_cp_async_wait<0>();\n}\n\n` +
      `// the 8x8 matrix unit on the tensor cores, fp32-accurate by 3xTF32 split precision: each operand\n` +
      `// x = hi + lo with hi = tf32(x), lo = tf32(x - hi); a*b ~ hi_a*hi_b + hi_a*lo_b + lo_a*hi_b (the dropped\n` +
      `// lo_a*lo_b is below 2^-22 relative), accumulated in fp32 by mma.sync m16n8k8 whose rows 8..15 are\n` +
      `// zero. An operand is its top-left element in shared memory and its row length; lane l owns\n` +
      `// accumulator elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1), the mma C-fragment layout.\n` +
      `struct mpsc_mat8 { const float* p; uint ld; };\n` +
      `struct mpsc_acc8 { float v[2]; };\n\n` +
      `${q} uint mpsc_tf32(float x) {\n` +
      `  uint r;\n  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));\n  return r;\n}\n\n` +
      `// round to TF32, ties to even (sm_90's conversion instruction; conv_cuda.ts MPSC_CONV_ROUND=rn)\n` +
      `${q} uint mpsc_tf32_rn(float x) {\n` +
      `  uint r;\n  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));\n  return r;\n}\n\n` +
      `${q} void mpsc_mma_tf32(mpsc_acc8& acc, uint a0, uint a2, uint b0, uint b1) {\n` +
      `  float d2 = 0.0f, d3 = 0.0f;\n` +
      `  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n` +
      `               : "+f"(acc.v[0]), "+f"(acc.v[1]), "+f"(d2), "+f"(d3)\n` +
      `               : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));\n}\n\n` +
      `// x = hi + lo, both tf32 (the 3xTF32 split)\n` +
      `${q} void mpsc_split_tf32(float x, uint& hi, uint& lo) {\n` +
      `  hi = mpsc_tf32(x);\n  lo = mpsc_tf32(x - __uint_as_float(hi));\n}\n\n` +
      `// c (a 16x8 fp32 C-fragment) += a (16x8 tf32 A-fragment) * b (8x8 tf32 B-fragment)\n` +
      `${q} void mpsc_mma16x8(float* c, const uint* a, const uint* b) {\n` +
      `  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n` +
      `               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n` +
      `               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));\n}\n\n` +
      `${q} void mpsc_mat8_mac(mpsc_acc8& acc, const mpsc_mat8 a, const mpsc_mat8 b) {\n` +
      `  const uint l = ${TIDX} % 32u, g = l / 4u, t = l % 4u;\n` +
      `  const float a0 = a.p[g * a.ld + t], a2 = a.p[g * a.ld + t + 4u];\n` +
      `  const float b0 = b.p[t * b.ld + g], b1 = b.p[(t + 4u) * b.ld + g];\n` +
      `  const uint a0h = mpsc_tf32(a0), a2h = mpsc_tf32(a2), b0h = mpsc_tf32(b0), b1h = mpsc_tf32(b1);\n` +
      `  const uint a0l = mpsc_tf32(a0 - __uint_as_float(a0h)), a2l = mpsc_tf32(a2 - __uint_as_float(a2h));\n` +
      `  const uint b0l = mpsc_tf32(b0 - __uint_as_float(b0h)), b1l = mpsc_tf32(b1 - __uint_as_float(b1h));\n` +
      `  mpsc_mma_tf32(acc, a0l, a2l, b0h, b1h);\n` +
      `  mpsc_mma_tf32(acc, a0h, a2h, b0l, b1l);\n` +
      `  mpsc_mma_tf32(acc, a0h, a2h, b0h, b1h);\n}\n\n` +
      `${q} void mpsc_mat8_store(const mpsc_acc8& acc, float* dst, uint ld) {\n` +
      `  const uint l = ${TIDX} % 32u, r = l / 4u, c = (l % 4u) * 2u;\n` +
      `  dst[r * ld + c] = acc.v[0];\n  dst[r * ld + c + 1u] = acc.v[1];\n}\n`
    );
  }
  kernel(k: KernelDecl): string {
    const params = k.args.map((a) => `    ${a.access === 'r' ? 'const ' : ''}${TYPE[a.type]}* ${a.name}`);
    // the step scalars live in device memory (a CUDA graph replays the launch with the same
    // arguments; the host updates the values between replays)
    // split-K partial sums (gemm_cuda.ts): the plan's scratch region, bound after the buffers
    if (/\bmpsc_scratch\b/.test(k.body)) params.push('    float* __restrict__ mpsc_scratch');
    params.push('    const StepParams* __restrict__ spp');
    const threads = k.tgsize[0] * k.tgsize[1] * k.tgsize[2];
    const pre: string[] = [];
    // before any memory access, the step scalars included (pdl.ts)
    if (this.pdl) pre.push('  mpsc_pdl_enter();');
    if (/\bsp\b/.test(k.body)) pre.push('  const StepParams sp = *spp;');
    // past 48 KB a block's shared memory is dynamic: the launch passes its bytes, create raises the kernel's limit (host.ts)
    if (k.tgmem > SMEM_STATIC_MAX) pre.push(`  extern __shared__ __align__(16) float tg[];  // ${k.tgmem} bytes, dynamic`);
    // 16-byte copies (conv_cuda.ts MPSC_CONV_VEC16) and float4 reads (gemm_cuda.ts's small FFMA kernel) need 16-byte alignment
    else if (k.tgmem > 0) pre.push(`  __shared__ ${/\bmpsc_cp_async16f\b|\bfloat4\b/.test(k.body) ? '__align__(16) ' : ''}float tg[${k.tgmem / 4}];`);
    for (const b of builtinsOf(k.body)) pre.push(`  ${DEFINE[b]}`);
    return `// ${k.comment}\nextern "C" __global__ void __launch_bounds__(${threads}${k.minBlocks ? `, ${k.minBlocks}` : ''}) ${k.name}(\n${params.join(',\n')})\n{\n` +
      `${pre.map((l) => l + '\n').join('')}${k.body.replace(/\n+$/, '')}\n}`;
  }
}

/** bytes of static shared memory a CUDA kernel may declare; a kernel asking for more gets it dynamically (host.ts) */
export const SMEM_STATIC_MAX = 48 * 1024;

/**
 * programmatic dependent launch (sm_90+; older GPUs run the kernel as without it): wait for the previous grids
 * of the stream (complete, their writes visible), then allow the next kernel's blocks to be scheduled
 */
function pdlHelper(q: string): string {
  return `// programmatic dependent launch (pdl.ts): the first statement of every kernel\n` +
    `${q} void mpsc_pdl_enter() {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n` +
    `  asm volatile("griddepcontrol.wait;" ::: "memory");\n  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n#endif\n}\n\n`;
}

/** The CUDA dialect (stateless). */
export const CUDA = new CudaDialect();
/** The CUDA dialect whose kernels start with the programmatic-dependent-launch prologue (pdl.ts) */
export const CUDA_PDL = new CudaDialect(true);
