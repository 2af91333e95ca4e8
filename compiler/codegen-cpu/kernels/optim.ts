/** grad_accumulate, zero, grad_norm, clip_coef, sgd_update, adam_update (in place on persistent tensors). */
import { f32Lit } from '../../cfamily/text.js';
import { tpl } from '../template.js';
import { type KernelEmitter, PAR_MIN, prod } from '../kernel_ctx.js';

const ACCUM = tpl(`  float* acc = {{acc}};
  const float* g = {{g}};
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) acc[i] += {{scale}} * g[i];
  });
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

const SGD = tpl(`  float* __restrict p = {{p}};
  const float* __restrict grad = {{grad}};
{{#if hasBuf}}
  float* __restrict buf = {{buf}};
{{/if}}
  const float gs = {{gscale}};
  const float lr = sc->lr;
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      float g = grad[i] * gs + {{wd}} * p[i];
{{#if hasBuf}}
      buf[i] = {{momentum}} * buf[i] + g;
      g = {{#if nesterov}}g + {{momentum}} * buf[i]{{else}}buf[i]{{/if}};
{{/if}}
      p[i] -= lr * g;
    }
  });
`);

export const sgd_update: KernelEmitter = (k) => {
  const momentum = k.num('momentum', 0);
  if (momentum !== 0 && !k.hasInput(2)) k.fail('momentum != 0 needs a momentum_buffer input');
  return SGD({
    p: k.inPtr(0), grad: k.inPtr(1), hasBuf: momentum !== 0, buf: momentum !== 0 ? k.inPtr(2) : '',
    gscale: k.hasInput(3) ? `${k.inPtr(3)}[0]` : '1.0f', n: prod(k.inShape(0)),
    wd: f32Lit(k.num('weight_decay', 0)), momentum: f32Lit(momentum), nesterov: k.bool('nesterov', false),
  });
};

// __restrict: param, grad and the two moments are distinct buffers, so the loop vectorises (element-wise: same bits)
const ADAM = tpl(`  float* __restrict p = {{p}};
  const float* __restrict grad = {{grad}};
  float* __restrict m = {{m}};
  float* __restrict v = {{v}};
  const float gs = {{gscale}};
  const double lr = sc->lr;
  const double bc1 = 1.0 - std::pow({{b1d}}, (double)sc->t), bc2 = 1.0 - std::pow({{b2d}}, (double)sc->t);
  const float step = (float)(lr / bc1), sqrt_bc2 = (float)std::sqrt(bc2);
  const float decay = (float)(1.0 - lr * {{wdd}});
  mk::par(ctx, {{n}}, ${PAR_MIN}, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      float g = grad[i] * gs;
{{#if decoupled}}
      p[i] *= decay;
{{else}}
      g += {{wd}} * p[i];
{{/if}}
      m[i] = {{b1}} * m[i] + (1.0f - {{b1}}) * g;
      v[i] = {{b2}} * v[i] + (1.0f - {{b2}}) * g * g;
      p[i] -= step * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + {{eps}});
    }
  });
  (void)decay;
`);

export const adam_update: KernelEmitter = (k) => {
  const b1 = k.num('beta1'), b2 = k.num('beta2'), eps = k.num('eps'), wd = k.num('weight_decay', 0);
  return ADAM({
    p: k.inPtr(0), grad: k.inPtr(1), m: k.inPtr(2), v: k.inPtr(3), gscale: k.hasInput(4) ? `${k.inPtr(4)}[0]` : '1.0f',
    n: prod(k.inShape(0)), b1: f32Lit(b1), b2: f32Lit(b2), b1d: String(b1), b2d: String(b2), eps: f32Lit(eps),
    wd: f32Lit(wd), wdd: String(wd), decoupled: k.bool('decoupled', false),
  });
};
