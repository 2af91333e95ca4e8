/**
 * attention / attention_grad on the CPU: the blocked (flash-attention) kernels of
 * cpp/mpsc_kernels.hpp (mk::attention_fwd_tile, mk::attention_bwd_head). The forward runs one
 * (head, query tile) per work item, the backward one head per work item (a head's dk / dv rows
 * are summed over its query tiles in a fixed order), each item by one thread with its own
 * scratch, so results are the same bits for any thread count. Semantics:
 * compiler/ir/op_rules/attention.ts.
 */
import { f32Lit } from '../../cfamily/text.js';
import { tpl } from '../template.js';
import type { KernelCtx, KernelEmitter } from '../kernel_ctx.js';

function geo(k: KernelCtx, base: number) {
  const [N, H, T, D] = k.inShape(base), S = k.inShape(base + 1)[2];
  return { NH: N * H, T, S, D, scale: f32Lit(k.num('scale')), causal: String(k.bool('causal', false)) };
}

const FWD = tpl(`  const float* q = {{q}};
  const float* k = {{k}};
  const float* v = {{v}};
  float* o = {{o}};
  float* lse = {{lse}};
  constexpr int64_t tiles = ({{T}} + mk::ATT_BR - 1) / mk::ATT_BR;
  mk::par(ctx, {{NH}} * tiles, 2, [&](int64_t b, int64_t e) {
    float* ws = mk::scratch(0, mk::attention_fwd_ws({{D}}));
    for (int64_t w = b; w < e; w++) {
      const int64_t h = w / tiles, t0 = (w % tiles) * mk::ATT_BR, t1 = std::min<int64_t>({{T}}, t0 + mk::ATT_BR);
      mk::attention_fwd_tile<{{D}}>(q + h * {{T}} * {{D}}, k + h * {{S}} * {{D}}, v + h * {{S}} * {{D}}, o + h * {{T}} * {{D}}, lse + h * {{T}},
                                    {{T}}, {{S}}, {{scale}}, {{causal}}, t0, t1, ws);
    }
  });
`);

export const attention: KernelEmitter = (k) => {
  const g = geo(k, 0);
  return FWD({ ...g, q: k.inPtr(0), k: k.inPtr(1), v: k.inPtr(2), o: k.outPtr(0), lse: k.outPtr(1) });
};

const BWD = tpl(`  const float* dO = {{dO}};
  const float* q = {{q}};
  const float* k = {{k}};
  const float* v = {{v}};
  const float* o = {{o}};
  const float* lse = {{lse}};
  float* dq = {{dq}};
  float* dk = {{dk}};
  float* dv = {{dv}};
  mk::par(ctx, {{NH}}, 2, [&](int64_t b, int64_t e) {
    float* ws = mk::scratch(0, mk::attention_bwd_ws({{T}}, {{D}}));
    for (int64_t h = b; h < e; h++) {
      const int64_t qo = h * {{T}} * {{D}}, ko = h * {{S}} * {{D}};
      mk::attention_bwd_head<{{D}}>(dO + qo, q + qo, k + ko, v + ko, o + qo, lse + h * {{T}}, dq + qo, dk + ko, dv + ko,
                                    {{T}}, {{S}}, {{scale}}, {{causal}}, ws);
    }
  });
`);

export const attention_grad: KernelEmitter = (k) => {
  const g = geo(k, 1);
  return BWD({
    ...g, dO: k.inPtr(0), q: k.inPtr(1), k: k.inPtr(2), v: k.inPtr(3), o: k.inPtr(4), lse: k.inPtr(5),
    dq: k.outPtr(0), dk: k.outPtr(1), dv: k.outPtr(2),
  });
};
