/**
 * attention_f32: the CUDA backend's flash attention in fp32 on the CUDA cores (no TF32: PyTorch's
 * fp32 attention, the memory-efficient kernel, does not use it either, and issue 14 keeps fp32 within
 * 1e-4 of the float64 reference), for `attention` / `attention_grad` nodes neither the 16-bit
 * tensor-core kernels (attention_cuda.ts) nor the fp32 3xTF32 ones (attention_tf32x3.ts: all-fp32
 * operands, unless MPSC_CUDA_ATTN_TF32X3=0) take, with a head width in F32_HEAD_DIMS, and their packed forms
 * attention_qkv / attention_qkv_grad (the same kernels: every operand addressed by op_rules' attnLayout,
 * a head's element offset and row stride, so q, k, v are read in place from the [N,T,3C] projection,
 * o / dO are [N,T,C] and dq, dk, dv land in one [N,T,3C] gradient). Consumes those nodes
 * (CUDA dialect context; operands of any element type, 16-bit ones widened exactly); produces
 * KernelSpecs with the same IR semantics and saved tensors (o, lse) as the shared kernel. Called by
 * attention_cuda.ts lowerAttentionCuda, which decides which nodes come here.
 *
 * Same structure as the 16-bit kernels (FlashAttention-2: online softmax over streamed key tiles in
 * the forward; backward = Delta into the scratch region + a dK/dV kernel per key tile + a dQ kernel
 * per query tile, no atomics), with 32 x 32 score tiles per block of 128 threads: thread (ty, tx)
 * (ty = 0..7, tx = 0..15) owns rows 4 ty .. 4 ty + 3 and columns tx, tx + 16 of the scores (register
 * tile of 4 x 2), and the same rows x columns tx + 16 jd (jd < D / 16) of the D-wide accumulators.
 * The tiles sit in shared memory row-major with a pitch of D + 4 floats (rows 16-byte aligned: the
 * products read 4 features, or 4 keys of a score row, per float4; at D = 64 a row is 17 x 16 bytes, so
 * the 8 rows of a quarter-warp's float4 reads fall in 8 different bank quads), the probabilities / dS in
 * a [32][36] tile between the two products. Row reductions (max, sum) are butterflies over the 16 lanes of a half-warp holding one row.
 * Softmax in base 2 (exp2f of scores pre-scaled by scale * log2 e), lse in natural log.
 * The 3xTF32 tensor-core kernels (attention_tf32x3.ts) are the default for all-fp32 nodes; this file
 * keeps mixed-precision operands, the A/B switch MPSC_CUDA_ATTN_TF32X3=0, and the node assembly
 * (flashKernels, Delta) every flash path shares.
 * Relies on: static shared memory under 48 KiB (D = 64: Q, K, V, dO tiles of 32 x 68 floats and two
 * 32 x 36 score tiles: 43 KiB in the dK/dV kernel).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { asFloat, isHalfElem, type Dialect } from '../kernels/dialect.js';
import { argOf, ceilDiv, label, shapeOf } from '../kernels/common.js';
import { attnLayout, type AttnLayout, type HeadRows } from '../ir/op_rules/attention.js';

/** head widths of the fp32 kernels (a multiple of the 16 accumulator columns per thread row; wider heads exceed 48 KiB) */
export const F32_HEAD_DIMS: readonly number[] = [16, 32, 48, 64];

/** rows per block and per streamed tile; threads per block */
const B = 32;
const THREADS = 128;
/** pitch (floats) of the [32][32] score tiles: rows 16-byte aligned for float4 reads */
const SP = 36;
/** pitch (floats) of the [32][D] tiles: rows 16-byte aligned; 17 x 16 bytes at D = 64, so 8 rows' float4s hit 8 different bank quads */
const pitch = (D: number) => D + 4;
const LOG2E = Math.LOG2E;

/**
 * one attention op: H heads (N * heads) of T queries and S keys of width D; L the operands' layouts;
 * buf the kernel argument each logical buffer (q, k, v, dout, o, lse, dq, dk, dv) is read / written through
 */
export interface AttnGeom { H: number; T: number; S: number; D: number; causal: boolean; scale: number; L: AttnLayout; buf: Record<string, string> }
type Geom = AttnGeom;

/** a float literal that reads back as the same float32 */
export const lit = (x: number) => {
  const s = Math.fround(x).toPrecision(9);
  return /[.e]/.test(s) ? `${s}f` : `${s}.0f`;
};

/** the attention family's ops: separate q, k, v, or packed in one [N,T,3C] projection */
export const ATTENTION_FAMILY: readonly string[] = ['attention', 'attention_grad', 'attention_qkv', 'attention_qkv_grad'];
export const isForward = (n: Node) => n.op === 'attention' || n.op === 'attention_qkv';

export function attnGeom(g: Graph, n: Node): Geom {
  const L = attnLayout(n.op, n.inputs.map((v) => shapeOf(g, v)), n.attrs);
  const buf: Record<string, string> = L.packed
    ? { q: 'qkv', k: 'qkv', v: 'qkv', o: 'o', dout: 'dout', lse: 'lse', dq: 'dqkv', dk: 'dqkv', dv: 'dqkv' }
    : { q: 'q', k: 'k', v: 'v', o: 'o', dout: 'dout', lse: 'lse', dq: 'dq', dk: 'dk', dv: 'dv' };
  return { H: L.N * L.H, T: L.T, S: L.S, D: L.D, causal: L.causal, scale: L.scale, L, buf };
}

/** the IR value of the saved lse (f32 in both flash paths) and of the head-width operand */
export function lseValue(n: Node): number {
  return isForward(n) ? n.outputs[1] : n.inputs[n.op === 'attention_grad' ? 5 : 3];
}

/** the index type of the operands' element offsets: int for a packed layout whose buffers an int indexes, else size_t */
export function indexType(gm: AttnGeom): 'int' | 'size_t' {
  return gm.L.packed && gm.L.N * gm.L.q.sn < 2 ** 31 ? 'int' : 'size_t';
}

/**
 * the test that key `kc` is visible from query `qr` in a flash kernel (C text; `edges`: which of the T / S
 * edges to test, for rows possibly past them): causal keeps key j for query i iff j <= i + S - T. Every
 * flash path's kernels (this file, attention_cuda.ts, attention_tf32x3.ts, attention_steps.ts) use it.
 */
export function visibleTest(gm: AttnGeom): (qr: string, kc: string, edges: { q?: boolean; k?: boolean }) => string {
  const shift = gm.S - gm.T;
  return (qr, kc, edges) =>
    [edges.q ? `${qr} < T` : '', edges.k ? `${kc} < S` : '', gm.causal ? `${kc} <= ${qr} + ${shift}` : ''].filter(Boolean).join(' && ') || 'true';
}

/**
 * `const size_t qoff = ..., koff = ..., voff = ..., ooff = ...;` (head bh's element offsets of q, k, v
 * and o; the gradients and dO share them) and the row strides RQ, RK, RV, RO of those buffers
 */
export function headOffsets(gm: AttnGeom): string {
  const L = gm.L;
  // the packed layout's offsets in 32 bits where its buffers allow (fewer registers held across the loops:
  // the fp32 kernels at D = 16 spill otherwise); the separate layout's as they always were
  const t = indexType(gm);
  const off = (r: HeadRows) => (r.base === 0 ? '' : `${r.base} + `) +
    (r.sn === L.H * r.sh ? `(${t})bh * ${r.sh}` : `(${t})(bh / ${L.H}) * ${r.sn} + (${t})(bh % ${L.H}) * ${r.sh}`);
  /** k and v as q's offset plus a constant where they share its strides (packed: + C, + 2C) */
  const rel = (r: HeadRows) => (r.sn === L.q.sn && r.sh === L.q.sh ? (r.base === L.q.base ? 'qoff' : `qoff + ${r.base - L.q.base}`) : off(r));
  return `  // head bh's rows: element offsets and row strides of q, k, v (and their gradients), o and dO\n` +
    `  const ${t} qoff = ${off(L.q)};\n  const ${t} koff = ${rel(L.k)};\n  const ${t} voff = ${rel(L.v)};\n  const ${t} ooff = ${off(L.o)};\n` +
    `  constexpr int RQ = ${L.q.st};\n  constexpr int RK = ${L.k.st};\n  constexpr int RV = ${L.v.st};\n  constexpr int RO = ${L.o.st};\n`;
}

/** a kernel body without the one-line constant declarations (`const size_t x = ...;`, `const int x`, `constexpr int x`) it never reads (nvcc -Werror) */
export function pruneDecls(body: string): string {
  const code = body.replace(/\/\/.*$/gm, '');  // uses in comments do not count
  const out = body.split('\n').filter((line) => {
    const m = /^\s*(?:const size_t|const int|constexpr int) (\w+) = [^,;]*;\s*(?:\/\/.*)?$/.exec(line);
    return !m || (code.match(new RegExp(`\\b${m[1]}\\b`, 'g')) ?? []).length > 1;
  }).join('\n');
  // a dropped declaration may have been the only reader of another (koff = qoff + C)
  return out === body ? out : pruneDecls(out);
}

/** `name[idx] = x` in the buffer's element type */
function store(d: Dialect, a: KernelArg, idx: string, x: string): string {
  return `${a.name}[${idx}] = ${isHalfElem(a.type) ? d.fromFloat(a.type, x) : x};`;
}

function text(d: Dialect, gm: Geom, args: KernelArg[]) {
  const type = (name: string) => args.find((a) => a.name === name)!.type;
  const buf = (name: string) => gm.buf[name];
  const ix = indexType(gm);
  const NC = gm.D / 16, shift = gm.S - gm.T;
  const ind = (s: string) => s.replace(/^(?=.)/gm, '  ');
  return {
    NC, ind,
    consts:
      `  constexpr int T = ${gm.T}, S = ${gm.S}, P = ${pitch(gm.D)};  // queries, keys, tile pitch\n` +
      `  constexpr int D = ${gm.D};  // head width\n` +
      `  constexpr float SC = ${lit(gm.scale * LOG2E)};  // scale * log2(e): scores in base 2\n` +
      `  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;\n` +
      `  const int bh = blockIdx.y;\n` + headOffsets(gm),
    /** rows [r0, r0 + 32) of [rows x D] slabs (logical buffer, head offset, row stride) into shared tiles, zeros past `rows` */
    load: (r0: string, rows: string, pairs: [string, string, string, string][]) =>
      `  for (int e = threadIdx.x; e < ${B * gm.D}; e += ${THREADS}) {\n` +
      `    const int r = e / D, c = e % D;\n    const bool in = ${r0} + r < ${rows};\n` +
      pairs.map(([dst, src, off, st]) => `    ${dst}[r * P + c] = in ? ${asFloat(d, type(buf(src)), `${buf(src)}[${off} + (${ix})(${r0} + r) * ${st} + c]`)} : 0.0f;\n`).join('') +
      `  }\n`,
    /** s[4][2] = rows 4ty.. of A times rows tx, tx + 16 of Bm (both [32][P] tiles), over D, 4 features per float4 read */
    scores: (s: string, A: string, Bm: string) =>
      `  float ${s}[4][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};\n` +
      `  #pragma unroll 4\n  for (int c = 0; c < D; c += 4) {\n` +
      `    const float4 b0 = *reinterpret_cast<const float4*>(${Bm} + tx * P + c), b1 = *reinterpret_cast<const float4*>(${Bm} + (tx + 16) * P + c);\n` +
      `    #pragma unroll\n    for (int i = 0; i < 4; ++i) {\n      const float4 a = *reinterpret_cast<const float4*>(${A} + (ty * 4 + i) * P + c);\n` +
      `      ${s}[i][0] = fmaf(a.w, b0.w, fmaf(a.z, b0.z, fmaf(a.y, b0.y, fmaf(a.x, b0.x, ${s}[i][0]))));\n` +
      `      ${s}[i][1] = fmaf(a.w, b1.w, fmaf(a.z, b1.z, fmaf(a.y, b1.y, fmaf(a.x, b1.x, ${s}[i][1]))));\n    }\n  }\n`,
    /** acc[4][NC] += rows 4ty.. of the [32][SP] score tile X (float4 reads, 4 keys each) times the [32][P] tile Y (columns tx + 16 jd) */
    times: (acc: string, X: string, Y: string) =>
      `  #pragma unroll 1\n  for (int kk = 0; kk < ${B}; kk += 4) {\n` +
      `    float4 x[4];\n    #pragma unroll\n    for (int i = 0; i < 4; ++i) x[i] = *reinterpret_cast<const float4*>(${X} + (ty * 4 + i) * ${SP} + kk);\n` +
      ['x', 'y', 'z', 'w'].map((f, u) =>
        `    {\n      float y[${NC}];\n      #pragma unroll\n      for (int j = 0; j < ${NC}; ++j) y[j] = ${Y}[(kk + ${u}) * P + tx + 16 * j];\n` +
        `      #pragma unroll\n      for (int i = 0; i < 4; ++i)\n        #pragma unroll\n        for (int j = 0; j < ${NC}; ++j) ${acc}[i][j] = fmaf(x[i].${f}, y[j], ${acc}[i][j]);\n    }\n`).join('') +
      `  }\n`,
    zero: (acc: string) => `  float ${acc}[4][${NC}];\n  #pragma unroll\n  for (int i = 0; i < 4; ++i)\n    #pragma unroll\n    for (int j = 0; j < ${NC}; ++j) ${acc}[i][j] = 0.0f;\n`,
    visible: visibleTest(gm),
    kend: gm.causal ? `min(S, q0 + ${B + shift})` : 'S',
    shift,
    /** rows 4ty + i (below `rows`) of acc into buffer `out` at head offset `off`, row stride `st` (columns tx + 16 j) */
    storeRows: (out: KernelArg, acc: string, r0: string, rows: string, off: string, st: string, mul = (_i: string) => '') =>
      `  #pragma unroll\n  for (int i = 0; i < 4; ++i) {\n    const int r = ${r0} + ty * 4 + i;\n    if (r < ${rows}) {\n` +
      `      #pragma unroll\n      for (int j = 0; j < ${NC}; ++j) ${store(d, out, `${off} + (${ix})r * ${st} + tx + 16 * j`, `${acc}[i][j]${mul('i')}`)}\n    }\n  }\n`,
  };
}

/** butterfly over the 16 lanes of a half-warp (one score row): `op` max or sum */
const half16 = (v: string, op: 'max' | 'sum') =>
  [8, 4, 2, 1].map((o) => op === 'max' ? `${v} = fmaxf(${v}, __shfl_xor_sync(0xffffffffu, ${v}, ${o}));` : `${v} += __shfl_xor_sync(0xffffffffu, ${v}, ${o});`).join(' ');

function forwardBody(d: Dialect, gm: Geom, args: KernelArg[], o: KernelArg): string {
  const x = text(d, gm, args);
  const edge = `k0 + ${B} > S` + (gm.causal ? ` || k0 + ${B - 1} > q0 + ${x.shift}` : '');
  return (
    `  // flash attention forward in fp32: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''}; 32 queries per block, 32-key tiles\n` +
    x.consts +
    `  __shared__ __align__(16) float Qs[${B * pitch(gm.D)}], Ks[${B * pitch(gm.D)}], Vs[${B * pitch(gm.D)}], Ps[${B * SP}];\n` +
    `  // the last query tiles see the most keys: they start first\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${B};\n` +
    x.load('q0', 'T', [['Qs', 'q', 'qoff', 'RQ']]) +
    x.zero('acc') +
    `  float m[4], l[4];  // running max (base 2) and this thread's partial sum per row\n` +
    `  #pragma unroll\n  for (int i = 0; i < 4; ++i) { m[i] = -INFINITY; l[i] = 0.0f; }\n` +
    `  const int kend = ${x.kend};\n` +
    `  for (int k0 = 0; k0 < kend; k0 += ${B}) {\n` +
    `    __syncthreads();  // the previous tiles are consumed\n` +
    x.ind(x.load('k0', 'S', [['Ks', 'k', 'koff', 'RK'], ['Vs', 'v', 'voff', 'RV']])) +
    `    __syncthreads();\n` +
    x.ind(x.scores('s', 'Qs', 'Ks')) +
    `    const bool edge = ${edge};\n` +
    `    #pragma unroll\n    for (int i = 0; i < 4; ++i) {\n` +
    `      const int qr = q0 + ty * 4 + i;\n      (void)qr;\n` +
    `      #pragma unroll\n      for (int j = 0; j < 2; ++j) {\n` +
    `        const int kc = k0 + tx + 16 * j;\n        (void)kc;\n` +
    `        s[i][j] = edge && !(${x.visible('qr', 'kc', { k: true })}) ? -INFINITY : s[i][j] * SC;\n      }\n` +
    `      float mx = fmaxf(s[i][0], s[i][1]);\n      ${half16('mx', 'max')}\n` +
    `      const float mn = fmaxf(m[i], mx), b = mn == -INFINITY ? 0.0f : mn, al = exp2f(m[i] - b);\n` +
    `      m[i] = mn;\n` +
    `      const float p0 = exp2f(s[i][0] - b), p1 = exp2f(s[i][1] - b);\n` +
    `      l[i] = l[i] * al + p0 + p1;\n` +
    `      #pragma unroll\n      for (int j = 0; j < ${x.NC}; ++j) acc[i][j] *= al;\n` +
    `      Ps[(ty * 4 + i) * ${SP} + tx] = p0;\n      Ps[(ty * 4 + i) * ${SP} + tx + 16] = p1;\n    }\n` +
    `    __syncthreads();\n` +
    `    // O += P V\n` +
    x.ind(x.times('acc', 'Ps', 'Vs')) +
    `  }\n` +
    `  #pragma unroll\n  for (int i = 0; i < 4; ++i) { ${half16('l[i]', 'sum')} }\n` +
    x.storeRows(o, 'acc', 'q0', 'T', 'ooff', 'RO', (i) => ` / l[${i}]`) +
    `  if (tx == 0) {\n    #pragma unroll\n    for (int i = 0; i < 4; ++i) {\n      const int r = q0 + ty * 4 + i;\n` +
    `      if (r < T) lse[(size_t)bh * T + r] = m[i] * ${lit(Math.LN2)} + logf(l[i]);\n    }\n  }\n`
  );
}

function gradKVBody(d: Dialect, gm: Geom, args: KernelArg[], dk: KernelArg, dv: KernelArg): string {
  const x = text(d, gm, args);
  const edge = `q0 + ${B} > T` + (gm.causal ? ` || k0 + ${B - 1} > q0 + ${x.shift}` : '');
  const qbeg = gm.causal ? `max(0, k0 - ${x.shift}) / ${B} * ${B}` : '0';
  const P = pitch(gm.D);
  return (
    `  // flash attention backward in fp32, dK and dV: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // block (32-key tile, head), the query tiles streamed; transposed scores S^T = K Q^T, dP^T = V dO^T\n` +
    x.consts +
    `  __shared__ __align__(16) float Ks[${B * P}], Vs[${B * P}], Qs[${B * P}], Os[${B * P}], PT[${B * SP}], dST[${B * SP}];\n  __shared__ float Ls[${B}], Ds[${B}];\n` +
    `  const int k0 = blockIdx.x * ${B};\n` +
    x.load('k0', 'S', [['Ks', 'k', 'koff', 'RK'], ['Vs', 'v', 'voff', 'RV']]) +
    x.zero('dka') + x.zero('dva') +
    `  for (int q0 = ${qbeg}; q0 < T; q0 += ${B}) {\n` +
    `    __syncthreads();  // the previous tiles are consumed (and the K / V tiles loaded)\n` +
    x.ind(x.load('q0', 'T', [['Qs', 'q', 'qoff', 'RQ'], ['Os', 'dout', 'ooff', 'RO']])) +
    `    if (threadIdx.x < ${B}) {\n      const int qi = q0 + threadIdx.x;\n` +
    `      Ls[threadIdx.x] = qi < T ? lse[(size_t)bh * T + qi] * ${lit(LOG2E)} : 0.0f;\n` +
    `      Ds[threadIdx.x] = qi < T ? mpsc_scratch[(size_t)bh * T + qi] : 0.0f;\n    }\n` +
    `    __syncthreads();\n` +
    x.ind(x.scores('st', 'Ks', 'Qs')) + x.ind(x.scores('dpt', 'Vs', 'Os')) +
    `    const bool edge = ${edge};\n` +
    `    #pragma unroll\n    for (int i = 0; i < 4; ++i) {\n      const int kr = k0 + ty * 4 + i;\n      (void)kr;\n` +
    `      #pragma unroll\n      for (int j = 0; j < 2; ++j) {\n        const int qc = tx + 16 * j, qr = q0 + qc;\n        (void)qr;\n` +
    `        const float p = edge && !(${x.visible('qr', 'kr', { q: true })}) ? 0.0f : exp2f(st[i][j] * SC - Ls[qc]);\n` +
    `        PT[(ty * 4 + i) * ${SP} + qc] = p;\n` +
    `        dST[(ty * 4 + i) * ${SP} + qc] = p * (dpt[i][j] - Ds[qc]) * ${lit(gm.scale)};\n      }\n    }\n` +
    `    __syncthreads();\n` +
    `    // dV += P^T dO, dK += dS^T Q (the scale folded into dS)\n` +
    x.ind(x.times('dva', 'PT', 'Os')) + x.ind(x.times('dka', 'dST', 'Qs')) +
    `  }\n` +
    x.storeRows(dk, 'dka', 'k0', 'S', 'koff', 'RK') + x.storeRows(dv, 'dva', 'k0', 'S', 'voff', 'RV')
  );
}

function gradQBody(d: Dialect, gm: Geom, args: KernelArg[], dq: KernelArg): string {
  const x = text(d, gm, args);
  const edge = `k0 + ${B} > S` + (gm.causal ? ` || k0 + ${B - 1} > q0 + ${x.shift}` : '');
  const P = pitch(gm.D);
  return (
    `  // flash attention backward in fp32, dQ: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // block (32-query tile, head), the key tiles streamed: S = Q K^T, dP = dO V^T, dQ += dS K\n` +
    x.consts +
    `  __shared__ __align__(16) float Qs[${B * P}], Os[${B * P}], Ks[${B * P}], Vs[${B * P}], dSs[${B * SP}];\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${B};\n` +
    x.load('q0', 'T', [['Qs', 'q', 'qoff', 'RQ'], ['Os', 'dout', 'ooff', 'RO']]) +
    `  float L[4], Dl[4];  // lse (base 2) and Delta of the thread's rows\n` +
    `  #pragma unroll\n  for (int i = 0; i < 4; ++i) {\n    const int r = q0 + ty * 4 + i;\n` +
    `    L[i] = r < T ? lse[(size_t)bh * T + r] * ${lit(LOG2E)} : 0.0f;\n    Dl[i] = r < T ? mpsc_scratch[(size_t)bh * T + r] : 0.0f;\n  }\n` +
    x.zero('dqa') +
    `  const int kend = ${x.kend};\n` +
    `  for (int k0 = 0; k0 < kend; k0 += ${B}) {\n` +
    `    __syncthreads();  // the previous tiles are consumed (and the Q / dO tiles loaded)\n` +
    x.ind(x.load('k0', 'S', [['Ks', 'k', 'koff', 'RK'], ['Vs', 'v', 'voff', 'RV']])) +
    `    __syncthreads();\n` +
    x.ind(x.scores('s', 'Qs', 'Ks')) + x.ind(x.scores('dp', 'Os', 'Vs')) +
    `    const bool edge = ${edge};\n` +
    `    #pragma unroll\n    for (int i = 0; i < 4; ++i) {\n      const int qr = q0 + ty * 4 + i;\n      (void)qr;\n` +
    `      #pragma unroll\n      for (int j = 0; j < 2; ++j) {\n        const int kc = k0 + tx + 16 * j;\n        (void)kc;\n` +
    `        const float p = edge && !(${x.visible('qr', 'kc', { k: true })}) ? 0.0f : exp2f(s[i][j] * SC - L[i]);\n` +
    `        dSs[(ty * 4 + i) * ${SP} + tx + 16 * j] = p * (dp[i][j] - Dl[i]) * ${lit(gm.scale)};\n      }\n    }\n` +
    `    __syncthreads();\n` +
    `    // dQ += dS K (the scale folded into dS)\n` +
    x.ind(x.times('dqa', 'dSs', 'Ks')) +
    `  }\n` +
    x.storeRows(dq, 'dqa', 'q0', 'T', 'qoff', 'RQ')
  );
}

/** why a node keeps the shared kernel instead of these (null: these take it) */
export function f32Refusal(g: Graph, n: Node): string | null {
  const D = attnGeom(g, n).D;
  if (!F32_HEAD_DIMS.includes(D)) return `head width ${D} (the fp32 flash kernels take ${F32_HEAD_DIMS.join(', ')})`;
  const lse = lseValue(n);
  if (g.values[lse].dtype !== 'f32') return `lse stored as ${g.values[lse].dtype} (the kernels keep it fp32)`;
  return null;
}

/**
 * Delta's 8-lane row sum, the one order every Delta takes (this file's kernel, attention_tf32x3.ts deltaRows): lane
 * `part` adds `term` (of feature c) over c = part, part + 8, ... into `acc`, then deltaButterfly adds the 8 lanes
 */
export const deltaTerms = (D: number, term: string, indent: string) => `${indent}for (int c = part; c < ${D}; c += 8) acc += ${term};\n`;
export const deltaButterfly = (indent: string) => [4, 2, 1].map((m) => `${indent}acc += __shfl_xor_sync(0xffffffffu, acc, ${m});\n`).join('');

/**
 * Delta = rowsum(dO * O) of the H * T query rows into the scratch region: the first backward kernel of
 * both flash paths. 8 lanes per row (lane p takes features p, p + 8, ...: each load instruction reads 4
 * rows' contiguous runs), summed over the 8 lanes by a butterfly in a fixed order.
 */
function deltaKernel(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], gm: Geom, scratch: number): KernelSpec {
  const [dout, o] = args;
  const rows = gm.H * gm.T;
  return {
    name: ctx.next(), node: n.id, op: n.op, label: `${label(g, n)} [flash attention: Delta = rowsum(dO * O), 8 lanes per row]`, args,
    groups: [Math.max(1, ceilDiv(rows * 8, 256)), 1, 1], tgsize: [256, 1, 1], tgmem: 0, sync: true, scratch,
    body: pruneDecls(
      `  // Delta[i] = sum_d dO[i, d] O[i, d] for the ${rows} query rows into the scratch region; lanes 8i..8i+7 of the grid take row i\n` +
      `  const int row = (blockIdx.x * 256 + threadIdx.x) >> 3, part = threadIdx.x & 7;\n` +
      `  const int bh = min(row, ${rows - 1}) / ${gm.T}, qi = min(row, ${rows - 1}) % ${gm.T};  // (head, query) of the row\n` +
      headOffsets(gm) +
      `  const size_t base = ooff + (size_t)qi * RO;\n  float acc = 0.0f;\n` +
      deltaTerms(gm.D, `${asFloat(ctx.d, dout.type, 'dout[base + c]')} * ${asFloat(ctx.d, o.type, 'o[base + c]')}`, '  ') +
      `  // (whole warps reach the butterfly: rows past the end read the last row and do not store)\n` +
      deltaButterfly('  ') +
      `  if (part == 0 && row < ${rows}) mpsc_scratch[row] = acc;\n`),
  };
}

/** the three kernel bodies of one flash path, each from its kernel's arguments (in the order flashKernels binds them) */
export interface FlashBodies {
  /** label text, e.g. "fp32 on the CUDA cores, 32 rows per block" */
  what: string;
  /** rows per block (queries in the forward and dQ kernels, keys in the dK/dV kernel) */
  rows: number;
  /** args: [q, k, v | qkv, o, lse]; o the output */
  forward(args: KernelArg[], o: KernelArg): string;
  /** args: [dout, q, k, v | qkv, lse, dk, dv | dqkv]; dk, dv the outputs (one argument when packed) */
  gradKV(args: KernelArg[], dk: KernelArg, dv: KernelArg): string;
  /** args: [dout, q, k, v | qkv, lse, dq | dqkv]; dq the output */
  gradQ(args: KernelArg[], dq: KernelArg): string;
  /** bytes of dynamic shared memory (the dialect's `tg`, past 48 KiB) per kernel; absent: 0 (static tiles) */
  tgmem?: { forward?: number; gradKV?: number; gradQ?: number };
  /** bytes of the scratch region the dK/dV and dQ kernels take (at least Delta's H x T floats, which come first); absent: Delta's */
  gradScratch?: number;
  /**
   * the dK/dV and dQ bodies compute Delta themselves from dO and O (o then among their arguments, after q / k / v
   * or qkv): no Delta kernel, and no scratch unless gradScratch asks for it
   */
  foldDelta?: boolean;
  /**
   * the dQ kernel computes Delta for its own query rows (o then among its arguments, after q / k / v or qkv), keeps
   * it and stores it into the scratch region, and runs first: the dK/dV kernel after it reads Delta there as it
   * would the Delta kernel's (no Delta kernel; the kernels come as [dQ, dK/dV])
   */
  deltaInQ?: boolean;
}

/**
 * The kernels of an attention / attention_qkv node (one) or an attention_grad / attention_qkv_grad node
 * (Delta into the scratch region, dK/dV, dQ; all three bind the H * T floats of scratch; with deltaInQ: dQ, which
 * computes Delta itself, then dK/dV; with foldDelta: dK/dV and dQ, each computing it) for one flash
 * path: 128 threads per block, blocks over (row tiles, heads). Packed nodes bind the one qkv (dqkv)
 * buffer once; the bodies address it through AttnGeom.buf and the head offsets.
 */
export function flashKernels(ctx: LowerCtx, g: Graph, n: Node, p: FlashBodies): KernelSpec[] {
  const gm = attnGeom(g, n);
  const a = (v: number, name: string, acc: 'r' | 'w' = 'r') => argOf(g, name, v, acc);
  const ins = n.inputs, outs = n.outputs;
  const spec = (args: KernelArg[], rows: number, body: string, part: string, scratch?: number, tgmem = 0): KernelSpec => ({
    name: ctx.next(), node: n.id, op: n.op, label: `${label(g, n)} [flash attention, ${p.what}${part}]`, args,
    groups: [Math.max(1, ceilDiv(rows, p.rows)), gm.H, 1], tgsize: [THREADS, 1, 1], tgmem, sync: true, body: pruneDecls(body),
    ...(scratch ? { scratch } : {}),
  });
  if (isForward(n)) {
    const o = a(outs[0], 'o', 'w');
    const args = gm.L.packed ? [a(ins[0], 'qkv'), o, a(outs[1], 'lse', 'w')] : [a(ins[0], 'q'), a(ins[1], 'k'), a(ins[2], 'v'), o, a(outs[1], 'lse', 'w')];
    return [spec(args, gm.T, p.forward(args, o), '', undefined, p.tgmem?.forward)];
  }
  // inputs (do, q, k, v, o, lse) -> dq, dk, dv; packed (do, qkv, o, lse) -> dqkv
  const scratch = gm.H * gm.T * 4, gradScratch = Math.max(scratch, p.gradScratch ?? 0);
  const dout = a(ins[0], 'dout');
  const [qkv, o, lse] = gm.L.packed ? [[a(ins[1], 'qkv')], a(ins[2], 'o'), a(ins[3], 'lse')] : [[a(ins[1], 'q'), a(ins[2], 'k'), a(ins[3], 'v')], a(ins[4], 'o'), a(ins[5], 'lse')];
  const [dq, dk, dv] = gm.L.packed ? [0, 0, 0].map(() => a(outs[0], 'dqkv', 'w')) : [a(outs[0], 'dq', 'w'), a(outs[1], 'dk', 'w'), a(outs[2], 'dv', 'w')];
  const fold = p.foldDelta === true, inQ = !fold && p.deltaInQ === true, withO = fold ? [o] : [];
  const kv = [dout, ...qkv, ...withO, lse, ...(gm.L.packed ? [dk] : [dk, dv])];
  const q = [dout, ...qkv, ...(fold || inQ ? [o] : []), lse, dq];
  const bwdScratch = fold ? p.gradScratch : gradScratch;
  const kvSpec = () => spec(kv, gm.S, p.gradKV(kv, dk, dv), ': dK, dV', bwdScratch, p.tgmem?.gradKV);
  const qSpec = () => spec(q, gm.T, p.gradQ(q, dq), inQ ? ': dQ and Delta' : ': dQ', bwdScratch, p.tgmem?.gradQ);
  if (inQ) return [qSpec(), kvSpec()];
  return [...(fold ? [] : [deltaKernel(ctx, g, n, [dout, o], gm, scratch)]), kvSpec(), qSpec()];
}

/** The fp32 flash kernels of an attention / attention_grad node (f32Refusal null). */
export function lowerAttentionF32(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const gm = attnGeom(g, n), d = ctx.d;
  return flashKernels(ctx, g, n, {
    what: 'fp32 on the CUDA cores, 32 rows per block', rows: B,
    forward: (args, o) => forwardBody(d, gm, args, o), gradKV: (args, dk, dv) => gradKVBody(d, gm, args, dk, dv), gradQ: (args, dq) => gradQBody(d, gm, args, dq),
  });
}
