/**
 * maxpool2d / avgpool2d / global_avgpool and their gradients (NCHW, ceil_mode=false, dilation 1).
 * A window's position (oh, ow) covers input rows oh*sh - ph + [0, kh) and columns ow*sw - pw + [0, kw);
 * positions outside the input are padding (-inf for max, 0 for average; the average always divides by kh*kw).
 */
import { windowOut } from '../ir/shapes.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, pairAttr, shapeAttr } from './kernel.js';

interface PoolGeom { NC: number; H: number; W: number; OH: number; OW: number; kh: number; kw: number; sh: number; sw: number; ph: number; pw: number }

function geometry(c: OpCtx, xs: number[]): PoolGeom {
  if (xs.length !== 4) fail(c, `x must be [N,C,H,W], got [${xs.join(',')}]`);
  const [kh, kw] = pairAttr(c, 'kernel');
  const [sh, sw] = pairAttr(c, 'stride', [kh, kw]);
  const [ph, pw] = pairAttr(c, 'padding', [0, 0]);
  const [N, C, H, W] = xs;
  const OH = windowOut(H, kh, sh, ph), OW = windowOut(W, kw, sw, pw);
  if (OH < 1 || OW < 1) fail(c, `empty output ${OH}x${OW}`);
  return { NC: N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw };
}

/** Index (within one H*W plane) of the first maximum of window (oh, ow) in row-major scan order; -1 if the window is all padding. */
function argmaxWindow(x: Float64Array, base: number, g: PoolGeom, oh: number, ow: number): number {
  let best = -1, bestV = -Infinity;
  for (let i = 0; i < g.kh; i++) {
    const ih = oh * g.sh - g.ph + i;
    if (ih < 0 || ih >= g.H) continue;
    for (let j = 0; j < g.kw; j++) {
      const iw = ow * g.sw - g.pw + j;
      if (iw < 0 || iw >= g.W) continue;
      const v = x[base + ih * g.W + iw];
      if (best < 0 || v > bestV) { best = ih * g.W + iw; bestV = v; }
    }
  }
  return best;
}

export const maxpool2d: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), g = geometry(c, xs);
  expectShape(c, 'output', c.outShapes[0], [xs[0], xs[1], g.OH, g.OW]);
  const y = c.outputs[0];
  for (let p = 0; p < g.NC; p++) {
    const base = p * g.H * g.W;
    for (let oh = 0; oh < g.OH; oh++) {
      for (let ow = 0; ow < g.OW; ow++) {
        const k = argmaxWindow(x, base, g, oh, ow);
        y[(p * g.OH + oh) * g.OW + ow] = k < 0 ? -Infinity : x[base + k];
      }
    }
  }
};

export const maxpool2d_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1), xs = inShape(c, 1), g = geometry(c, xs);
  expectShape(c, 'dy', inShape(c, 0), [xs[0], xs[1], g.OH, g.OW]);
  expectShape(c, 'output', c.outShapes[0], xs);
  const dx = c.outputs[0];
  for (let p = 0; p < g.NC; p++) {
    const base = p * g.H * g.W;
    for (let oh = 0; oh < g.OH; oh++) {
      for (let ow = 0; ow < g.OW; ow++) {
        const k = argmaxWindow(x, base, g, oh, ow);
        if (k >= 0) dx[base + k] += dy[(p * g.OH + oh) * g.OW + ow];
      }
    }
  }
};

export const avgpool2d: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), g = geometry(c, xs);
  expectShape(c, 'output', c.outShapes[0], [xs[0], xs[1], g.OH, g.OW]);
  const y = c.outputs[0];
  const div = g.kh * g.kw;
  for (let p = 0; p < g.NC; p++) {
    const base = p * g.H * g.W;
    for (let oh = 0; oh < g.OH; oh++) {
      for (let ow = 0; ow < g.OW; ow++) {
        let s = 0;
        for (let i = 0; i < g.kh; i++) {
          const ih = oh * g.sh - g.ph + i;
          if (ih < 0 || ih >= g.H) continue;
          for (let j = 0; j < g.kw; j++) {
            const iw = ow * g.sw - g.pw + j;
            if (iw < 0 || iw >= g.W) continue;
            s += x[base + ih * g.W + iw];
          }
        }
        y[(p * g.OH + oh) * g.OW + ow] = s / div;
      }
    }
  }
};

export const avgpool2d_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), xs = shapeAttr(c, 'x_shape'), g = geometry(c, xs);
  expectShape(c, 'dy', inShape(c, 0), [xs[0], xs[1], g.OH, g.OW]);
  expectShape(c, 'output', c.outShapes[0], xs);
  const dx = c.outputs[0];
  const div = g.kh * g.kw;
  for (let p = 0; p < g.NC; p++) {
    const base = p * g.H * g.W;
    for (let oh = 0; oh < g.OH; oh++) {
      for (let ow = 0; ow < g.OW; ow++) {
        const d = dy[(p * g.OH + oh) * g.OW + ow] / div;
        for (let i = 0; i < g.kh; i++) {
          const ih = oh * g.sh - g.ph + i;
          if (ih < 0 || ih >= g.H) continue;
          for (let j = 0; j < g.kw; j++) {
            const iw = ow * g.sw - g.pw + j;
            if (iw < 0 || iw >= g.W) continue;
            dx[base + ih * g.W + iw] += d;
          }
        }
      }
    }
  }
};

export const global_avgpool: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0);
  if (xs.length !== 4) fail(c, `x must be [N,C,H,W], got [${xs.join(',')}]`);
  const [N, C, H, W] = xs;
  expectShape(c, 'output', c.outShapes[0], [N, C, 1, 1]);
  const y = c.outputs[0], hw = H * W;
  for (let p = 0; p < N * C; p++) {
    let s = 0;
    for (let k = 0; k < hw; k++) s += x[p * hw + k];
    y[p] = s / hw;
  }
};

export const global_avgpool_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), xs = shapeAttr(c, 'x_shape');
  if (xs.length !== 4) fail(c, `x_shape must be [N,C,H,W], got [${xs.join(',')}]`);
  const [N, C, H, W] = xs;
  expectShape(c, 'dy', inShape(c, 0), [N, C, 1, 1]);
  expectShape(c, 'output', c.outShapes[0], xs);
  const dx = c.outputs[0], hw = H * W;
  for (let p = 0; p < N * C; p++) {
    const d = dy[p] / hw;
    for (let k = 0; k < hw; k++) dx[p * hw + k] = d;
  }
};
