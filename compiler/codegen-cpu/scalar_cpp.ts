/**
 * scalar_cpp: the C++ (float) spelling of the scalar expression language of
 * compiler/ir/scalar_fns.ts: float literals (f32Lit), <cmath> float overloads, C's ?:.
 * Consumed by the element-wise kernels (kernels/elementwise.ts); relies on the generated
 * unit including <cmath> and <algorithm> (emit_program.ts does).
 */
import { type MathFn, type ScalarLang } from '../ir/scalar_fns.js';
import { f32Lit } from '../cfamily/text.js';

const CPP_MATH: Record<MathFn, string> = {
  exp: 'std::exp', expm1: 'std::expm1', log: 'std::log', log1p: 'std::log1p', sqrt: 'std::sqrt', tanh: 'std::tanh',
  erf: 'std::erf', erfc: 'std::erfc', abs: 'std::fabs', max: 'std::max', min: 'std::min',
};

export const CPP_SCALAR_LANG: ScalarLang = {
  lit: f32Lit,
  call: (fn, args) => `${CPP_MATH[fn]}(${args.join(', ')})`,
  select: (c, a, b) => `${c} ? ${a} : ${b}`,
};
