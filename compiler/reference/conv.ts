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

/**
 * The k in [0, count) with 0 <= start + k * step < limit (step > 0), as [lo, hi): the taps of a window
 * that fall inside the input. The loops below visit exactly the terms the bounds tests used to keep, in
 * the same order, so every sum is the same float64 value, found without a test per term.
 */
function inside(start: number, step: number, count: number, limit: number): [number, number] {
  const lo = start >= 0 ? 0 : Math.ceil(-start / step);
  const hi = Math.min(count, Math.floor((limit - 1 - start) / step) + 1);
  return [lo, Math.max(lo, hi)];
}

/** inside() for each output position p (window start p * stride - pad): the taps' [lo, hi) at 2p, 2p + 1 */
function tapRanges(out: number, stride: number, pad: number, dil: number, taps: number, limit: number): Int32Array {
  const r = new Int32Array(2 * out);
  for (let p = 0; p < out; p++) [r[2 * p], r[2 * p + 1]] = inside(p * stride - pad, dil, taps, limit);
  return r;
}

export const conv2d: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), w = input(c, 1), b = c.inputs[2];
  const g = geometry(c, inShape(c, 0), inShape(c, 1));
  if (b) expectShape(c, 'bias', c.inShapes[2]!, [g.O]);
  expectShape(c, 'output', c.outShapes[0], [g.N, g.O, g.OH, g.OW]);
  const y = c.outputs[0];
  const { N, C, H, W, O, Cg, Og, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw } = g;
  const rows = tapRanges(OH, sh, ph, dh, KH, H), cols = tapRanges(OW, sw, pw, dw, KW, W);
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      const c0 = Math.floor(o / Og) * Cg;
      for (let oh = 0; oh < OH; oh++) {
        const ih0 = oh * sh - ph, i0 = rows[2 * oh], i1 = rows[2 * oh + 1];
        for (let ow = 0; ow < OW; ow++) {
          const iw0 = ow * sw - pw, j0 = cols[2 * ow], j1 = cols[2 * ow + 1];
          let s = b ? b[o] : 0;
          for (let ci = 0; ci < Cg; ci++) {
            const xBase = (n * C + c0 + ci) * H;
            const wBase = (o * Cg + ci) * KH;
            for (let i = i0; i < i1; i++) {
              const xr = (xBase + ih0 + i * dh) * W + iw0, wr = (wBase + i) * KW;
              for (let j = j0; j < j1; j++) s += x[xr + j * dw] * w[wr + j];
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
  const rows = tapRanges(OH, sh, ph, dh, KH, H), cols = tapRanges(OW, sw, pw, dw, KW, W);
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      const c0 = Math.floor(o / Og) * Cg;
      for (let oh = 0; oh < OH; oh++) {
        const ih0 = oh * sh - ph, i0 = rows[2 * oh], i1 = rows[2 * oh + 1];
        for (let ow = 0; ow < OW; ow++) {
          const iw0 = ow * sw - pw, j0 = cols[2 * ow], j1 = cols[2 * ow + 1];
          const d = dy[((n * O + o) * OH + oh) * OW + ow];
          for (let ci = 0; ci < Cg; ci++) {
            const xBase = (n * C + c0 + ci) * H;
            const wBase = (o * Cg + ci) * KH;
            for (let i = i0; i < i1; i++) {
              const xr = (xBase + ih0 + i * dh) * W + iw0, wr = (wBase + i) * KW;
              for (let j = j0; j < j1; j++) dx[xr + j * dw] += d * w[wr + j];
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
        // the output rows / columns whose window tap (i, j) falls inside x
        const [oh0, oh1] = inside(i * dh - ph, sh, OH, H);
        for (let j = 0; j < KW; j++) {
          const [ow0, ow1] = inside(j * dw - pw, sw, OW, W);
          let s = 0;
          for (let n = 0; n < N; n++) {
            const xBase = (n * C + c0 + ci) * H;
            for (let oh = oh0; oh < oh1; oh++) {
              const dr = ((n * O + o) * OH + oh) * OW, xr = (xBase + oh * sh - ph + i * dh) * W - pw + j * dw;
              for (let ow = ow0; ow < ow1; ow++) s += dy[dr + ow] * x[xr + ow * sw];
            }
          }
          dwt[((o * Cg + ci) * KH + i) * KW + j] = s;
        }
      }
    }
  }
};
