/**
 * library: the `.metal` source of one lowered program: the prelude (StepParams and the helper
 * functions the kernels use) and every kernel (plain and simdgroup-matrix variants), each with
 * an explicit signature: [[buffer(n)]] on every buffer, the constant StepParams after them,
 * [[threadgroup(0)]] memory when used, and only the built-in attributes its body reads.
 */
import type { KernelSpec, KernelVariant } from './kernel_types.js';
import type { LoweredProgram } from './lower_program.js';
import { commentSafe } from './msl_text.js';
import { render } from './templates.js';

const BUILTINS: { name: string; type: string; attr: string }[] = [
  { name: 'gid', type: 'uint3', attr: 'thread_position_in_grid' },
  { name: 'tgid', type: 'uint3', attr: 'threadgroup_position_in_grid' },
  { name: 'tid', type: 'uint3', attr: 'thread_position_in_threadgroup' },
  { name: 'tidx', type: 'uint', attr: 'thread_index_in_threadgroup' },
  { name: 'lane', type: 'uint', attr: 'thread_index_in_simdgroup' },
  { name: 'sg', type: 'uint', attr: 'simdgroup_index_in_threadgroup' },
];

export function builtinsOf(body: string): typeof BUILTINS {
  return BUILTINS.filter((b) => new RegExp(`\\b${b.name}\\b`).test(body));
}

export function kernelSource(k: KernelSpec, v: KernelVariant, what: string): string {
  return render('kernel', {
    comment: commentSafe(`${k.label}${what}`),
    name: v.name,
    args: k.args.map((a, i) => ({ name: a.name, type: a.type, ro: a.access === 'r', index: i })),
    paramsIndex: k.args.length,
    tgmem: v.tgmem > 0,
    builtins: builtinsOf(v.body),
    body: v.body.replace(/\n+$/, ''),
  }).replace(/\n+$/, '');
}

export function librarySource(lp: LoweredProgram, model: string): string {
  const kernels: string[] = [];
  for (const k of lp.kernels) {
    kernels.push(kernelSource(k, k, k.mma ? ' [16x16 tiles]' : ''));
    if (k.mma) kernels.push(kernelSource(k, k.mma, ' [simdgroup_float8x8, Apple7+]'));
  }
  return render('library', {
    program: lp.program.name,
    model: commentSafe(model),
    erfc: lp.helpers.has('erfc'),
    philox: lp.helpers.has('philox'),
    block_reduce: lp.helpers.has('block_reduce'),
    kernels,
  });
}
