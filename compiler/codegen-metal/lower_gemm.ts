/**
 * lower_gemm: every matrix-product-shaped op as one GEMM template with op-specific loaders:
 * linear, matmul, conv2d (implicit im2col), conv2d_grad_input, conv2d_grad_weight.
 * Two variants with the same grid: a plain 16x16-tiled kernel (all GPUs) and a
 * simdgroup_float8x8 kernel (Apple7+), recorded as the launch's `mma` variant.
 * Loader snippets see g (group), mi/ki (A) or ki/ni (B) and assign `v`; the store sees
 * g, mi, ni and acc. Out-of-range indices never reach a loader.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelArg, KernelSpec, LowerCtx } from './kernel_types.js';
import { render } from './templates.js';
import { argOf, ceilDiv, label, numAttr, pairAttr, shapeOf, u32 } from './lower_common.js';
import { unaryExpr } from './lower_elementwise.js';

const L = '          ';

interface Gemm {
  M: number; N: number; K: number; G: number;
  loadA: string; loadB: string;
  /** the store: statements `pre`, then `out[idx] = acc + bias` */
  pre: string; out: string; idx: string; bias: string;
  args: KernelArg[];
}

function convGeom(n: Node, xs: number[], ws: number[]) {
  const [SH, SW] = pairAttr(n, 'stride', [1, 1]);
  const [PH, PW] = pairAttr(n, 'padding', [0, 0]);
  const [DH, DW] = pairAttr(n, 'dilation', [1, 1]);
  const G = numAttr(n, 'groups', 1);
  const [NB, C, H, W] = xs;
  const [O, CG, KH, KW] = ws;
  const OH = Math.floor((H + 2 * PH - DH * (KH - 1) - 1) / SH) + 1;
  const OW = Math.floor((W + 2 * PW - DW * (KW - 1) - 1) / SW) + 1;
  return { SH, SW, PH, PW, DH, DW, G, NB, C, H, W, O, CG, KH, KW, OH, OW, OG: O / G };
}

/** im2col read of x: spatial index `sp` = (nb, oh, ow), filter index `fk` = (c, kh, kw) */
function im2col(c: ReturnType<typeof convGeom>, sp: string, fk: string): string {
  const u = u32;
  return (
    `${L}const uint nb = ${sp} / ${u(c.OH * c.OW)}, p = ${sp} % ${u(c.OH * c.OW)}, oh = p / ${u(c.OW)}, ow = p % ${u(c.OW)};\n` +
    `${L}const uint c = ${fk} / ${u(c.KH * c.KW)}, q = ${fk} % ${u(c.KH * c.KW)}, kh = q / ${u(c.KW)}, kw = q % ${u(c.KW)};\n` +
    `${L}const int ih = int(oh * ${u(c.SH)} + kh * ${u(c.DH)}) - ${c.PH}, iw = int(ow * ${u(c.SW)} + kw * ${u(c.DW)}) - ${c.PW};\n` +
    `${L}if (ih >= 0 && ih < ${c.H} && iw >= 0 && iw < ${c.W}) v = x[((nb * ${u(c.C)} + g * ${u(c.CG)} + c) * ${u(c.H)} + uint(ih)) * ${u(c.W)} + uint(iw)];`
  );
}

function gemmOf(g: Graph, n: Node): Gemm | null {
  const u = u32;
  const ins = n.inputs;
  switch (n.op) {
    case 'linear': {
      const [M, K] = shapeOf(g, ins[0]);
      const N = shapeOf(g, ins[1])[0];
      const hasBias = ins.length > 2 && ins[2] >= 0;
      const args = [argOf(g, 'x', ins[0], 'r'), argOf(g, 'w', ins[1], 'r')];
      if (hasBias) args.push(argOf(g, 'b', ins[2], 'r'));
      args.push(argOf(g, 'y', n.outputs[0], 'w'));
      return {
        M, N, K, G: 1, args,
        loadA: `${L}v = x[mi * ${u(K)} + ki];`,
        loadB: `${L}v = w[ni * ${u(K)} + ki];`,
        pre: '', out: 'y', idx: `mi * ${u(N)} + ni`, bias: hasBias ? 'b[ni]' : '',
      };
    }
    case 'matmul': {
      const ta = Boolean(n.attrs.transA), tb = Boolean(n.attrs.transB);
      const as = shapeOf(g, ins[0]);
      const [M, N] = shapeOf(g, n.outputs[0]);
      const K = ta ? as[0] : as[1];
      return {
        M, N, K, G: 1,
        args: [argOf(g, 'a', ins[0], 'r'), argOf(g, 'b', ins[1], 'r'), argOf(g, 'y', n.outputs[0], 'w')],
        loadA: ta ? `${L}v = a[ki * ${u(M)} + mi];` : `${L}v = a[mi * ${u(K)} + ki];`,
        loadB: tb ? `${L}v = b[ni * ${u(K)} + ki];` : `${L}v = b[ki * ${u(N)} + ni];`,
        pre: '', out: 'y', idx: `mi * ${u(N)} + ni`, bias: '',
      };
    }
    case 'conv2d': {
      const c = convGeom(n, shapeOf(g, ins[0]), shapeOf(g, ins[1]));
      const hasBias = ins.length > 2 && ins[2] >= 0;
      const K = c.CG * c.KH * c.KW;
      const args = [argOf(g, 'x', ins[0], 'r'), argOf(g, 'w', ins[1], 'r')];
      if (hasBias) args.push(argOf(g, 'b', ins[2], 'r'));
      args.push(argOf(g, 'y', n.outputs[0], 'w'));
      return {
        M: c.NB * c.OH * c.OW, N: c.OG, K, G: c.G, args,
        loadA: im2col(c, 'mi', 'ki'),
        loadB: `${L}v = w[(g * ${u(c.OG)} + ni) * ${u(K)} + ki];`,
        pre: `      const uint nb = mi / ${u(c.OH * c.OW)}, p = mi % ${u(c.OH * c.OW)};\n`,
        out: 'y', idx: `(nb * ${u(c.O)} + g * ${u(c.OG)} + ni) * ${u(c.OH * c.OW)} + p`, bias: hasBias ? `b[g * ${u(c.OG)} + ni]` : '',
      };
    }
    case 'conv2d_grad_input': {
      const c = convGeom(n, n.attrs.x_shape as number[], shapeOf(g, ins[1]));
      const KK = c.KH * c.KW;
      return {
        M: c.NB * c.H * c.W, N: c.CG, K: c.OG * KK, G: c.G,
        args: [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'w', ins[1], 'r'), argOf(g, 'dx', n.outputs[0], 'w')],
        loadA:
          `${L}const uint nb = mi / ${u(c.H * c.W)}, p = mi % ${u(c.H * c.W)}, ih = p / ${u(c.W)}, iw = p % ${u(c.W)};\n` +
          `${L}const uint o = ki / ${u(KK)}, q = ki % ${u(KK)}, kh = q / ${u(c.KW)}, kw = q % ${u(c.KW)};\n` +
          `${L}const int th = int(ih) + ${c.PH} - int(kh * ${u(c.DH)}), tw = int(iw) + ${c.PW} - int(kw * ${u(c.DW)});\n` +
          `${L}if (th >= 0 && tw >= 0 && th % ${c.SH} == 0 && tw % ${c.SW} == 0) {\n` +
          `${L}  const uint oh = uint(th) / ${u(c.SH)}, ow = uint(tw) / ${u(c.SW)};\n` +
          `${L}  if (oh < ${u(c.OH)} && ow < ${u(c.OW)}) v = dy[((nb * ${u(c.O)} + g * ${u(c.OG)} + o) * ${u(c.OH)} + oh) * ${u(c.OW)} + ow];\n` +
          `${L}}`,
        loadB: `${L}v = w[((g * ${u(c.OG)} + ki / ${u(KK)}) * ${u(c.CG)} + ni) * ${u(KK)} + ki % ${u(KK)}];`,
        pre: `      const uint nb = mi / ${u(c.H * c.W)}, p = mi % ${u(c.H * c.W)};\n`,
        out: 'dx', idx: `(nb * ${u(c.C)} + g * ${u(c.CG)} + ni) * ${u(c.H * c.W)} + p`, bias: '',
      };
    }
    case 'conv2d_grad_weight': {
      const c = convGeom(n, shapeOf(g, ins[1]), n.attrs.w_shape as number[]);
      const N = c.CG * c.KH * c.KW;
      return {
        M: c.OG, N, K: c.NB * c.OH * c.OW, G: c.G,
        args: [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'x', ins[1], 'r'), argOf(g, 'dw', n.outputs[0], 'w')],
        loadA:
          `${L}const uint nb = ki / ${u(c.OH * c.OW)}, p = ki % ${u(c.OH * c.OW)};\n` +
          `${L}v = dy[(nb * ${u(c.O)} + g * ${u(c.OG)} + mi) * ${u(c.OH * c.OW)} + p];`,
        loadB: im2col(c, 'ki', 'ni'),
        pre: '', out: 'dw', idx: `(g * ${u(c.OG)} + mi) * ${u(N)} + ni`, bias: '',
      };
    }
  }
  return null;
}

export const GEMM_OPS = ['linear', 'matmul', 'conv2d', 'conv2d_grad_input', 'conv2d_grad_weight'];

/** `epilogue`: a following element-wise `unary` node fused into the store (its output replaces the GEMM's). */
export function lowerGemm(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null {
  const gm = gemmOf(g, n);
  if (!gm) return null;
  let value = gm.bias ? `acc + ${gm.bias}` : 'acc';
  let args = gm.args;
  let what = '';
  if (epilogue) {
    const fn = String(epilogue.attrs.fn);
    if (fn === 'gelu') ctx.helpers.add('erfc');
    value = unaryExpr(fn, typeof epilogue.attrs.alpha === 'number' ? epilogue.attrs.alpha : 0.01, `(${value})`);
    args = [...args.slice(0, -1), argOf(g, gm.out, epilogue.outputs[0], 'w')];
    what = ` + fused node ${epilogue.id}: unary ${fn} -> ${g.values[epilogue.outputs[0]].name}`;
  }
  const store = `${gm.pre}      ${gm.out}[${gm.idx}] = ${value};`;
  const view = { M: u32(gm.M), N: u32(gm.N), K: u32(gm.K), loadA: gm.loadA, loadB: gm.loadB, store };
  const name = ctx.next();
  return [{
    name, node: n.id, op: n.op, label: label(g, n) + what, args,
    groups: [Math.max(1, ceilDiv(gm.N, 16)), Math.max(1, ceilDiv(gm.M, 16)), gm.G],
    tgsize: [16, 16, 1], tgmem: 2 * 256 * 4, sync: true,
    body: render('gemm_tiled', view),
    mma: { name: `${name}_mma`, tgsize: [128, 1, 1], tgmem: 3 * 256 * 4, sync: true, body: render('gemm_mma', view) },
  }];
}
