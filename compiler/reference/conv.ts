/**
 * conv2d and its two gradients (torch.nn.functional.conv2d semantics, NCHW,
 * weight [O, C/groups, KH, KW], zero padding, stride, dilation, groups).
 *
 *   y[n,o,oh,ow] = bias[o] + sum_{c<C/groups, i<KH, j<KW}
 *                  x[n, g*Cg + c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] * w[o,c,i,j]
 *   with g = floor(o / (O/groups)), Cg = C/groups; out-of-range x reads are zero.
 * The gradients below are this same sum, scattered instead of gathered.
 */
import { windowOut } from '../ir/shapes.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr, pairAttr, shapeAttr } from './kernel.js';

interface ConvGeom {
  N: number; C: number; H: number; W: number;
  O: number; Cg: number; Og: number; KH: number; KW: number;
  OH: number; OW: number;
  sh: number; sw: number; ph: number; pw: number; dh: number; dw: number;
}

function geometry(c: OpCtx, xs: number[], ws: number[]): ConvGeom {
  if (xs.length !== 4) fail(c, `x must be [N,C,H,W], got [${xs.join(',')}]`);
  if (ws.length !== 4) fail(c, `weight must be [O,C/groups,KH,KW], got [${ws.join(',')}]`);
  const [sh, sw] = pairAttr(c, 'stride', [1, 1]);
  const [ph, pw] = pairAttr(c, 'padding', [0, 0]);
  const [dh, dw] = pairAttr(c, 'dilation', [1, 1]);
  const groups = numAttr(c, 'groups', 1);
  const [N, C, H, W] = xs;
  const [O, Cg, KH, KW] = ws;
  if (C % groups !== 0 || O % groups !== 0) fail(c, `groups ${groups} must divide C=${C} and O=${O}`);
  if (Cg !== C / groups) fail(c, `weight dim 1 is ${Cg}, expected C/groups = ${C / groups}`);
  const OH = windowOut(H, KH, sh, ph, dh), OW = windowOut(W, KW, sw, pw, dw);
  if (OH < 1 || OW < 1) fail(c, `empty output ${OH}x${OW}`);
  return { N, C, H, W, O, Cg, Og: O / groups, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw };
}

export const conv2d: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), w = input(c, 1), b = c.inputs[2];
  const g = geometry(c, inShape(c, 0), inShape(c, 1));
  if (b) expectShape(c, 'bias', c.inShapes[2]!, [g.O]);
  expectShape(c, 'output', c.outShapes[0], [g.N, g.O, g.OH, g.OW]);
  const y = c.outputs[0];
  const { N, C, H, W, O, Cg, Og, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw } = g;
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      const c0 = Math.floor(o / Og) * Cg;
      for (let oh = 0; oh < OH; oh++) {
        for (let ow = 0; ow < OW; ow++) {
          let s = b ? b[o] : 0;
          for (let ci = 0; ci < Cg; ci++) {
            const xBase = (n * C + c0 + ci) * H;
            const wBase = (o * Cg + ci) * KH;
            for (let i = 0; i < KH; i++) {
              const ih = oh * sh - ph + i * dh;
              if (ih < 0 || ih >= H) continue;
              for (let j = 0; j < KW; j++) {
                const iw = ow * sw - pw + j * dw;
                if (iw < 0 || iw >= W) continue;
                s += x[(xBase + ih) * W + iw] * w[(wBase + i) * KW + j];
              }
            }
          }
          y[((n * O + o) * OH + oh) * OW + ow] = s;
        }
      }
    }
  }
};

/** dx[n, c, ih, iw] = sum over every (o, oh, ow, i, j) that read x[n,c,ih,iw] of dy[n,o,oh,ow] * w[o,c-c0,i,j]. */
export const conv2d_grad_input: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), w = input(c, 1);
  const xs = shapeAttr(c, 'x_shape');
  const g = geometry(c, xs, inShape(c, 1));
  expectShape(c, 'dy', inShape(c, 0), [g.N, g.O, g.OH, g.OW]);
  expectShape(c, 'output', c.outShapes[0], xs);
  const dx = c.outputs[0];
  const { N, C, H, W, O, Cg, Og, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw } = g;
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      const c0 = Math.floor(o / Og) * Cg;
      for (let oh = 0; oh < OH; oh++) {
        for (let ow = 0; ow < OW; ow++) {
          const d = dy[((n * O + o) * OH + oh) * OW + ow];
          for (let ci = 0; ci < Cg; ci++) {
            const xBase = (n * C + c0 + ci) * H;
            const wBase = (o * Cg + ci) * KH;
            for (let i = 0; i < KH; i++) {
              const ih = oh * sh - ph + i * dh;
              if (ih < 0 || ih >= H) continue;
              for (let j = 0; j < KW; j++) {
                const iw = ow * sw - pw + j * dw;
                if (iw < 0 || iw >= W) continue;
                dx[(xBase + ih) * W + iw] += d * w[(wBase + i) * KW + j];
              }
            }
          }
        }
      }
    }
  }
};

/** dw[o, ci, i, j] = sum over n, oh, ow of dy[n,o,oh,ow] * x[n, c0+ci, oh*sh-ph+i*dh, ow*sw-pw+j*dw]. */
export const conv2d_grad_weight: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1);
  const ws = shapeAttr(c, 'w_shape');
  const g = geometry(c, inShape(c, 1), ws);
  expectShape(c, 'dy', inShape(c, 0), [g.N, g.O, g.OH, g.OW]);
  expectShape(c, 'output', c.outShapes[0], ws);
  const dwt = c.outputs[0];
  const { N, C, H, W, O, Cg, Og, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw } = g;
  for (let o = 0; o < O; o++) {
    const c0 = Math.floor(o / Og) * Cg;
    for (let ci = 0; ci < Cg; ci++) {
      for (let i = 0; i < KH; i++) {
        for (let j = 0; j < KW; j++) {
          let s = 0;
          for (let n = 0; n < N; n++) {
            const xBase = (n * C + c0 + ci) * H;
            for (let oh = 0; oh < OH; oh++) {
              const ih = oh * sh - ph + i * dh;
              if (ih < 0 || ih >= H) continue;
              for (let ow = 0; ow < OW; ow++) {
                const iw = ow * sw - pw + j * dw;
                if (iw < 0 || iw >= W) continue;
                s += dy[((n * O + o) * OH + oh) * OW + ow] * x[(xBase + ih) * W + iw];
              }
            }
          }
          dwt[((o * Cg + ci) * KH + i) * KW + j] = s;
        }
      }
    }
  }
};
