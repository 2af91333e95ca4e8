/**
 * CPU kernels, mixed precision (issue 15): `cast` between f32 and f16 / bf16, and the operand
 * widening every op with 16-bit inputs (`OpDef.halfInputs`: the GEMM family; the CPU folds no casts,
 * so no other op reads 16 bits) goes through.
 * Consumes a KernelCtx; produces kernel bodies calling runtime/cpp/mpsc_half.hpp (16-bit values
 * are uint16_t bit patterns there). Relies on precision.ts making 16-bit values only by cast.
 */
import { isHalf } from '../../ir/graph.js';
import { type KernelCtx, type KernelEmitter, PAR_MIN, prod } from '../kernel_ctx.js';
import { linearEpilogue } from './gemm.js';
import { tpl } from '../template.js';

const CAST = tpl(`  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) { mh::{{fn}}({{x}}, {{y}}, b, e); });
`);

export const cast: KernelEmitter = (k) => {
  const from = k.inDtype(0), to = k.str('to');
  const fn = to === 'f16' || to === 'bf16' ? (from === 'f32' ? `to_${to}` : null) : to === 'f32' && isHalf(from) ? `from_${from}` : null;
  if (fn === null) k.fail(`cast from ${from} to ${to} is not supported`);
  return CAST({ fn, x: k.inPtr(0), y: k.outPtr(0), n: prod(k.inShape(0)) });
};

const LINEAR_BF16 = tpl(`  mh::linear_bf16(ctx, {{x}}, {{w}}, {{bias}}, {{y}}, {{M}}, {{N}}, {{K}}, {{relu}});
`);

/**
 * linear with both operands bf16: runtime/cpp/mpsc_half.hpp linear_bf16 (the AMX tiles, VDPBF16PS or the widened f32 GEMM), bias
 * (a bf16 one widened first, exactly) and the relu epilogue in f32
 */
function linearBf16(k: KernelCtx): string {
  const xs = k.inShape(0), [N, K] = k.inShape(1);
  const half = k.hasInput(2) && isHalf(k.inDtype(2));
  const pre = half ? `  float* wb = mh::widen(ctx, ${k.inPtr(2)}, ${N}, ${k.inDtype(2) === 'bf16'}, 0);\n` : '';
  const bias = !k.hasInput(2) ? 'nullptr' : half ? 'wb' : k.inPtr(2);
  const epi = linearEpilogue(k);
  const body = pre + LINEAR_BF16({ x: k.inPtr(0), w: k.inPtr(1), bias, y: k.outPtr(0), M: prod(xs) / K, N, K, relu: String(epi.relu) });
  // a non-relu epilogue: the same formula (same bits) as a pass over the output after the rows
  return epi.post === null ? body : `${body}  {
    auto post = ${epi.post};
    float* yo = ${k.outPtr(0)};
    mk::par(ctx, ${prod(xs) / K * N}, ${PAR_MIN}, [&](int64_t b, int64_t e) { post(yo + b, e - b); });
  }
`;
}

/**
 * The kernel of a node whose inputs include 16-bit values: a bf16 x bf16 linear gets its own
 * kernel (linearBf16); otherwise each such input is widened (exactly)
 * into a per-thread float buffer first, and `emit` sees it as an f32 input at that buffer.
 */
export function withWidenedInputs(k: KernelCtx, emit: KernelEmitter): string {
  if (k.node.op === 'cast') return emit(k);
  if (k.node.op === 'linear' && k.inDtype(0) === 'bf16' && k.inDtype(1) === 'bf16') return linearBf16(k);
  const widened = new Map<number, string>();
  let pre = '';
  k.node.inputs.forEach((id, i) => {
    if (id < 0 || !isHalf(k.inDtype(i))) return;
    const name = `w${widened.size}`;
    pre += `  float* ${name} = mh::widen(ctx, ${k.inPtr(i)}, ${prod(k.inShape(i))}, ${k.inDtype(i) === 'bf16'}, ${widened.size});\n`;
    widened.set(i, name);
  });
  if (widened.size === 0) return emit(k);
  if (widened.size > 6) k.fail(`${widened.size} 16-bit inputs, more than the 6 widening buffers`);
  const ctx: KernelCtx = { ...k, inPtr: (i) => widened.get(i) ?? k.inPtr(i), inDtype: (i) => (widened.has(i) ? 'f32' : k.inDtype(i)) };
  return pre + emit(ctx);
}
