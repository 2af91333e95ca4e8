/**
 * shapes: the shape formulas every part of mpsc shares, each written once: window output
 * sizes (convolution and pooling), numpy broadcasting, and the output shapes of conv2d and
 * the 2-D pools. Consumed by the op catalogue's shape rules (ops.ts / op_rules), the front
 * end's layer table (check/layers.ts), flops.ts, the reference interpreter and the code
 * generators. Relies on nothing; the batch dim may be symbolic (BATCH = -1): broadcasting
 * treats it as any other size, and the spatial dims the window formulas read are never it.
 */

/** floor((size + 2*pad - dil*(k-1) - 1)/stride) + 1: the output size of a convolution or pooling window */
export function windowOut(size: number, k: number, stride: number, pad: number, dil = 1): number {
  return Math.floor((size + 2 * pad - dil * (k - 1) - 1) / stride) + 1;
}

/**
 * numpy / PyTorch broadcasting of two shapes (aligned at the right, size-1 dims stretch), or
 * null when they do not broadcast.
 */
export function broadcastShapes(a: readonly number[], b: readonly number[]): number[] | null {
  const r = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < r; i++) {
    const x = a[a.length - r + i] ?? 1;
    const y = b[b.length - r + i] ?? 1;
    if (x === y || y === 1) out.push(x);
    else if (x === 1) out.push(y);
    else return null;
  }
  return out;
}

/** a 2-element window attr ([h, w]; one number means both), or null when it is neither */
export function pairOf(v: unknown): [number, number] | null {
  if (typeof v === 'number') return [v, v];
  if (Array.isArray(v) && v.length === 2 && v.every((d) => typeof d === 'number')) return [v[0], v[1]];
  return null;
}

export interface ConvGeometry {
  stride: [number, number];
  padding: [number, number];
  dilation: [number, number];
}

/** [N, O, OH, OW] of conv2d for x [N, C, H, W] and weight [O, C/groups, KH, KW] */
export function conv2dOutShape(x: readonly number[], w: readonly number[], g: ConvGeometry): number[] {
  return [
    x[0], w[0],
    windowOut(x[2], w[2], g.stride[0], g.padding[0], g.dilation[0]),
    windowOut(x[3], w[3], g.stride[1], g.padding[1], g.dilation[1]),
  ];
}

/** [N, C, OH, OW] of a 2-D pool (max or average, dilation 1) for x [N, C, H, W] */
export function pool2dOutShape(x: readonly number[], kernel: readonly number[], stride: readonly number[], padding: readonly number[]): number[] {
  return [x[0], x[1], windowOut(x[2], kernel[0], stride[0], padding[0]), windowOut(x[3], kernel[1], stride[1], padding[1])];
}

/**
 * Element strides to read a tensor of shape `small` while iterating row-major over `big`
 * (small aligned at the right, as broadcasting does): 0 on the dims small stretches (size 1)
 * or lacks.
 */
export function broadcastStrides(small: readonly number[], big: readonly number[]): number[] {
  const r = big.length, off = r - small.length;
  const strides = new Array<number>(r).fill(0);
  let s = 1;
  for (let i = small.length - 1; i >= 0; i--) {
    strides[off + i] = small[i] === 1 && big[off + i] !== 1 ? 0 : s;
    s *= small[i];
  }
  return strides;
}

/** a matmul node's transposes and dims from its attrs and operand shapes; throws (an internal error) when they do not multiply, which verify.ts rules out */
export function matmulNodeDims(id: number, attrs: Readonly<Record<string, unknown>>, as: readonly number[], bs: readonly number[]): { ta: boolean; tb: boolean; batch: number[]; M: number; N: number; K: number } {
  const ta = Boolean(attrs.transA), tb = Boolean(attrs.transB);
  const dims = matmulDims(as, bs, ta, tb);
  if (!dims) throw new Error(`internal: node ${id}: matmul operands do not multiply`);
  return { ta, tb, ...dims };
}

/**
 * The dims of a (batched) matmul op(a) @ op(b) for a [..., M, K] (transA: [..., K, M]) and
 * b [..., K, N] (transB: [..., N, K]): the broadcast batch shape and M, N, K; null when a rank
 * is below 2, the inner dims differ or the batch dims do not broadcast.
 */
export function matmulDims(a: readonly number[], b: readonly number[], transA: boolean, transB: boolean): { batch: number[]; M: number; N: number; K: number } | null {
  if (a.length < 2 || b.length < 2) return null;
  const [a0, a1] = a.slice(-2), [b0, b1] = b.slice(-2);
  const [M, K] = transA ? [a1, a0] : [a0, a1];
  const [Kb, N] = transB ? [b1, b0] : [b0, b1];
  const batch = broadcastShapes(a.slice(0, -2), b.slice(0, -2));
  if (K !== Kb || batch === null) return null;
  return { batch, M, N, K };
}
