/**
 * cuda_dialect: the CUDA C++ dialect of the GPU kernel language (compiler/kernels/dialect.ts),
 * the second target after MSL. Produces CUDA C++ for nvcc (sm_90a and older): generic
 * pointers (no address-space qualifiers), `extern "C" __global__` kernels taking the buffers
 * and StepParams by value, `__shared__` memory sized at compile time, the built-ins computed
 * from threadIdx / blockIdx / blockDim, `__syncthreads()`, SIMD-group reductions as warp
 * butterflies (`__shfl_xor_sync` over the full warp: the kernels call them with whole warps in
 * uniform control flow), single-precision libm names (`expf`; nvcc is not given fast math),
 * and the 8x8 matrix unit as scalar code in which lane l of a warp owns elements 2l and 2l+1
 * of the 8x8 accumulator. (Issue 14 will add a tensor-core variant of the matrix unit; the
 * interface stays the same.) Nothing here runs on a GPU in this repository: the CUDA test
 * compiles every rendered kernel with nvcc.
 */
import { CStyleDialect, type Builtin, type KernelDecl, type MathFn, builtinsOf } from '../kernels/dialect.js';

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
  fileHeader(): string {
    return '#include <cuda_runtime.h>\n#include <math.h>\ntypedef unsigned int uint;\n';
  }
  mulhi(a: string, b: string): string {
    return `__umulhi(${a}, ${b})`;
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
    return (
      `// SIMD-group (warp of 32) reductions: butterflies over the full warp, every lane gets the result\n` +
      `${q} float mpsc_warp_sum(float v) {\n` +
      `  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n  return v;\n}\n\n` +
      `${q} float mpsc_warp_max(float v) {\n` +
      `  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n  return v;\n}\n\n` +
      `// the 8x8 matrix unit in scalar code: an operand is its top-left element in shared memory and\n` +
      `// its row length; lane l of the warp owns accumulator elements 2l and 2l+1 (row 2l / 8)\n` +
      `struct mpsc_mat8 { const float* p; uint ld; };\n` +
      `struct mpsc_acc8 { float v[2]; };\n\n` +
      `${q} void mpsc_mat8_mac(mpsc_acc8& acc, const mpsc_mat8 a, const mpsc_mat8 b) {\n` +
      `  const uint e = (${TIDX} % 32u) * 2u, r = e / 8u, c = e % 8u;\n` +
      `  for (uint j = 0u; j < 2u; ++j) {\n` +
      `    float s = acc.v[j];\n` +
      `    for (uint k = 0u; k < 8u; ++k) s += a.p[r * a.ld + k] * b.p[k * b.ld + c + j];\n` +
      `    acc.v[j] = s;\n  }\n}\n\n` +
      `${q} void mpsc_mat8_store(const mpsc_acc8& acc, float* dst, uint ld) {\n` +
      `  const uint e = (${TIDX} % 32u) * 2u, r = e / 8u, c = e % 8u;\n` +
      `  dst[r * ld + c] = acc.v[0];\n  dst[r * ld + c + 1u] = acc.v[1];\n}\n`
    );
  }
  kernel(k: KernelDecl): string {
    const params = k.args.map((a) => `    ${a.access === 'r' ? 'const ' : ''}${a.type}* ${a.name}`);
    params.push('    const StepParams sp');
    const threads = k.tgsize[0] * k.tgsize[1] * k.tgsize[2];
    const pre: string[] = [];
    if (k.tgmem > 0) pre.push(`  __shared__ float tg[${k.tgmem / 4}];`);
    for (const b of builtinsOf(k.body)) pre.push(`  ${DEFINE[b]}`);
    return `// ${k.comment}\nextern "C" __global__ void __launch_bounds__(${threads}) ${k.name}(\n${params.join(',\n')})\n{\n` +
      `${pre.map((l) => l + '\n').join('')}${k.body.replace(/\n+$/, '')}\n}`;
  }
}

/** The CUDA dialect (stateless). */
export const CUDA = new CudaDialect();
