/**
 * conv2d, conv2d_grad_input and conv2d_grad_weight through the fast core
 * (runtime/cpp/fast/conv.h, which picks the method per shape: direct kernels, the stride-1
 * "wide"-row implicit GEMM, or im2col generated straight into packed GEMM panels), one part per
 * pool thread with its own scratch block (mk::run_parts, reserved once and reused), bias and
 * (when compiler/ir/fuse.ts folded the following relu in: attr `epilogue`) relu in the
 * forward GEMM's epilogue, a folded relu-grad (attr `relu_grad`, the mask as the last input) in
 * grad-input's store; grad-weight in batch chunks added in a second phase
 * (mk::conv_grad_weight). Results are the same bits for any thread count.
 */
import { windowOut } from '../../ir/shapes.js';
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, reluEpilogue } from '../kernel_ctx.js';

interface Geo {
  N: number; C: number; H: number; W: number; O: number; KH: number; KW: number;
  sh: number; sw: number; ph: number; pw: number; dlh: number; dlw: number; G: number;
  OH: number; OW: number; Cg: number; Og: number; CKK: number; P: number; direct: boolean;
}

function geometry(k: KernelCtx, xs: number[], ws: number[]): Geo {
  if (xs.length !== 4 || ws.length !== 4) k.fail('conv2d expects x [N,C,H,W] and weight [O,C/g,KH,KW]');
  const [N, C, H, W] = xs;
  const [O, Cg, KH, KW] = ws;
  const [sh, sw] = k.pair('stride', [1, 1]);
  const [ph, pw] = k.pair('padding', [0, 0]);
  const [dlh, dlw] = k.pair('dilation', [1, 1]);
  const G = k.num('groups', 1);
  if (C % G !== 0 || O % G !== 0 || Cg !== C / G) k.fail(`channels ${C}/${O} do not split into ${G} groups of weight in-channels ${Cg}`);
  const OH = windowOut(H, KH, sh, ph, dlh), OW = windowOut(W, KW, sw, pw, dlw);
  const direct = KH === 1 && KW === 1 && sh === 1 && sw === 1 && ph === 0 && pw === 0;
  return { N, C, H, W, O, KH, KW, sh, sw, ph, pw, dlh, dlw, G, OH, OW, Cg, Og: O / G, CKK: Cg * KH * KW, P: OH * OW, direct };
}

const SHAPE = `  static const mpsc_fast::Conv2dShape s = mpsc_fast::conv2d_shape({{N}}, {{C}}, {{H}}, {{W}}, {{O}}, {{KH}}, {{KW}}, {{sh}}, {{sw}}, {{ph}}, {{pw}}, {{dlh}}, {{dlw}}, {{G}});
`;

const FORWARD = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  const float* bias = {{bias}};
  float* y = {{y}};
${SHAPE}  mk::run_parts(ctx, mpsc_fast::conv2d_scratch_bytes(s, mpsc_fast::CONV_FORWARD), [&](int part, int nparts, void* ws) {
    mpsc_fast::conv2d_forward_part(s, x, w, bias, {{relu}}, y, part, nparts, ws);
  });
`);

export const conv2d: KernelEmitter = (k) => {
  const g = geometry(k, k.inShape(0), k.inShape(1));
  const bias = k.hasInput(2) ? k.inPtr(2) : 'nullptr';
  return FORWARD({ ...g, x: k.inPtr(0), w: k.inPtr(1), y: k.outPtr(0), bias, relu: String(reluEpilogue(k)) });
};

const GRAD_INPUT = tpl(`  const float* dy = {{dy}};
  const float* w = {{w}};
  float* dx = {{dx}};
  const float* mask = {{mask}};
${SHAPE}  mk::run_parts(ctx, mpsc_fast::conv2d_scratch_bytes(s, mpsc_fast::CONV_GRAD_INPUT), [&](int part, int nparts, void* ws) {
    mpsc_fast::conv2d_grad_input_part(s, dy, w, dx, part, nparts, ws, mask);
  });
`);

export const conv2d_grad_input: KernelEmitter = (k) => {
  const g = geometry(k, k.shape('x_shape'), k.inShape(1));
  if (k.str('epilogue', '') !== '') k.fail('the CPU conv2d_grad_input takes no epilogue (fusions.ts)');
  // relu_grad (compiler/ir/fuse.ts rule 2): the mask is the last input, applied in the store
  const relu = k.bool('relu_grad', false);
  if (relu !== k.hasInput(2)) k.fail('relu_grad and the mask input go together');
  return GRAD_INPUT({ ...g, dy: k.inPtr(0), w: k.inPtr(1), dx: k.outPtr(0), mask: relu ? k.inPtr(2) : 'nullptr' });
};

const GRAD_WEIGHT = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dw = {{dw}};
${SHAPE}  mk::conv_grad_weight(ctx, s, dy, x, dw);
`);

export const conv2d_grad_weight: KernelEmitter = (k) => {
  const g = geometry(k, k.inShape(1), k.shape('w_shape'));
  if (k.str('epilogue', '') !== '') k.fail('the CPU conv2d_grad_weight takes no epilogue (fusions.ts)');
  return GRAD_WEIGHT({ ...g, dy: k.inPtr(0), x: k.inPtr(1), dw: k.outPtr(0) });
};
