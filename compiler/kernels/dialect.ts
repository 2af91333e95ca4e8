/**
 * dialect: the GPU kernel language's target interface. Every GPU kernel of mpsc (compiler/kernels/*)
 * is written once as C-style text in which everything that differs between GPU languages is
 * asked of a `Dialect`: address-space qualifiers, the thread/group index built-ins, the kernel
 * signature and buffer bindings, barriers, SIMD-group (warp) reductions, the 8x8 matrix unit,
 * math function names and precision, literal spellings, and the function qualifier of the
 * helper prelude. A target is one object implementing this interface; `CStyleDialect` holds
 * what C-family GPU languages share, so MSL (compiler/codegen-metal/msl_dialect.ts) and CUDA
 * (compiler/codegen-cuda/cuda_dialect.ts) are small subclasses of it.
 *
 * What the kernel language itself fixes (every dialect must accept it as written):
 *  - C statements and expressions, `if`/`for`, `const`, function-style casts `uint(x)`, `int(x)`,
 *    `float(x)`; the scalar types `float`, `int`, `uint` (a dialect's file header typedefs
 *    `uint` where the language lacks it);
 *  - the 16-bit storage types `half` (IEEE binary16) and `bfloat` (bfloat16) of kernel buffers
 *    (ELEM_TYPES; a 16-bit train precision, compiler/ir/precision.ts): a body never computes in
 *    them. It reads an element as float through `toFloat` (exact) and writes one through
 *    `fromFloat` (round to nearest, ties to even: compiler/reference/half.ts's rule), so every
 *    16-bit rounding happens at a store the IR says (a `cast`, or a 16-bit output); `typeName` spells the
 *    type in a signature;
 *  - the built-in values by the names in BUILTINS (`gid.x`, `tgid.y`, `tid.x`, `tidx`, `lane`,
 *    `sg`), which the dialect's kernel signature or preamble defines when a body reads them;
 *  - `tg`, the kernel's shared (threadgroup) float memory, and `sp`, the step parameters
 *    (struct StepParams: lr, t, seed, counter);
 *  - SIMD-groups of 32 threads (SIMD in kernel_types.ts).
 * Consumes nothing; produces spellings. Plain strings cross files: a lowered kernel's body is
 * text in one dialect (the lowering is run once per target).
 */
import type { Access, Helper } from './kernel_types.js';
import type { MathFn as ScalarMathFn, ScalarLang } from '../ir/scalar_fns.js';
import { f32Lit, u32Lit } from '../cfamily/text.js';

/**
 * Math functions the kernels call (float arguments and result): those of the scalar-math
 * table (compiler/ir/scalar_fns.ts, with their meaning there: max / min of non-NaN values,
 * abs the float absolute value) and pow.
 */
export type MathFn = ScalarMathFn | 'pow';
/** The math functions a dialect may compute with a prelude helper (prelude.ts) instead of a library call. */
export type MathHelper = Extract<Helper, 'erf' | 'erfc' | 'expm1' | 'log1p'>;

/** The built-in index values a kernel body may read, with their kernel-language types. */
export const BUILTINS = [
  { name: 'gid', type: 'uint3', what: 'thread position in the grid (x, y, z)' },
  { name: 'tgid', type: 'uint3', what: 'threadgroup (block) position in the grid' },
  { name: 'tid', type: 'uint3', what: 'thread position in its threadgroup' },
  { name: 'tidx', type: 'uint', what: 'linear thread index in its threadgroup' },
  { name: 'lane', type: 'uint', what: 'thread index in its SIMD-group (warp)' },
  { name: 'sg', type: 'uint', what: 'SIMD-group (warp) index in its threadgroup' },
] as const;
export type Builtin = (typeof BUILTINS)[number]['name'];

/** The built-ins a body reads, in BUILTINS order (the order kernel signatures list them in). */
export function builtinsOf(body: string): Builtin[] {
  return BUILTINS.filter((b) => new RegExp(`\\b${b.name}\\b`).test(body)).map((b) => b.name);
}

/** Element types of kernel buffers: the 32-bit `float` / `int` and the 16-bit storage types. */
export const ELEM_TYPES = ['float', 'int', 'half', 'bfloat'] as const;
export type ElemType = (typeof ELEM_TYPES)[number];
/** the 16-bit float storage types (read and written through toFloat / fromFloat only) */
export type HalfElem = Extract<ElemType, 'half' | 'bfloat'>;
export const isHalfElem = (t: ElemType): t is HalfElem => t === 'half' || t === 'bfloat';
/** the element types load8 / store8 take: 16-bit (8 values = 16 bytes) and f32 (8 values = 32 bytes) */
export type VecElem = HalfElem | 'float';
export const isVecElem = (t: ElemType): t is VecElem => t === 'float' || isHalfElem(t);

/** The float value of element expression `x` of a buffer of type `t` (itself unless 16-bit). */
export function asFloat(d: Dialect, t: ElemType, x: string): string {
  return isHalfElem(t) ? d.toFloat(t, x) : x;
}

/** Everything a dialect needs to write one kernel function around its body. */
export interface KernelDecl {
  name: string;
  /** one line, already safe inside a comment */
  comment: string;
  /** buffers in binding order; the step parameters follow them */
  args: { name: string; type: ElemType; access: Access }[];
  /** bytes of shared (threadgroup) memory, `tg` (0: none) */
  tgmem: number;
  /** threads per threadgroup */
  tgsize: [number, number, number];
  /** blocks per SM its registers must allow (CUDA's __launch_bounds__; other dialects ignore it) */
  minBlocks?: number;
  /** the statements (indented by two spaces) */
  body: string;
}

/** Address spaces of pointers (the qualifier text, with its trailing space, or ''). */
export interface AddressSpaces {
  /** device memory (kernel buffers) */
  global: string;
  /** read-only uniform memory */
  constant: string;
  /** threadgroup / shared memory */
  shared: string;
  /** per-thread memory */
  local: string;
}

/**
 * The 8x8 matrix unit with a float accumulator, used by one SIMD-group (32 threads) collectively:
 * every call is made by all 32 threads of the SIMD-group, with the same arguments. Operands are
 * loaded from shared memory and multiplied before that memory changes (the kernels put barriers
 * around it). `origin` is (column, row) of the 8x8 block's top-left element; `ld` the row length
 * in elements of the shared array. Operands are float, or one of `halfOperands` (mixed products:
 * 16-bit operands loaded from 16-bit shared memory, each product exact in float, float sums).
 */
export interface MatrixUnit {
  /** the 16-bit operand types the unit multiplies into a float accumulator (absent: float operands only) */
  readonly halfOperands?: readonly HalfElem[];
  /** declare an accumulator filled with 0 */
  declAcc(name: string): string;
  /** declare an operand of element type `t` (default float; a 16-bit type only if listed in halfOperands) */
  declOperand(name: string, t?: HalfElem): string;
  load(dst: string, src: string, ld: number, col: string, row: string): string;
  /** acc = a * b + acc */
  mac(acc: string, a: string, b: string): string;
  store(src: string, dst: string, ld: number, col: string, row: string): string;
}

export interface Dialect {
  /** short name ('msl', 'cuda'); file extensions and messages */
  readonly name: string;
  /** first lines of a kernel file: includes, namespaces, typedefs the kernel language needs (`halves`: the 16-bit types its kernels use) */
  fileHeader(halves: ReadonlySet<HalfElem>): string;
  /** the element type's name in a kernel signature */
  typeName(t: ElemType): string;
  /** expression: the 16-bit value `x` widened to float (exact) */
  toFloat(t: HalfElem, x: string): string;
  /** expression: the float `x` rounded to the 16-bit type (round to nearest, ties to even; overflow to ±inf, subnormals kept) */
  fromFloat(t: HalfElem, x: string): string;
  /** qualifier in front of the prelude's helper functions */
  readonly helperQual: string;
  readonly space: AddressSpaces;
  /** float literal (exact value of Math.fround(x)) */
  f(x: number): string;
  /** unsigned literal */
  u(n: number): string;
  /** a math function at full precision (the kernels are compiled without fast math) */
  math(fn: MathFn, ...args: string[]): string;
  /** the prelude helper `math(fn)` calls, if the target's library lacks fn (MSL has no erf, erfc, expm1, log1p) */
  helperFor(fn: MathFn): MathHelper | null;
  /** the scalar-math table's rendering hooks (literals, math calls, select) in this dialect */
  readonly scalar: ScalarLang;
  /** min of two ints */
  imin(a: string, b: string): string;
  /** high 32 bits of the 64-bit product of two uints */
  mulhi(a: string, b: string): string;
  /** expression: 2^x by the target's base-2 exponential (CUDA exp2f: the hardware's ex2, 2 ulp; MSL precise::exp2) */
  exp2(x: string): string;
  /** expression: a * b + c rounded once */
  fma(a: string, b: string, c: string): string;
  /**
   * statements: declare the floats `names[k]` = `ptr[8 * v + k]` (a 16-bit value widened), k < 8 (`v` a uint expression;
   * ptr + 8v 16-byte aligned for 16-bit t, 32-byte for f32): one 16-byte load (two for f32) where the target has
   * them, else eight element loads
   */
  load8(t: VecElem, ptr: string, v: string, names: readonly string[]): string;
  /** statement: `ptr[8 * v + k]` = the float `vals[k]` (rounded to a 16-bit t as fromFloat), k < 8; one 16-byte store (two for f32) where the target has them */
  store8(t: VecElem, ptr: string, v: string, vals: readonly string[]): string;
  /** statement: every thread of the threadgroup waits; shared memory writes become visible */
  barrier(): string;
  /** sum / max over the 32 threads of a SIMD-group; every thread gets the result (uniform control flow) */
  simdSum(v: string): string;
  simdMax(v: string): string;
  readonly mma: MatrixUnit;
  /** helper functions the dialect needs itself (after the StepParams struct; may be '') */
  helpers(): string;
  /** the kernel function: signature, bindings, built-ins the body reads, shared memory, body */
  kernel(k: KernelDecl): string;
}

/** `xs` when it holds the 8 names / values of a load8 / store8 (an internal error otherwise) */
export function eight(what: 'load8' | 'store8', xs: readonly string[]): readonly string[] {
  if (xs.length !== 8) throw new Error(`internal: ${what} takes 8 ${what === 'load8' ? 'names' : 'values'}, not ${xs.length}`);
  return xs;
}

/**
 * What C-family GPU languages share: the literal policy of cfamily/text.ts, C's `?:` for the
 * scalar table's select, plain `int` min, `mulhi`. A target supplies the rest.
 */
export abstract class CStyleDialect implements Dialect {
  abstract readonly name: string;
  abstract readonly helperQual: string;
  abstract readonly space: AddressSpaces;
  abstract readonly mma: MatrixUnit;
  /** name of each math function */
  protected abstract readonly mathNames: Record<MathFn, string>;
  /** the math functions computed by prelude helpers (their names in mathNames are the helpers') */
  protected readonly mathHelpers: Partial<Record<MathFn, MathHelper>> = {};
  readonly scalar: ScalarLang = {
    lit: (v) => this.f(v),
    call: (fn, args) => this.math(fn, ...args),
    select: (c, a, b) => `${c} ? ${a} : ${b}`,
  };
  abstract fileHeader(halves: ReadonlySet<HalfElem>): string;
  abstract typeName(t: ElemType): string;
  abstract toFloat(t: HalfElem, x: string): string;
  abstract fromFloat(t: HalfElem, x: string): string;
  abstract barrier(): string;
  abstract simdSum(v: string): string;
  abstract simdMax(v: string): string;
  abstract kernel(k: KernelDecl): string;
  f(x: number): string {
    return f32Lit(x);
  }
  u(n: number): string {
    return u32Lit(n);
  }
  math(fn: MathFn, ...args: string[]): string {
    return `${this.mathNames[fn]}(${args.join(', ')})`;
  }
  helperFor(fn: MathFn): MathHelper | null {
    return this.mathHelpers[fn] ?? null;
  }
  imin(a: string, b: string): string {
    return `min(${a}, ${b})`;
  }
  mulhi(a: string, b: string): string {
    return `mulhi(${a}, ${b})`;
  }
  exp2(x: string): string {
    return `exp2(${x})`;
  }
  fma(a: string, b: string, c: string): string {
    return `fma(${a}, ${b}, ${c})`;
  }
  load8(t: VecElem, ptr: string, v: string, names: readonly string[]): string {
    return `const float ${eight('load8', names).map((x, k) => `${x} = ${asFloat(this, t, `${ptr}[8u * (${v}) + ${k}u]`)}`).join(', ')};`;
  }
  store8(t: VecElem, ptr: string, v: string, vals: readonly string[]): string {
    return `{ ${eight('store8', vals).map((x, k) => `${ptr}[8u * (${v}) + ${k}u] = ${t === 'float' ? x : this.fromFloat(t, x)};`).join(' ')} }`;
  }
  helpers(): string {
    return '';
  }
}
