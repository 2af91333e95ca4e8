/**
 * prelude: one kernel file of the GPU kernel language in a dialect: the dialect's file header,
 * the StepParams struct every kernel binds after its buffers (mpsc_scalars in mpsc_model.h),
 * the helper functions the kernels use (erfc, Philox, block reductions, CUDA's 16-bit tensor-core
 * products from codegen-cuda/mma.ts, the 3xTF32 operand split from codegen-cuda/tf32x3.ts; only those needed),
 * then the kernels. Consumes KernelSpecs lowered for that dialect and the helper set;
 * produces the source text (a `.metal` library for MSL, a `.cu` unit for CUDA).
 */
import { commentText } from '../cfamily/text.js';
import { type Dialect, type HalfElem, isHalfElem } from './dialect.js';
import type { Helper, KernelSpec, KernelVariant } from './kernel_types.js';
import { mma16Helpers, tf32x3MmaHelpers, wgmma16Helpers } from '../codegen-cuda/mma.js';
import { tf32SplitHelper } from '../codegen-cuda/tf32x3.js';

function erfcHelper(d: Dialect): string {
  const f = (x: number) => d.f(x);
  const poly = [1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277];
  // Horner form t * (c1 + t * (c2 + ... + t * c9))
  let p = f(poly[poly.length - 1]);
  for (let i = poly.length - 2; i >= 0; i--) p = `${f(poly[i])} + t * ${i === poly.length - 2 ? p : `(${p})`}`;
  return (
    `// erfc(x) with fractional error < 1.2e-7 (Numerical Recipes erfcc), evaluated in float\n` +
    `${d.helperQual} float mpsc_erfc(float x) {\n` +
    `  const float z = ${d.math('abs', 'x')};\n` +
    `  const float t = ${f(1)} / (${f(1)} + ${f(0.5)} * z);\n` +
    `  const float r = t * ${d.math('exp', `-z * z - ${f(1.26551223)} + t * (${p})`)};\n` +
    `  return x >= ${f(0)} ? r : ${f(2)} - r;\n` +
    `}\n`
  );
}

/** erf(x): its Taylor series below 0.5 (relative error < 3e-8 there), 1 - erfc(|x|) above */
function erfHelper(d: Dialect): string {
  const f = (x: number) => d.f(x);
  // 2/sqrt(pi) * (-1)^n / (n! (2n+1)), n = 0..5
  const c = [0, 1, 2, 3, 4, 5].map((n) => (2 / Math.sqrt(Math.PI)) * (n % 2 ? -1 : 1) / ([1, 1, 2, 6, 24, 120][n] * (2 * n + 1)));
  let p = f(c[5]);
  for (let i = 4; i >= 0; i--) p = `${f(c[i])} + x2 * (${p})`;
  return (
    `// erf(x): Taylor series for |x| < 0.5, else 1 - erfc(|x|) with the sign of x\n` +
    `${d.helperQual} float mpsc_erf(float x) {\n` +
    `  const float z = ${d.math('abs', 'x')};\n` +
    `  if (z < ${f(0.5)}) {\n    const float x2 = x * x;\n    return x * (${p});\n  }\n` +
    `  const float r = ${f(1)} - mpsc_erfc(z);\n` +
    `  return x < ${f(0)} ? -r : r;\n` +
    `}\n`
  );
}

/** exp(x) - 1 without cancellation near 0 (Kahan: (u - 1) * x / log(u), u = exp(x)) */
function expm1Helper(d: Dialect): string {
  const f = (x: number) => d.f(x);
  return (
    `// expm1(x) = exp(x) - 1, accurate near 0 (Kahan's correction of u - 1 by x / log(u), u = exp(x))\n` +
    `${d.helperQual} float mpsc_expm1(float x) {\n` +
    `  const float u = ${d.math('exp', 'x')};\n` +
    `  if (${d.math('abs', 'x')} > ${f(0.5)}) return u - ${f(1)};\n` +
    `  if (u == ${f(1)}) return x;\n` +
    `  return (u - ${f(1)}) * x / ${d.math('log', 'u')};\n` +
    `}\n`
  );
}

/** log(1 + x) without cancellation near 0 (Kahan: log(u) * x / (u - 1), u = 1 + x) */
function log1pHelper(d: Dialect): string {
  const f = (x: number) => d.f(x);
  return (
    `// log1p(x) = log(1 + x), accurate near 0 (Kahan's correction log(u) * x / (u - 1), u = 1 + x)\n` +
    `${d.helperQual} float mpsc_log1p(float x) {\n` +
    `  const float u = ${f(1)} + x;\n` +
    `  if (${d.math('abs', 'x')} > ${f(0.5)}) return ${d.math('log', 'u')};\n` +
    `  if (u == ${f(1)}) return x;\n` +
    `  return ${d.math('log', 'u')} * x / (u - ${f(1)});\n` +
    `}\n`
  );
}

function philoxHelper(d: Dialect): string {
  return (
    `// Philox4x32-10, first output word (compiler/ir/philox.ts): key (seed, stream), counter (i, counter, 0, 0)\n` +
    `${d.helperQual} uint mpsc_philox(uint seed, uint stream, uint i, uint counter) {\n` +
    `  uint k0 = seed, k1 = stream, x0 = i, x1 = counter, x2 = 0u, x3 = 0u;\n` +
    `  for (int r = 0; r < 10; ++r) {\n` +
    `    const uint hi0 = ${d.mulhi('0xD2511F53u', 'x0')}, lo0 = 0xD2511F53u * x0;\n` +
    `    const uint hi1 = ${d.mulhi('0xCD9E8D57u', 'x2')}, lo1 = 0xCD9E8D57u * x2;\n` +
    `    const uint n0 = hi1 ^ x1 ^ k0, n2 = hi0 ^ x3 ^ k1;\n` +
    `    x0 = n0; x1 = lo1; x2 = n2; x3 = lo0;\n` +
    `    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;\n` +
    `  }\n` +
    `  return x0;\n` +
    `}\n`
  );
}

function blockReduceHelpers(d: Dialect): string {
  const sh = d.space.shared;
  return (
    `// threadgroup-wide sum / max: a SIMD-group reduction within each SIMD-group, then the partials\n` +
    `// through threadgroup memory. Every thread of the threadgroup must call it (uniform control\n` +
    `// flow); every thread gets the result. sh needs nsg floats.\n` +
    `${d.helperQual} float mpsc_block_sum(float v, ${sh}float* sh, uint lane, uint sg, uint nsg) {\n` +
    `  v = ${d.simdSum('v')};\n` +
    `  if (lane == 0u) sh[sg] = v;\n` +
    `  ${d.barrier()}\n` +
    `  float r = ${d.f(0)};\n` +
    `  for (uint i = 0u; i < nsg; ++i) r += sh[i];\n` +
    `  ${d.barrier()}\n` +
    `  return r;\n` +
    `}\n\n` +
    `${d.helperQual} float mpsc_block_max(float v, ${sh}float* sh, uint lane, uint sg, uint nsg) {\n` +
    `  v = ${d.simdMax('v')};\n` +
    `  if (lane == 0u) sh[sg] = v;\n` +
    `  ${d.barrier()}\n` +
    `  float r = sh[0];\n` +
    `  for (uint i = 1u; i < nsg; ++i) r = ${d.math('max', 'r', 'sh[i]')};\n` +
    `  ${d.barrier()}\n` +
    `  return r;\n` +
    `}\n`
  );
}

/** every helper, in the order a file defines them (erf calls erfc) */
const HELPERS: Record<Helper, (d: Dialect) => string> = {
  erfc: erfcHelper, erf: erfHelper, expm1: expm1Helper, log1p: log1pHelper, philox: philoxHelper, block_reduce: blockReduceHelpers,
  // 16-bit tensor-core products (inline PTX): only the CUDA flash attention asks for them
  mma16: (d) => {
    if (d.name !== 'cuda') throw new Error(`internal: the mma16 helpers requested in dialect ${d.name}`);
    return mma16Helpers();
  },
  // Hopper warpgroup products (sm_90a): only the wgmma flash kernels (MPSC_CUDA_FLASH_WGMMA) ask for them
  wgmma16: (d) => {
    if (d.name !== 'cuda') throw new Error(`internal: the wgmma16 helpers requested in dialect ${d.name}`);
    return wgmma16Helpers();
  },
  // the 3xTF32 m16n8k8 product: only the fp32 flash attention on the tensor cores asks for it
  mma_tf32x3: (d) => {
    if (d.name !== 'cuda') throw new Error(`internal: the mma_tf32x3 helper requested in dialect ${d.name}`);
    return tf32x3MmaHelpers();
  },
  // the 3xTF32 operand split: only the split kernels of cuBLASLt's 3xTF32 calls ask for it
  tf32split: (d) => {
    if (d.name !== 'cuda') throw new Error(`internal: the tf32split helper requested in dialect ${d.name}`);
    return tf32SplitHelper();
  },
};

/** one helper's definitions in the dialect (what kernelFile writes for it; the CUDA thread emulator's tests take them one by one) */
export function helperSource(d: Dialect, h: Helper): string {
  return HELPERS[h](d);
}

/** One kernel function in the dialect (`what` is appended to its comment). */
export function kernelSource(d: Dialect, k: KernelSpec, v: KernelVariant, what: string): string {
  return d.kernel({
    name: v.name,
    comment: commentText(`${k.label}${what}`),
    args: k.args.map((a) => ({ name: a.name, type: a.type, access: a.access })),
    tgmem: v.tgmem,
    tgsize: v.tgsize,
    ...(v.minBlocks ? { minBlocks: v.minBlocks } : {}),
    body: v.body,
  });
}

/**
 * The whole kernel file. `title` lines go first as comments (already comment-safe);
 * `variantNote` names the plain and matrix-unit variants in their comments.
 */
export function kernelFile(d: Dialect, title: string[], helpers: Set<Helper>, kernels: KernelSpec[], variantNote: { plain: string; mma: string }): string {
  const parts: string[] = [];
  const halves = new Set<HalfElem>(kernels.flatMap((k) => k.args.map((a) => a.type).filter(isHalfElem)));
  parts.push(title.map((l) => `// ${l}`).join('\n') + '\n' + d.fileHeader(halves));
  parts.push(
    `// step scalars, bound to every kernel after its buffers (mpsc_scalars in mpsc_model.h)\n` +
    `struct StepParams {\n  float lr;\n  int t;\n  uint seed;\n  uint counter;\n};\n`,
  );
  const own = d.helpers();
  if (own) parts.push(own);
  const need = new Set(helpers);
  if (need.has('erf')) need.add('erfc');
  for (const h of Object.keys(HELPERS) as Helper[]) if (need.has(h)) parts.push(HELPERS[h](d));
  for (const k of kernels) {
    parts.push(kernelSource(d, k, k, k.mma ? variantNote.plain : '') + '\n');
    if (k.mma) parts.push(kernelSource(d, k, k.mma, variantNote.mma) + '\n');
  }
  return parts.join('\n');
}
