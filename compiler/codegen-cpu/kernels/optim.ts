/** grad_accumulate, zero, grad_norm, clip_coef, sgd_update, adam_update (in place on persistent tensors). */
import { f32Lit } from '../../cfamily/text.js';
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, PAR_MIN, prod } from '../kernel_ctx.js';

const ACCUM = tpl(`  float* acc = {{acc}};
  const float* g = {{g}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) { mk::accumulate_range(acc + b, g + b, e - b, {{scale}}); });
`);

export const grad_accumulate: KernelEmitter = (k) =>
  ACCUM({ acc: k.inPtr(0), g: k.inPtr(1), n: prod(k.inShape(0)), scale: f32Lit(k.num('scale')) });

const ZERO = tpl(`  std::memset({{x}}, 0, sizeof(float) * {{n}});
`);
export const zero: KernelEmitter = (k) => ZERO({ x: k.inPtr(0), n: prod(k.inShape(0)) });

const NORM = tpl(`  double s = 0.0;
{{#each parts}}
  {
    const float* g = {{ptr}};
    double part = 0.0;
    for (int64_t i = 0; i < {{n}}; i++) part += (double)g[i] * g[i];
    s += part;
  }
{{/each}}
  {{out}}[0] = (float)std::sqrt(s);
`);

export const grad_norm: KernelEmitter = (k) =>
  NORM({ out: k.outPtr(0), parts: k.node.inputs.map((_, i) => ({ ptr: k.inPtr(i), n: prod(k.inShape(i)) })) });

const CLIP = tpl(`  const float nrm = {{norm}}[0];
  {{out}}[0] = (float)std::min(1.0, {{maxNorm}} / ((double)nrm + 1e-6));
`);
export const clip_coef: KernelEmitter = (k) => CLIP({ norm: k.inPtr(0), out: k.outPtr(0), maxNorm: String(k.num('max_norm')) });

// The loops run in mk::sgd_range / adam_range / accumulate_range (mpsc_kernels.hpp): restrict pointers and
// scalars by value there, so they vectorise (inside the mk::par lambda they did not); element-wise: same bits.
const SGD = tpl(`  const float lr = sc->lr;
  float* p = {{p}};
  const float* grad = {{grad}};
  float* buf = {{buf}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    mk::sgd_range<{{momentumOn}}, {{nesterov}}>(p + b, grad + b, {{#if momentumOn}}buf + b{{else}}nullptr{{/if}}, e - b, {{gscale}}, {{wd}}, {{momentum}}, lr);
  });
`);

export const sgd_update: KernelEmitter = (k) => {
  const momentum = k.num('momentum', 0);
  if (momentum !== 0 && !k.hasInput(2)) k.fail('momentum != 0 needs a momentum_buffer input');
  return SGD({
    p: k.inPtr(0), grad: k.inPtr(1), momentumOn: momentum !== 0, buf: momentum !== 0 ? k.inPtr(2) : 'nullptr',
    gscale: k.hasInput(3) ? `${k.inPtr(3)}[0]` : '1.0f', n: prod(k.inShape(0)),
    wd: f32Lit(k.num('weight_decay', 0)), momentum: f32Lit(momentum), nesterov: k.bool('nesterov', false),
  });
};

/**
 * Adam / AdamW over one or more parameters in one kernel (mk::adam_multi: one index space over all of
 * them, one pool wake-up). emit_program.ts hands consecutive adam_update nodes that share the step's
 * constants (adamGroupKey) to one call; each tensor keeps its own weight decay.
 */
const ADAM = tpl(`  const mk::AdamStep st = mk::adam_step(sc->lr, sc->t, {{b1d}}, {{b2d}}, {{b1}}, {{b2}}, {{eps}});
  const double lr = sc->lr;
  (void)lr;
  const mk::AdamSeg seg[] = {
{{#each segs}}
    { {{p}}, {{grad}}, {{m}}, {{v}}, {{n}}, {{wd}}, (float)(1.0 - lr * {{wdd}}) },
{{/each}}
  };
  mk::adam_multi<{{decoupled}}>(ctx, seg, {{gscale}}, st, ${PAR_MIN});
`);

/** nodes with equal keys can share one Adam kernel (null: this node needs its own, e.g. 16-bit inputs) */
export function adamGroupKey(k: KernelCtx): string | null {
  if (k.node.op !== 'adam_update') return null;
  for (let i = 0; i < 4; i++) if (k.inDtype(i) !== 'f32') return null;
  const gs = k.hasInput(4) ? k.inPtr(4) : '';
  return JSON.stringify([k.num('beta1'), k.num('beta2'), k.num('eps'), k.bool('decoupled', false), gs]);
}

/** the kernel body of one or more adam_update nodes with the same adamGroupKey */
export function adamGroup(ks: KernelCtx[]): string {
  const k = ks[0];
  const b1 = k.num('beta1'), b2 = k.num('beta2');
  return ADAM({
    b1: f32Lit(b1), b2: f32Lit(b2), b1d: String(b1), b2d: String(b2), eps: f32Lit(k.num('eps')),
    decoupled: String(k.bool('decoupled', false)), gscale: k.hasInput(4) ? `${k.inPtr(4)}[0]` : '1.0f',
    segs: ks.map((q) => {
      const wd = q.num('weight_decay', 0);
      return { p: q.inPtr(0), grad: q.inPtr(1), m: q.inPtr(2), v: q.inPtr(3), n: prod(q.inShape(0)), wd: f32Lit(wd), wdd: String(wd) };
    }),
  });
}

export const adam_update: KernelEmitter = (k) => adamGroup([k]);
