/** embedding (+ grad), concat, slice: row copies. Ids are checked again here (never read out of bounds). */
import { tpl } from '../template.js';
import { type KernelEmitter, prod, splitAxis } from '../kernel_ctx.js';

const EMBED = tpl(`  const int32_t* ids = {{ids}};
  const float* w = {{w}};
  float* y = {{y}};
  for (int64_t j = 0; j < {{n}}; j++) {
    const int32_t id = ids[j];
    if (id < 0 || id >= {{V}}) {
      std::snprintf(ctx->error, sizeof ctx->error, "embedding: id %d at position %lld is outside [0, {{V}})", (int)id, (long long)j);
      return 1;
    }
    std::memcpy(y + j * {{D}}, w + (int64_t)id * {{D}}, sizeof(float) * {{D}});
  }
`);

const EMBED_GRAD = tpl(`  const float* dy = {{dy}};
  const int32_t* ids = {{ids}};
  float* dw = {{dw}};
  std::memset(dw, 0, sizeof(float) * {{V}} * {{D}});
  for (int64_t j = 0; j < {{n}}; j++) {
    const int32_t id = ids[j];
    if (id < 0 || id >= {{V}}) {
      std::snprintf(ctx->error, sizeof ctx->error, "embedding: id %d at position %lld is outside [0, {{V}})", (int)id, (long long)j);
      return 1;
    }
    float* row = dw + (int64_t)id * {{D}};
    const float* g = dy + j * {{D}};
    for (int64_t i = 0; i < {{D}}; i++) row[i] += g[i];
  }
`);

export const embedding: KernelEmitter = (k) => {
  const [V, D] = k.inShape(1);
  return EMBED({ ids: k.inPtr(0), w: k.inPtr(1), y: k.outPtr(0), n: prod(k.inShape(0)), V, D });
};

export const embedding_grad: KernelEmitter = (k) => {
  const [V, D] = k.shape('w_shape');
  return EMBED_GRAD({ dy: k.inPtr(0), ids: k.inPtr(1), dw: k.outPtr(0), n: prod(k.inShape(1)), V, D });
};

const CONCAT = tpl(`  float* y = {{y}};
{{#each parts}}
  {
    const float* x = {{ptr}};
    for (int64_t o = 0; o < {{../outer}}; o++)
      std::memcpy(y + o * {{../rowOut}} + {{start}}, x + o * {{len}}, sizeof(float) * {{len}});
  }
{{/each}}
`);

export const concat: KernelEmitter = (k) => {
  const axis = k.num('axis');
  const ys = k.outShape(0);
  const [outer, , inner] = splitAxis(ys, axis);
  let start = 0;
  const parts = k.node.inputs.map((_, i) => {
    const len = k.inShape(i)[axis] * inner;
    const p = { ptr: k.inPtr(i), start, len };
    start += len;
    return p;
  });
  return CONCAT({ y: k.outPtr(0), outer, rowOut: ys[axis] * inner, parts });
};

const SLICE = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  for (int64_t o = 0; o < {{outer}}; o++)
    std::memcpy(y + o * {{len}}, x + o * {{rowIn}} + {{start}}, sizeof(float) * {{len}});
`);

export const slice: KernelEmitter = (k) => {
  const axis = k.num('axis'), start = k.num('start'), length = k.num('length');
  const xs = k.inShape(0);
  const [outer, size, inner] = splitAxis(xs, axis);
  if (start < 0 || start + length > size) k.fail(`slice [${start}, ${start + length}) out of range ${size}`);
  return SLICE({ x: k.inPtr(0), y: k.outPtr(0), outer, rowIn: size * inner, start: start * inner, len: length * inner });
};
