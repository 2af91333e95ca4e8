/**
 * msl_dialect: the Metal Shading Language dialect of the GPU kernel language
 * (compiler/kernels/dialect.ts). Produces MSL 2.3+ text: explicit address spaces on every
 * pointer (device / constant / threadgroup), [[buffer(n)]] on every buffer with the constant
 * StepParams after them, [[threadgroup(0)]] shared memory, only the built-in attributes a body
 * reads, metal::precise math (the libraries are compiled without fast math; erf, erfc, expm1
 * and log1p, which the Metal library lacks, from prelude helpers), simd_sum /
 * simd_max, simdgroup_float8x8 for the 8x8 matrix unit (Apple7+), with simdgroup_half8x8 /
 * simdgroup_bfloat8x8 operands for 16-bit GEMM operands (simdgroup_multiply_accumulate with a
 * float accumulator and 16-bit operands; bfloat8x8 is MSL 3.1, gated with the bfloat buffers).
 * No `std::`, no doubles.
 * 16-bit buffers (a 16-bit train precision) are MSL's `half` and `bfloat` (the latter MSL 3.1+:
 * the bridge compiles such a library at language version 3.1 and refuses a GPU without bfloat,
 * docs/metal.md), read by `float(x)` (exact) and written by `half(x)` / `bfloat(x)`, which round
 * to nearest even (MTLCompileOptions' narrowing-conversion rounding mode, whose default is
 * round-to-nearest-even).
 */
import { CStyleDialect, type Builtin, type ElemType, type HalfElem, type KernelDecl, type MathFn, builtinsOf } from '../kernels/dialect.js';

const ATTR: Record<Builtin, string> = {
  gid: 'thread_position_in_grid',
  tgid: 'threadgroup_position_in_grid',
  tid: 'thread_position_in_threadgroup',
  tidx: 'thread_index_in_threadgroup',
  lane: 'thread_index_in_simdgroup',
  sg: 'simdgroup_index_in_threadgroup',
};
const TYPE: Record<Builtin, string> = { gid: 'uint3', tgid: 'uint3', tid: 'uint3', tidx: 'uint', lane: 'uint', sg: 'uint' };

class MslDialect extends CStyleDialect {
  readonly name = 'msl';
  readonly helperQual = 'inline';
  readonly space = { global: 'device ', constant: 'constant ', shared: 'threadgroup ', local: 'thread ' };
  protected readonly mathNames: Record<MathFn, string> = {
    exp: 'precise::exp', log: 'precise::log', sqrt: 'precise::sqrt', tanh: 'precise::tanh', pow: 'precise::pow',
    abs: 'fabs', max: 'max', min: 'min',
    erf: 'mpsc_erf', erfc: 'mpsc_erfc', expm1: 'mpsc_expm1', log1p: 'mpsc_log1p',
  };
  // not in the Metal standard library: prelude helpers
  protected readonly mathHelpers = { erf: 'erf', erfc: 'erfc', expm1: 'expm1', log1p: 'log1p' } as const;
  readonly mma = {
    declAcc: (m: string) => `simdgroup_float8x8 ${m} = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);`,
    // mixed products: simdgroup_half8x8 / simdgroup_bfloat8x8 operands into a simdgroup_float8x8
    halfOperands: ['half', 'bfloat'] as const,
    declOperand: (m: string, t?: HalfElem) => `simdgroup_${t ?? 'float'}8x8 ${m};`,
    load: (m: string, src: string, ld: number, col: string, row: string) => `simdgroup_load(${m}, ${src}, ${ld}, ulong2(ulong(${col}), ulong(${row})));`,
    mac: (acc: string, a: string, b: string) => `simdgroup_multiply_accumulate(${acc}, ${a}, ${b}, ${acc});`,
    store: (m: string, dst: string, ld: number, col: string, row: string) => `simdgroup_store(${m}, ${dst}, ${ld}, ulong2(ulong(${col}), ulong(${row})));`,
  };
  fileHeader(halves: ReadonlySet<HalfElem>): string {
    const note = halves.has('bfloat') ? '// bfloat buffers: MSL 3.1 or later (MTLLanguageVersion3_1)\n' : '';
    return `${note}#include <metal_stdlib>\nusing namespace metal;\n`;
  }
  typeName(t: ElemType): string {
    return t;
  }
  toFloat(_t: HalfElem, x: string): string {
    return `float(${x})`;
  }
  fromFloat(t: HalfElem, x: string): string {
    return `${t}(${x})`;
  }
  exp2(x: string): string {
    return `precise::exp2(${x})`;
  }
  barrier(): string {
    return 'threadgroup_barrier(mem_flags::mem_threadgroup);';
  }
  simdSum(v: string): string {
    return `simd_sum(${v})`;
  }
  simdMax(v: string): string {
    return `simd_max(${v})`;
  }
  kernel(k: KernelDecl): string {
    const params = k.args.map((a, i) => `    device ${a.access === 'r' ? 'const ' : ''}${this.typeName(a.type)}* ${a.name} [[buffer(${i})]]`);
    params.push(`    constant StepParams& sp [[buffer(${k.args.length})]]`);
    if (k.tgmem > 0) params.push('    threadgroup float* tg [[threadgroup(0)]]');
    for (const b of builtinsOf(k.body)) params.push(`    ${TYPE[b]} ${b} [[${ATTR[b]}]]`);
    return `// ${k.comment}\nkernel void ${k.name}(\n${params.join(',\n')})\n{\n${k.body.replace(/\n+$/, '')}\n}`;
  }
}

/** The MSL dialect (stateless). */
export const MSL = new MslDialect();
