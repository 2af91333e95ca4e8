/**
 * attention / attention_grad and their packed forms attention_qkv / attention_qkv_grad on the CPU:
 * the blocked (flash-attention) kernels of cpp/mpsc_kernels.hpp (mk::attention_fwd_tile,
 * mk::attention_bwd_head). The forward runs one (head, query tile) per work item, the backward one
 * head per work item (a head's dk / dv rows are summed over its query tiles in a fixed order), each
 * item by one thread with its own scratch, so results are the same bits for any thread count. Both
 * forms are the same kernels: op_rules' attnLayout gives each head's row offset and row stride
 * (the packed form reads q, k, v in place from the [N,T,3C] projection, writes o as [N,T,C] and dq,
 * dk, dv into one [N,T,3C] gradient), and the arithmetic is the same in either layout. In the packed
 * form the loop also passes the operands of the item the thread does next (mk::AttNextTile /
 * mk::AttNext), whose strided rows the kernel prefetches between the blocks of its own products.
 * Semantics: compiler/ir/op_rules/attention.ts.
 */
import { attnLayout, type AttnLayout, type HeadRows } from '../../ir/op_rules/attention.js';
import { f32Lit } from '../../cfamily/text.js';
import { tpl } from '../template.js';
import type { KernelCtx, KernelEmitter } from '../kernel_ctx.js';

/** the element offset of head `w` (= n * H + h) of operand rows `r`, as C++ text */
export function headOffset(r: HeadRows, H: number, w: string): string {
  const b = r.base === 0 ? '' : `${r.base} + `;
  return r.sn === H * r.sh ? `${b}${w} * ${r.sh}` : `${b}(${w} / ${H}) * ${r.sn} + (${w} % ${H}) * ${r.sh}`;
}

function geo(k: KernelCtx) {
  const L: AttnLayout = attnLayout(k.node.op, k.node.inputs.map((_, i) => k.inShape(i)), k.node.attrs);
  const contiguous = [L.q.st, L.k.st, L.v.st, L.o.st].every((x) => x === L.D);
  return {
    L, NH: L.N * L.H, T: L.T, S: L.S, D: L.D, scale: f32Lit(L.scale), causal: String(L.causal),
    qo: headOffset(L.q, L.H, 'h'), ko: headOffset(L.k, L.H, 'h'), vo: headOffset(L.v, L.H, 'h'), oo: headOffset(L.o, L.H, 'h'),
    // the row strides as template arguments after D (left out when all are D: the separate layout)
    tpl: contiguous ? `${L.D}` : `${L.D}, ${L.q.st}, ${L.k.st}, ${L.v.st}, ${L.o.st}`,
    // strided rows (the packed layout): the kernels prefetch the next work item's rows (nextTile / nextHead)
    strided: !contiguous,
  };
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
{{next}}      mk::attention_fwd_tile<{{tpl}}>(q + {{qo}}, k + {{ko}}, v + {{vo}}, o + {{oo}}, lse + h * {{T}},
                                    {{T}}, {{S}}, {{scale}}, {{causal}}, t0, t1, ws{{nextArg}});
    }
  });
`);

/**
 * the strided (packed) forward prefetches the rows of the (head, query tile) the thread does next while it
 * computes this one (mk::AttNextTile): the same offsets at x = w + 1
 */
function nextTile(g: ReturnType<typeof geo>): { next: string; nextArg: string } {
  if (!g.strided) return { next: '', nextArg: '' };
  const at = (r: HeadRows) => headOffset(r, g.L.H, 'x / tiles');
  return {
    next: `      const int64_t x = w + 1 < e ? w + 1 : w;  // (w itself when last: not prefetched)
      const int64_t x0 = (x % tiles) * mk::ATT_BR;
      const mk::AttNextTile nx{q + ${at(g.L.q)}, k + ${at(g.L.k)}, v + ${at(g.L.v)}, o + ${at(g.L.o)}, x0, std::min<int64_t>(${g.T}, x0 + mk::ATT_BR)};
`,
    nextArg: ', w + 1 < e ? &nx : nullptr',
  };
}

const forward: KernelEmitter = (k) => {
  const g = { ...geo(k), ...nextTile(geo(k)) }, packed = g.L.packed;
  return FWD({ ...g, q: k.inPtr(0), k: k.inPtr(packed ? 0 : 1), v: k.inPtr(packed ? 0 : 2), o: k.outPtr(0), lse: k.outPtr(1) });
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
      const int64_t qo = {{qo}}, ko = {{ko}}, vo = {{vo}}, oo = {{oo}};
{{next}}      mk::attention_bwd_head<{{tpl}}>(dO + oo, q + qo, k + ko, v + vo, o + oo, lse + h * {{T}}, dq + qo, dk + ko, dv + vo,
                                    {{T}}, {{S}}, {{scale}}, {{causal}}, ws{{nextArg}});
    }
  });
`);

/**
 * the strided (packed) backward prefetches the operands of the head the thread does next while it
 * computes this one (mk::AttNext): the same offsets at w = h + 1
 */
function nextHead(g: ReturnType<typeof geo>): { next: string; nextArg: string } {
  if (!g.strided) return { next: '', nextArg: '' };
  const at = (r: HeadRows) => headOffset(r, g.L.H, 'w');
  return {
    next: `      const int64_t w = h + 1 < e ? h + 1 : h;  // (h itself when last: an offset inside the tensors, not prefetched)
      const mk::AttNext nx{dO + ${at(g.L.o)}, q + ${at(g.L.q)}, k + ${at(g.L.k)}, v + ${at(g.L.v)}, o + ${at(g.L.o)},
                           dq + ${at(g.L.q)}, dk + ${at(g.L.k)}, dv + ${at(g.L.v)}};
`,
    nextArg: ', w < e ? &nx : nullptr',
  };
}

const backward: KernelEmitter = (k) => {
  const g = { ...geo(k), ...nextHead(geo(k)) };
  if (g.L.packed) {
    // inputs (do, qkv, o, lse) -> dqkv: q, k, v and dq, dk, dv are parts of one buffer each
    return BWD({ ...g, dO: k.inPtr(0), q: k.inPtr(1), k: k.inPtr(1), v: k.inPtr(1), o: k.inPtr(2), lse: k.inPtr(3), dq: k.outPtr(0), dk: k.outPtr(0), dv: k.outPtr(0) });
  }
  return BWD({
    ...g, dO: k.inPtr(0), q: k.inPtr(1), k: k.inPtr(2), v: k.inPtr(3), o: k.inPtr(4), lse: k.inPtr(5),
    dq: k.outPtr(0), dk: k.outPtr(1), dv: k.outPtr(2),
  });
};

export const attention = forward;
export const attention_qkv = forward;
export const attention_grad = backward;
export const attention_qkv_grad = backward;
