/**
 * scalar_cpp: the C++ (float) spelling of the scalar expression language of
 * compiler/ir/scalar_fns.ts: float literals (f32Lit), <cmath> float overloads (exp and erf: the
 * vectorisable mk::exp_v / mk::erf_v of mpsc_kernels.hpp), C's ?:.
 * Consumed by the element-wise kernels (kernels/elementwise.ts); relies on the generated
 * unit including <cmath> and <algorithm> (emit_program.ts does).
 * CPP_RANGE_FNS: unary fns whose forward and gradient have a hand-written run function in
 * mpsc_kernels.hpp (the same formula, computed faster: explicit AVX-512 where the flags allow);
 * the kernels call those instead of rendering the table's formula.
 */
import { type MathFn, type ScalarLang, type UnaryFn } from '../ir/scalar_fns.js';
import { f32Lit } from '../cfamily/text.js';

// exp and erf: mk::exp_v / mk::erf_v (mpsc_kernels.hpp), straight-line float code that vectorises
// (gelu and its gradient are the bulk of a transformer MLP's element-wise time); the rest from <cmath>
const CPP_MATH: Record<MathFn, string> = {
  exp: 'mk::exp_v', expm1: 'std::expm1', log: 'std::log', log1p: 'std::log1p', sqrt: 'std::sqrt', tanh: 'std::tanh',
  erf: 'mk::erf_v', erfc: 'std::erfc', abs: 'std::fabs', max: 'std::max', min: 'std::min', pow: 'std::pow',
};

export const CPP_SCALAR_LANG: ScalarLang = {
  lit: f32Lit,
  call: (fn, args) => `${CPP_MATH[fn]}(${args.join(', ')})`,
  select: (c, a, b) => `${c} ? ${a} : ${b}`,
};

/**
 * Run functions over [0, n) in mpsc_kernels.hpp: fwd(x, y, n) is y = f(x), grad(dy, x, dx, n) is dx = dy f'(x)
 * (attr-free fns only). gelu: the gradient shares erf's exp(-x^2/2), 16 lanes with masked tails (the bits
 * of an element do not depend on how a run is split).
 */
export const CPP_RANGE_FNS: Partial<Record<UnaryFn, { fwd: string; grad: string }>> = {
  gelu: { fwd: 'mk::gelu_fwd', grad: 'mk::gelu_grad' },
};
