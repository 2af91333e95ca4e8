/**
 * unary / unary_grad / binary (broadcasting) / reshape / sum_to / dropout / dropout_grad.
 * The element-wise formulas come from compiler/ir/scalar_fns.ts, rendered to C++ float by
 * scalar_cpp.ts inside plain loops the compiler can vectorise.
 */
import { dropoutThreshold } from '../../ir/philox.js';
import { BINARY_FNS_TABLE, UNARY_FNS_TABLE, type UnaryFnDef, isBinaryFn, isUnaryFn, renderScalar, unaryFnAttrs } from '../../ir/scalar_fns.js';
import { broadcastShapes, broadcastStrides } from '../../ir/shapes.js';
import { f32Lit } from '../../cfamily/text.js';
import { CPP_RANGE_FNS, CPP_SCALAR_LANG } from '../scalar_cpp.js';
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, PAR_MIN, prod } from '../kernel_ctx.js';

const MAP = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const float v = x[i];
      y[i] = {{expr}};
    }
  });
`);

const MAP2 = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dx = {{dx}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const float g = dy[i], v = x[i];
      dx[i] = {{expr}};
    }
  });
`);

// a fn with run functions (scalar_cpp.ts CPP_RANGE_FNS): each thread's part is one call
const MAP_RUN = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) { {{fn}}(x + b, y + b, e - b); });
`);

const MAP2_RUN = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dx = {{dx}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) { {{fn}}(dy + b, x + b, dx + b, e - b); });
`);

/** the fn of a unary / unary_grad node and its attribute values (formulas: compiler/ir/scalar_fns.ts) */
function unaryFn(k: KernelCtx): { def: UnaryFnDef; attrs: Record<string, number>; run?: { fwd: string; grad: string } } {
  const fn = k.str('fn');
  if (!isUnaryFn(fn)) k.fail(`unknown unary fn '${fn}'`);
  return { def: UNARY_FNS_TABLE[fn], attrs: unaryFnAttrs(fn, (name, d) => k.num(name, d)), run: CPP_RANGE_FNS[fn] };
}

export const unary: KernelEmitter = (k) => {
  const { def, attrs, run } = unaryFn(k);
  if (run) return MAP_RUN({ x: k.inPtr(0), y: k.outPtr(0), n: prod(k.inShape(0)), fn: run.fwd });
  return MAP({ x: k.inPtr(0), y: k.outPtr(0), n: prod(k.inShape(0)), expr: renderScalar(def.fwd, CPP_SCALAR_LANG, { x: 'v' }, attrs) });
};

export const unary_grad: KernelEmitter = (k) => {
  const { def, attrs, run } = unaryFn(k);
  if (run) return MAP2_RUN({ dy: k.inPtr(0), x: k.inPtr(1), dx: k.outPtr(0), n: prod(k.inShape(0)), fn: run.grad });
  return MAP2({ dy: k.inPtr(0), x: k.inPtr(1), dx: k.outPtr(0), n: prod(k.inShape(0)), expr: renderScalar(def.grad, CPP_SCALAR_LANG, { x: 'v', g: 'g' }, attrs) });
};

const BINARY_FLAT = tpl(`  const float* a = {{a}};
  const float* bb = {{b}};
  float* y = {{y}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) y[i] = {{expr}};
  });
`);

const BINARY_BCAST = tpl(`  const float* a = {{a}};
  const float* bb = {{b}};
  float* y = {{y}};
  static const int64_t dims[{{rank}}] = { {{dims}} };
  static const int64_t sa[{{rank}}] = { {{sa}} };
  static const int64_t sb[{{rank}}] = { {{sb}} };
  mk::par(ctx, {{rows}}, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      int64_t oa, ob;
      mk::bcast_offsets(r, {{rank}} - 1, dims, sa, sb, oa, ob);
      float* yr = y + r * {{last}};
      for (int64_t j = 0; j < {{last}}; j++) yr[j] = {{expr}};
    }
  });
`);

export const binary: KernelEmitter = (k) => {
  const fn = k.str('fn');
  if (!isBinaryFn(fn)) return k.fail(`unknown binary fn '${fn}'`);
  const fwd = BINARY_FNS_TABLE[fn].fwd;
  const expr = (ia: string, ib: string) => renderScalar(fwd, CPP_SCALAR_LANG, { a: `a[${ia}]`, b: `bb[${ib}]` }, {});
  const as = k.inShape(0), bs = k.inShape(1);
  const ys = broadcastShapes(as, bs);
  if (!ys) return k.fail(`shapes [${as}] and [${bs}] do not broadcast`);
  const n = prod(ys);
  const na = prod(as), nb = prod(bs);
  const vm = { a: k.inPtr(0), b: k.inPtr(1), y: k.outPtr(0), n };
  if ((na === n || na === 1) && (nb === n || nb === 1)) {
    return BINARY_FLAT({ ...vm, expr: expr(na === 1 ? '0' : 'i', nb === 1 ? '0' : 'i') });
  }
  const sa = broadcastStrides(as, ys), sb = broadcastStrides(bs, ys);
  const rank = ys.length, last = ys[rank - 1];
  return BINARY_BCAST({
    ...vm, rank, dims: ys.join(', '), sa: sa.join(', '), sb: sb.join(', '), rows: n / last, last,
    expr: expr(`oa + j * ${sa[rank - 1]}`, `ob + j * ${sb[rank - 1]}`),
  });
};

const COPY = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  if ((const void*)x != (const void*)y) std::memmove(y, x, sizeof(float) * {{n}});
`);

// large copies (flatten of an activation): disjoint buffers (the memory plan never overlaps a node's
// output with its input) copied in 4096-float blocks split over the threads; overlap falls back to memmove
const COPY_PAR = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  if ((const void*)x == (const void*)y) return 0;
  if (x < y + {{n}} && y < x + {{n}}) {
    std::memmove(y, x, sizeof(float) * {{n}});
    return 0;
  }
  mk::par(ctx, {{blocks}}, 2, [&](int64_t b, int64_t e) {
    const int64_t i0 = b * 4096, i1 = std::min<int64_t>(e * 4096, {{n}});
    std::memcpy(y + i0, x + i0, sizeof(float) * (i1 - i0));
  });
`);

export const reshape: KernelEmitter = (k) => {
  if (prod(k.inShape(0)) !== prod(k.outShape(0))) k.fail('reshape changes the element count');
  const n = prod(k.inShape(0));
  if (n >= 4 * PAR_MIN) return COPY_PAR({ x: k.inPtr(0), y: k.outPtr(0), n, blocks: Math.ceil(n / 4096) });
  return COPY({ x: k.inPtr(0), y: k.outPtr(0), n });
};

/**
 * A row-major walk over x (dims) keeping `off`, the offset of the reduced element each x[i] goes to
 * (strides sy, 0 on reduced axes); the template's `visit` runs once per element (reductions here
 * and in tensor.ts).
 */
export const STRIDED_WALK = `  static const int64_t dims[{{rank}}] = { {{dims}} };
  static const int64_t sy[{{rank}}] = { {{sy}} };
  int64_t idx[{{rank}}] = {0};
  int64_t off = 0;
  for (int64_t i = 0; i < {{nx}}; i++) {
{{{visit}}}
    for (int64_t d = {{rank}} - 1; d >= 0; d--) {
      idx[d]++;
      off += sy[d];
      if (idx[d] < dims[d]) break;
      off -= sy[d] * dims[d];
      idx[d] = 0;
    }
  }`;

const SUM_TO = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  double* acc = (double*)mk::scratch(2, 2 * {{ny}});
  for (int64_t i = 0; i < {{ny}}; i++) acc[i] = 0.0;
${STRIDED_WALK}
  for (int64_t i = 0; i < {{ny}}; i++) y[i] = (float)acc[i];
`);

const SUM_BLOCK = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{mid}}, {{minPar}}, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; m++) {
      double s = 0.0;
      int64_t o = 0;
      // rows o..o+3 at once (sum_f4: the same bits as sum_f per row), added to s in row order
      for (; o + 4 <= {{outer}}; o += 4) {
        double r[4];
        const float* p = x + (o * {{mid}} + m) * {{inner}};
        mk::sum_f4(p, p + {{mid}} * {{inner}}, p + 2 * {{mid}} * {{inner}}, p + 3 * {{mid}} * {{inner}}, {{inner}}, r);
        s += r[0];
        s += r[1];
        s += r[2];
        s += r[3];
      }
      for (; o < {{outer}}; o++) s += mk::sum_f(x + (o * {{mid}} + m) * {{inner}}, {{inner}});
      y[m] = (float)s;
    }
  });
`);

// inner == 1 (bias gradients of linear over [..., N]): column blocks of 64 per work item, rows
// streamed in order into double accumulators: each y[m] is the same row-ordered double sum as
// SUM_BLOCK's (sum_f of one element is that element), read row-contiguously instead of strided
const SUM_ROWS = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{blocks}}, 2, [&](int64_t b, int64_t e) {
    double acc[64];
    for (int64_t blk = b; blk < e; blk++) {
      const int64_t m0 = blk * 64, m1 = std::min<int64_t>({{mid}}, m0 + 64), w = m1 - m0;
      for (int64_t j = 0; j < w; j++) acc[j] = 0.0;
      for (int64_t o = 0; o < {{outer}}; o++) {
        const float* r = x + o * {{mid}} + m0;
        for (int64_t j = 0; j < w; j++) acc[j] += r[j];
      }
      for (int64_t j = 0; j < w; j++) y[m0 + j] = (float)acc[j];
    }
  });
`);

/**
 * When this sum_to is a column sum (the kept dims are the trailing ones: a linear's bias gradient over
 * [..., N]): its `outer` rows of `mid` floats, the shape SUM_ROWS runs; else null. gemm.ts takes such a
 * sum into the grad-weight product that reads the same rows (emit_program.ts pairs them).
 */
export function columnSumOf(k: KernelCtx): { outer: number; mid: number } | null {
  const p = sumPlan(k);
  return p.kind === 'rows' ? { outer: p.outer, mid: p.mid } : null;
}

type SumPlan = { kind: 'rows' | 'block'; outer: number; mid: number; inner: number } | { kind: 'other'; strides: number[] };

function sumPlan(k: KernelCtx): SumPlan {
  const xs = k.inShape(0), ys = k.outShape(0);
  let strides: number[];
  const axes = k.node.attrs.axes;
  if (axes !== undefined) {
    if (!Array.isArray(axes)) k.fail(`attr 'axes' must be number[]`);
    strides = new Array<number>(xs.length).fill(0);
    let s = 1;
    for (let i = xs.length - 1; i >= 0; i--) {
      if ((axes as number[]).includes(i)) continue;
      strides[i] = s;
      s *= xs[i];
    }
  } else {
    strides = broadcastStrides(k.shape('shape'), xs);
  }
  const ny = prod(ys);
  // kept dims form one contiguous block [a, b) (bias gradients of linear and conv): parallel over it
  const kept = strides.map((st, i) => st !== 0 || xs[i] === 1);
  const a = kept.indexOf(true), b = kept.lastIndexOf(true) + 1;
  if (a >= 0 && kept.slice(a, b).every(Boolean) && prod(xs.slice(a, b)) === ny) {
    const outer = prod(xs.slice(0, a)), inner = prod(xs.slice(b));
    return { kind: inner === 1 && outer > 1 ? 'rows' : 'block', outer, mid: ny, inner };
  }
  return { kind: 'other', strides };
}

export const sum_to: KernelEmitter = (k) => {
  const xs = k.inShape(0), ny = prod(k.outShape(0)), nx = prod(xs);
  const p = sumPlan(k);
  // each y[m] is summed by one thread in a fixed order, so any split gives the same bits: split
  // as soon as the whole reduction is worth it (conv bias grads have few channels but large planes)
  if (p.kind === 'rows') return SUM_ROWS({ x: k.inPtr(0), y: k.outPtr(0), outer: p.outer, mid: ny, blocks: Math.ceil(ny / 64) });
  if (p.kind === 'block') return SUM_BLOCK({ x: k.inPtr(0), y: k.outPtr(0), outer: p.outer, mid: ny, inner: p.inner, minPar: nx >= PAR_MIN ? 2 : 64 });
  if (xs.length === 0 || p.kind !== 'other') return COPY({ x: k.inPtr(0), y: k.outPtr(0), n: 1 });
  return SUM_TO({ x: k.inPtr(0), y: k.outPtr(0), rank: xs.length, dims: xs.join(', '), sy: p.strides.join(', '), nx, ny, visit: '    acc[off] += x[i];' });
};

const DROPOUT = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  const uint32_t seed = sc->seed, counter = sc->counter;
  mk::par(ctx, {{n}}, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const bool keep = mk::philox_first(seed, {{stream}}u, (uint32_t)i, counter) >= {{threshold}}u;
      y[i] = keep ? x[i] / {{keepP}} : 0.0f;
    }
  });
`);

function dropoutVm(k: KernelCtx) {
  const p = k.num('p'), stream = k.num('stream');
  if (!(p >= 0 && p < 1)) k.fail(`dropout p must be in [0,1), got ${p}`);
  return { n: prod(k.inShape(0)), stream: stream >>> 0, threshold: dropoutThreshold(p), keepP: f32Lit(1 - p), x: k.inPtr(0), y: k.outPtr(0) };
}

export const dropout: KernelEmitter = (k) => DROPOUT(dropoutVm(k));
export const dropout_grad: KernelEmitter = (k) => DROPOUT(dropoutVm(k));
