/**
 * attention: the fused scaled-dot-product attention kernels (FlashAttention-2 style), written
 * once against the Dialect. Consumes `attention` / `attention_grad` nodes (q, k, v [N,H,T,D] / [N,H,S,D]) and their packed
 * forms `attention_qkv` / `attention_qkv_grad` (q, k, v read in place from one [N,T,3C] projection,
 * o / do [N,T,C], dq, dk, dv written into one [N,T,3C] gradient): the same kernels, each operand
 * addressed by op_rules' attnLayout (a head's base offset and row stride); produces KernelSpecs,
 * each with a plain variant (scalar products in threadgroup memory) and an 8x8 matrix-unit
 * variant (`mma`) on the same grid and tiles.
 *
 * Forward (one kernel): a threadgroup of 128 threads owns a tile of B queries of one head and
 * streams the keys and values through threadgroup memory in tiles of B, with the online-softmax
 * recurrence (running max m, running sum l, the output rescaled by exp(m_old - m_new)), so the
 * T x S scores never exist in device memory. It writes o and lse = m + log(l) per query.
 * Backward (two kernels, no atomics, deterministic): P is recomputed from q, k and lse, and
 * Delta_i = sum_d do_i o_i is recomputed per query tile. Kernel 1 owns a key tile and loops over
 * the query tiles, accumulating dK = scale * dS^T Q and dV = P^T dO; kernel 2 owns a query tile
 * and loops over the key tiles, accumulating dQ = scale * dS K, dS = P * (dO V^T - Delta).
 * Causal masking (key j visible to query i iff j <= i + S - T) skips the tiles that are fully
 * masked; out-of-range rows and columns of a tile are zero-padded (scores -inf).
 *
 * The matrix-unit variants keep the dK, dV and dQ accumulators in 8x8 matrix-unit registers
 * across the loop (each SIMD-group owns a fixed set of 8x8 blocks); the forward output is
 * rescaled every key tile, so it lives in threadgroup memory and the P V product of a tile goes
 * through a staging area. Relies on: SIMD-groups of 32 threads, 4 per threadgroup; the tile
 * size B (16, or 8 for wide heads) chosen so every kernel of an op fits 32 KiB of threadgroup
 * memory for both variants.
 * 16-bit q, k, v, o and dO (a 16-bit train precision) are widened to float as they are loaded
 * into the tiles (exactly); lse is float; o, dq, dk, dv are stored in their buffers' types (a
 * 16-bit one, autocast's storage, rounded once at the store).
 */
import type { Graph, Node } from '../ir/graph.js';
import { UserError } from '../errors.js';
import { asFloat, isHalfElem, type Dialect, type ElemType } from './dialect.js';
import { MAX_SHARED_BYTES, type KernelArg, type KernelSpec, type LowerCtx } from './kernel_types.js';
import { argOf, ceilDiv, label, shapeOf } from './common.js';
import { attnLayout, type AttnLayout, type HeadRows } from '../ir/op_rules/attention.js';

/** threads per threadgroup (4 SIMD-groups) */
const TGT = 128;
const NSG = TGT / 32;

/** geometry of one attention op: H independent heads (N x heads) of T queries and S keys of width D */
interface Geom {
  H: number; T: number; S: number; D: number;
  /** where each operand's head rows lie (attnLayout) */
  L: AttnLayout;
  /** the kernel argument each logical buffer (q, k, v, o, dout, dq, dk, dv) is read / written through */
  buf: Record<string, string>;
  /** D rounded up to the 8x8 block */
  Dp: number;
  /** queries per query tile = keys per key tile */
  B: number;
  causal: boolean;
  scale: number;
  /** element type of each buffer argument by name (16-bit q, k, v, o, do are widened on load) */
  elem: Record<string, ElemType>;
}

/** threadgroup floats each kernel needs: [plain, mma] */
function tgFloats(B: number, Dp: number): { fwd: [number, number]; dkv: [number, number]; dq: [number, number] } {
  const bd = B * Dp, bb = B * B;
  return {
    // Qs Kt Vs Os (+ PVs) | Ss | Ms Ls As
    fwd: [4 * bd + bb + 3 * B, 5 * bd + bb + 3 * B],
    // Kt Vt Qs dOs (+ dKs dVs) | Ss dPs PT dST | Lq Dq
    dkv: [6 * bd + 4 * bb + 2 * B, 4 * bd + 4 * bb + 2 * B],
    // Qs dOs Kt Vt Ks (+ dQs) | Ss dPs dSs | Lq Dq
    dq: [6 * bd + 3 * bb + 2 * B, 5 * bd + 3 * bb + 2 * B],
  };
}

/** the largest tile (16 or 8) whose kernels all fit the threadgroup memory limit, or null */
export function attentionTile(D: number): number | null {
  const Dp = ceilDiv(D, 8) * 8;
  for (const B of [16, 8]) {
    const t = tgFloats(B, Dp);
    if ([...t.fwd, ...t.dkv, ...t.dq].every((x) => 4 * x <= MAX_SHARED_BYTES)) return B;
  }
  return null;
}

function geomOf(g: Graph, n: Node): Geom {
  const L = attnLayout(n.op, n.inputs.map((v) => shapeOf(g, v)), n.attrs);
  const { T, S, D } = L, H = L.N * L.H;
  const B = attentionTile(D);
  if (B === null) {
    const at = `${n.loc ? `${n.loc.file}:${n.loc.line}:${n.loc.col}: ` : ''}node ${n.id} (${n.op}${n.path ? ` in layer '${n.path}'` : ''})`;
    throw new UserError(`error: ${at}: the fused Metal attention supports heads of at most ${maxHeadDim()} features per head; this one has ${D}.\n  fix: use more heads (C / heads <= ${maxHeadDim()}), or build with --target cpu`);
  }
  const buf: Record<string, string> = L.packed
    ? { q: 'qkv', k: 'qkv', v: 'qkv', o: 'o', dout: 'dout', dq: 'dqkv', dk: 'dqkv', dv: 'dqkv' }
    : { q: 'q', k: 'k', v: 'v', o: 'o', dout: 'dout', dq: 'dq', dk: 'dk', dv: 'dv' };
  return { H, T, S, D, L, buf, Dp: ceilDiv(D, 8) * 8, B, causal: L.causal, scale: L.scale, elem: {} };
}

/** the widest head the tiles support (for the error message and docs/metal.md) */
export function maxHeadDim(): number {
  let D = 8;
  while (attentionTile(D + 8) !== null) D += 8;
  return D;
}

/** Named regions of the threadgroup memory `tg`, declared as pointers in order. */
function tgRegions(d: Dialect, regions: [string, number][]): { decl: string; floats: number } {
  let off = 0, decl = '';
  for (const [name, size] of regions) {
    decl += `  ${d.space.shared}float* ${name} = tg + ${off};  // ${size} floats\n`;
    off += size;
  }
  return { decl, floats: off };
}

/** the head rows of logical buffer `name` */
function rows(gm: Geom, name: string): HeadRows {
  const r = ({ q: gm.L.q, dq: gm.L.q, k: gm.L.k, dk: gm.L.k, v: gm.L.v, dv: gm.L.v, o: gm.L.o, dout: gm.L.o } as Record<string, HeadRows>)[name];
  if (!r) throw new Error(`internal: attention buffer ${name}`);
  return r;
}

/** `const uint qb = ..., kb = ..., vb = ..., ob = ...;`: the element offsets of head bh's rows of q, k, v, o (and their gradients / dout) */
function headBases(d: Dialect, gm: Geom): string {
  const H = gm.L.H;
  const off = (r: HeadRows) => (r.base === 0 ? '' : `${d.u(r.base)} + `) +
    (r.sn === H * r.sh ? `bh * ${d.u(r.sh)}` : `(bh / ${d.u(H)}) * ${d.u(r.sn)} + (bh % ${d.u(H)}) * ${d.u(r.sh)}`);
  return `  const uint qb = ${off(gm.L.q)}, kb = ${off(gm.L.k)}, vb = ${off(gm.L.v)}, ob = ${off(gm.L.o)};
`;
}

/** text helpers of one geometry in one dialect */
function txt(d: Dialect, gm: Geom) {
  const u = (x: number) => d.u(x);
  return {
    u, f: (x: number) => d.f(x),
    B: u(gm.B), Dp: u(gm.Dp), D: u(gm.D), T: u(gm.T), S: u(gm.S), TGT: u(TGT),
    /** element `idx` of logical buffer `name` as float (16-bit operands widened exactly) */
    rd: (name: string, idx: string) => asFloat(d, gm.elem[gm.buf[name]] ?? 'float', `${gm.buf[name]}[${idx}]`),
    /** the statement storing float v as element `idx` of logical output buffer `name` (a 16-bit one rounded once) */
    wr: (name: string, idx: string, v: string) => {
      const a = gm.buf[name], e = gm.elem[a] ?? 'float';
      return `${a}[${idx}] = ${isHalfElem(e) ? d.fromFloat(e, v) : v};`;
    },
    /** the row stride of logical buffer `name` (q, k, v and their gradients; o and dout) */
    st: (name: string) => u(rows(gm, name).st),
    /** the key index kj is visible from query qi (both uint expressions; range checks included) */
    visible: (qi: string, kj: string) =>
      `${qi} < ${u(gm.T)} && ${kj} < ${u(gm.S)}` + (gm.causal ? ` && ${kj} <= ${qi} + ${u(gm.S - gm.T)}` : ''),
  };
}

/**
 * C[rows x cols] (row-major, ld `ldC`) = A[rows x K] * B[K x cols] for tiles in threadgroup
 * memory (A row-major with ld `ldA`, B row-major with ld `ldB`): plain, one element per
 * iteration of a strided loop over the threadgroup; `acc` says how C is updated.
 */
function plainProduct(d: Dialect, p: { C: string; A: string; Bm: string; rows: number; cols: number; K: number; ldA: number; ldB: number; ldC: number; init: (e: string, r: string) => string }): string {
  const u = (x: number) => d.u(x);
  return (
    `    for (uint e = tidx; e < ${u(p.rows * p.cols)}; e += ${u(TGT)}) {\n` +
    `      const uint r = e / ${u(p.cols)}, c = e % ${u(p.cols)};\n` +
    `      float acc = ${p.init(`${p.C}[r * ${u(p.ldC)} + c]`, 'r')};\n` +
    `      for (uint x = 0u; x < ${u(p.K)}; ++x) acc += ${p.A}[r * ${u(p.ldA)} + x] * ${p.Bm}[x * ${u(p.ldB)} + c];\n` +
    `      ${p.C}[r * ${u(p.ldC)} + c] = acc;\n` +
    `    }\n`
  );
}

/**
 * The same product on the matrix unit, into `C` (overwritten): SIMD-group sg computes the 8x8
 * blocks sg, sg + 4, ... of C (rows and cols multiples of 8; K a multiple of 8).
 */
function mmaProduct(d: Dialect, p: { C: string; A: string; Bm: string; rows: number; cols: number; K: number; ldA: number; ldB: number; ldC: number }): string {
  const u = (x: number) => d.u(x), mu = d.mma, cb = p.cols / 8;
  return (
    `    for (uint blk = sg; blk < ${u((p.rows / 8) * cb)}; blk += ${u(NSG)}) {\n` +
    `      const uint br = (blk / ${u(cb)}) * 8u, bc = (blk % ${u(cb)}) * 8u;\n` +
    `      ${mu.declAcc('acc')}\n` +
    `      for (uint x = 0u; x < ${u(p.K)}; x += 8u) {\n` +
    `        ${mu.declOperand('a')}\n        ${mu.declOperand('b')}\n` +
    `        ${mu.load('a', p.A, p.ldA, 'x', 'br')}\n` +
    `        ${mu.load('b', p.Bm, p.ldB, 'bc', 'x')}\n` +
    `        ${mu.mac('acc', 'a', 'b')}\n` +
    `      }\n` +
    `      ${mu.store('acc', p.C, p.ldC, 'bc', 'br')}\n` +
    `    }\n`
  );
}

/**
 * Accumulators held in matrix-unit registers across a loop: `count` 8x8 blocks of an
 * [rows x cols] result, block blk = sg + 4 * a owned by SIMD-group sg as `${name}${a}`.
 */
class HeldAcc {
  readonly per: number;
  readonly cb: number;
  constructor(private d: Dialect, readonly name: string, rows: number, readonly cols: number) {
    this.cb = cols / 8;
    this.per = ceilDiv((rows / 8) * this.cb, NSG);
    this.count = (rows / 8) * this.cb;
  }
  readonly count: number;
  decl(): string {
    return Array.from({ length: this.per }, (_, a) => `  ${this.d.mma.declAcc(`${this.name}${a}`)}\n`).join('');
  }
  /** for each owned block: `body(acc, br, bc)` inside a guard (uniform per SIMD-group) */
  each(indent: string, body: (acc: string) => string): string {
    const u = (x: number) => this.d.u(x);
    let s = '';
    for (let a = 0; a < this.per; a++) {
      s += `${indent}if (sg + ${u(NSG * a)} < ${u(this.count)}) {\n` +
        `${indent}  const uint br = ((sg + ${u(NSG * a)}) / ${u(this.cb)}) * 8u, bc = ((sg + ${u(NSG * a)}) % ${u(this.cb)}) * 8u;\n` +
        body(`${this.name}${a}`).replace(/^/gm, `${indent}  `) + '\n' +
        `${indent}}\n`;
    }
    return s;
  }
  /** acc += A[rows x K] * B[K x cols] (threadgroup tiles) */
  mac(indent: string, p: { A: string; Bm: string; K: number; ldA: number; ldB: number }): string {
    const mu = this.d.mma;
    return this.each(indent, (acc) =>
      `for (uint x = 0u; x < ${this.d.u(p.K)}; x += 8u) {\n` +
      `  ${mu.declOperand('a')}\n  ${mu.declOperand('b')}\n` +
      `  ${mu.load('a', p.A, p.ldA, 'x', 'br')}\n` +
      `  ${mu.load('b', p.Bm, p.ldB, 'bc', 'x')}\n` +
      `  ${mu.mac(acc, 'a', 'b')}\n` +
      `}`);
  }
  store(indent: string, dst: string): string {
    return this.each(indent, (acc) => this.d.mma.store(acc, dst, this.cols, 'bc', 'br'));
  }
}

/**
 * Loads rows [r0, r0 + B) of a [rows x D] slab at device offset `base` into a threadgroup tile,
 * zero-padded: row-major [B][Dp] (`dst`), or transposed [Dp][B] (`dstT`).
 */
function loadRows(t: ReturnType<typeof txt>, gm: Geom, p: { src: string; base: string; r0: string; rows: string; dst?: string; dstT?: string }[]): string {
  const { u, f } = t;
  let s = `    for (uint e = tidx; e < ${u(gm.B * gm.Dp)}; e += ${t.TGT}) {\n` +
    `      const uint r = e / ${t.Dp}, c = e % ${t.Dp};\n`;
  for (const x of p) {
    const val = `${x.r0} + r < ${x.rows} && c < ${t.D} ? ${t.rd(x.src, `${x.base} + (${x.r0} + r) * ${t.st(x.src)} + c`)} : ${f(0)}`;
    if (x.dst) s += `      ${x.dst}[e] = ${val};\n`;
    if (x.dstT) s += `      ${x.dstT}[c * ${t.B} + r] = ${val};\n`;
  }
  return s + `    }\n`;
}

/** lse and Delta = sum_d do*o for the B query rows from q0 (threads tidx < B; 0 outside) */
function rowStats(t: ReturnType<typeof txt>, d: Dialect): string {
  return (
    `    if (tidx < ${t.B}) {\n` +
    `      const uint qi = q0 + tidx;\n` +
    `      float dl = ${t.f(0)};\n` +
    `      if (qi < ${t.T}) for (uint c = 0u; c < ${t.D}; ++c) dl += ${t.rd('dout', `ob + qi * ${t.st('o')} + c`)} * ${t.rd('o', `ob + qi * ${t.st('o')} + c`)};\n` +
    `      Dq[tidx] = dl;\n` +
    `      Lq[tidx] = qi < ${t.T} ? lse[bh * ${t.T} + qi] : ${t.f(0)};\n` +
    `    }\n`
  );
}

function forwardBody(d: Dialect, gm: Geom, mma: boolean): { body: string; floats: number } {
  const t = txt(d, gm), { u, f } = t, B = gm.B, Dp = gm.Dp;
  const mem = tgRegions(d, [['Qs', B * Dp], ['Kt', Dp * B], ['Vs', B * Dp], ['Os', B * Dp], ...(mma ? [['PVs', B * Dp]] as [string, number][] : []), ['Ss', B * B], ['Ms', B], ['Ls', B], ['As', B]]);
  const kend = gm.causal ? d.imin(`q0 + ${u(B + gm.S - gm.T)}`, t.S) : t.S;
  const sProd = { C: 'Ss', A: 'Qs', Bm: 'Kt', rows: B, cols: B, K: mma ? Dp : gm.D, ldA: Dp, ldB: B, ldC: B };
  const oUpdate = mma
    ? mmaProduct(d, { C: 'PVs', A: 'Ss', Bm: 'Vs', rows: B, cols: Dp, K: B, ldA: B, ldB: Dp, ldC: Dp }) +
      `    ${d.barrier()}\n` +
      `    for (uint e = tidx; e < ${u(B * Dp)}; e += ${t.TGT}) Os[e] = Os[e] * As[e / ${t.Dp}] + PVs[e];\n`
    : plainProduct(d, { C: 'Os', A: 'Ss', Bm: 'Vs', rows: B, cols: Dp, K: B, ldA: B, ldB: Dp, ldC: Dp, init: (e, r) => `${e} * As[${r}]` });
  const body =
    `  // attention forward: ${gm.H} heads, T = ${gm.T} queries, S = ${gm.S} keys, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // B = ${B} queries per threadgroup, keys streamed in tiles of ${B}, online softmax\n` +
    `  const uint bh = tgid.y, q0 = tgid.x * ${t.B};\n` +
    headBases(d, gm) +
    mem.decl +
    loadRows(t, gm, [{ src: 'q', base: 'qb', r0: 'q0', rows: t.T, dst: 'Qs' }]).replace(/^ {2}/gm, '') +
    `  for (uint e = tidx; e < ${u(B * Dp)}; e += ${t.TGT}) Os[e] = ${f(0)};\n` +
    `  if (tidx < ${t.B}) { Ms[tidx] = ${f(-Infinity)}; Ls[tidx] = ${f(0)}; }\n` +
    `  for (uint k0 = 0u; k0 < ${kend}; k0 += ${t.B}) {\n` +
    loadRows(t, gm, [{ src: 'k', base: 'kb', r0: 'k0', rows: t.S, dstT: 'Kt' }, { src: 'v', base: 'vb', r0: 'k0', rows: t.S, dst: 'Vs' }]) +
    `    ${d.barrier()}\n` +
    `    // raw scores S = Q K^T of the tile\n` +
    (mma ? mmaProduct(d, sProd) : plainProduct(d, { ...sProd, init: () => f(0) })) +
    `    ${d.barrier()}\n` +
    `    // one thread per query row: mask and scale, new running max, P = exp(s - m), rescale factor\n` +
    `    if (tidx < ${t.B}) {\n` +
    `      const uint qi = q0 + tidx;\n` +
    `      float mt = ${f(-Infinity)};\n` +
    `      for (uint c = 0u; c < ${t.B}; ++c) {\n` +
    `        const uint kj = k0 + c;\n` +
    `        const float s = ${t.visible('qi', 'kj')} ? Ss[tidx * ${t.B} + c] * ${f(gm.scale)} : ${f(-Infinity)};\n` +
    `        Ss[tidx * ${t.B} + c] = s;\n` +
    `        mt = ${d.math('max', 'mt', 's')};\n` +
    `      }\n` +
    `      const float mo = Ms[tidx], mn = ${d.math('max', 'mo', 'mt')};\n` +
    `      const float ms = mn == ${f(-Infinity)} ? ${f(0)} : mn;\n` +
    `      float l = ${f(0)};\n` +
    `      for (uint c = 0u; c < ${t.B}; ++c) {\n` +
    `        const float p = ${d.math('exp', `Ss[tidx * ${t.B} + c] - ms`)};\n` +
    `        Ss[tidx * ${t.B} + c] = p;\n` +
    `        l += p;\n` +
    `      }\n` +
    `      const float al = ${d.math('exp', 'mo - ms')};\n` +
    `      Ms[tidx] = mn;\n      Ls[tidx] = Ls[tidx] * al + l;\n      As[tidx] = al;\n` +
    `    }\n` +
    `    ${d.barrier()}\n` +
    `    // O = O * alpha + P V\n` +
    oUpdate +
    `    ${d.barrier()}\n` +
    `  }\n` +
    `  for (uint e = tidx; e < ${u(B * gm.D)}; e += ${t.TGT}) {\n` +
    `    const uint r = e / ${t.D}, c = e % ${t.D};\n` +
    `    if (q0 + r < ${t.T}) ${t.wr('o', `ob + (q0 + r) * ${t.st('o')} + c`, `Os[r * ${t.Dp} + c] / Ls[r]`)}\n` +
    `  }\n` +
    `  if (tidx < ${t.B} && q0 + tidx < ${t.T}) lse[bh * ${t.T} + q0 + tidx] = Ms[tidx] + ${d.math('log', 'Ls[tidx]')};\n`;
  return { body, floats: mem.floats };
}

/**
 * Between the score products and their element-wise use in the backward kernels: the matrix
 * unit writes 8x8 blocks, so a barrier; the plain products write element e from the thread
 * that later reads element e (the same strided loop over the B x B tile), so none.
 */
function scoresReady(d: Dialect, mma: boolean): string {
  return mma ? `    ${d.barrier()}\n` : `    // (each thread reads back only the score elements it computed: no barrier)\n`;
}

/** P and dS of a (query tile q0, key tile k0) pair from Ss (raw scores) and dPs (dO V^T); `put` stores them */
function probsAndDs(t: ReturnType<typeof txt>, d: Dialect, gm: Geom, put: (p: string, ds: string) => string): string {
  return (
    `    for (uint e = tidx; e < ${t.u(gm.B * gm.B)}; e += ${t.TGT}) {\n` +
    `      const uint i = e / ${t.B}, j = e % ${t.B}, qi = q0 + i, kj = k0 + j;\n` +
    `      const float p = ${t.visible('qi', 'kj')} ? ${d.math('exp', `Ss[e] * ${t.f(gm.scale)} - Lq[i]`)} : ${t.f(0)};\n` +
    `      const float ds = p * (dPs[e] - Dq[i]) * ${t.f(gm.scale)};\n` +
    put('p', 'ds') +
    `    }\n`
  );
}

/** dK, dV: one threadgroup per key tile, looping over the query tiles that see it */
function gradKVBody(d: Dialect, gm: Geom, mma: boolean): { body: string; floats: number } {
  const t = txt(d, gm), { u, f } = t, B = gm.B, Dp = gm.Dp;
  const mem = tgRegions(d, [['Kt', Dp * B], ['Vt', Dp * B], ['Qs', B * Dp], ['dOs', B * Dp], ...(mma ? [] : [['dKs', B * Dp], ['dVs', B * Dp]] as [string, number][]),
    ['Ss', B * B], ['dPs', B * B], ['PT', B * B], ['dST', B * B], ['Lq', B], ['Dq', B]]);
  const accK = new HeldAcc(d, 'acck', B, Dp), accV = new HeldAcc(d, 'accv', B, Dp);
  // the first query tile with a query that sees key k0: qi + S - T >= k0
  const qstart = gm.causal && gm.S - gm.T > 0
    ? `(k0 > ${u(gm.S - gm.T)} ? (k0 - ${u(gm.S - gm.T)}) / ${t.B} * ${t.B} : 0u)`
    : gm.causal ? `k0 / ${t.B} * ${t.B}` : '0u';
  const sProd = { C: 'Ss', A: 'Qs', Bm: 'Kt', rows: B, cols: B, K: mma ? Dp : gm.D, ldA: Dp, ldB: B, ldC: B };
  const dpProd = { C: 'dPs', A: 'dOs', Bm: 'Vt', rows: B, cols: B, K: mma ? Dp : gm.D, ldA: Dp, ldB: B, ldC: B };
  const body =
    `  // attention backward, dK and dV: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // one threadgroup per tile of ${B} keys; P recomputed from q, k and lse\n` +
    `  const uint bh = tgid.y, k0 = tgid.x * ${t.B};\n` +
    headBases(d, gm) +
    mem.decl +
    loadRows(t, gm, [{ src: 'k', base: 'kb', r0: 'k0', rows: t.S, dstT: 'Kt' }, { src: 'v', base: 'vb', r0: 'k0', rows: t.S, dstT: 'Vt' }]).replace(/^ {2}/gm, '') +
    (mma ? accK.decl() + accV.decl() : `  for (uint e = tidx; e < ${u(B * Dp)}; e += ${t.TGT}) { dKs[e] = ${f(0)}; dVs[e] = ${f(0)}; }\n`) +
    `  for (uint q0 = ${qstart}; q0 < ${t.T}; q0 += ${t.B}) {\n` +
    loadRows(t, gm, [{ src: 'q', base: 'qb', r0: 'q0', rows: t.T, dst: 'Qs' }, { src: 'dout', base: 'ob', r0: 'q0', rows: t.T, dst: 'dOs' }]) +
    rowStats(t, d) +
    `    ${d.barrier()}\n` +
    `    // raw scores Q K^T and dP = dO V^T of the tile pair\n` +
    (mma ? mmaProduct(d, sProd) + mmaProduct(d, dpProd) : plainProduct(d, { ...sProd, init: () => f(0) }) + plainProduct(d, { ...dpProd, init: () => f(0) })) +
    scoresReady(d, mma) +
    probsAndDs(t, d, gm, (p, ds) => `      PT[j * ${t.B} + i] = ${p};\n      dST[j * ${t.B} + i] = ${ds};\n`) +
    `    ${d.barrier()}\n` +
    `    // dV += P^T dO, dK += dS^T Q (scale folded into dS)\n` +
    (mma
      ? accV.mac('    ', { A: 'PT', Bm: 'dOs', K: B, ldA: B, ldB: Dp }) + accK.mac('    ', { A: 'dST', Bm: 'Qs', K: B, ldA: B, ldB: Dp })
      : plainProduct(d, { C: 'dVs', A: 'PT', Bm: 'dOs', rows: B, cols: Dp, K: B, ldA: B, ldB: Dp, ldC: Dp, init: (e) => e }) +
        plainProduct(d, { C: 'dKs', A: 'dST', Bm: 'Qs', rows: B, cols: Dp, K: B, ldA: B, ldB: Dp, ldC: Dp, init: (e) => e })) +
    `    ${d.barrier()}\n` +
    `  }\n` +
    (mma ? `  // the held accumulators through the (now free) Q and dO tiles\n` + accK.store('  ', 'Qs') + accV.store('  ', 'dOs') + `  ${d.barrier()}\n` : '') +
    `  for (uint e = tidx; e < ${u(B * gm.D)}; e += ${t.TGT}) {\n` +
    `    const uint r = e / ${t.D}, c = e % ${t.D};\n` +
    `    if (k0 + r < ${t.S}) {\n` +
    `      ${t.wr('dk', `kb + (k0 + r) * ${t.st('dk')} + c`, `${mma ? 'Qs' : 'dKs'}[r * ${t.Dp} + c]`)}\n` +
    `      ${t.wr('dv', `vb + (k0 + r) * ${t.st('dv')} + c`, `${mma ? 'dOs' : 'dVs'}[r * ${t.Dp} + c]`)}\n` +
    `    }\n` +
    `  }\n`;
  return { body, floats: mem.floats };
}

/** dQ: one threadgroup per query tile, looping over the key tiles it sees */
function gradQBody(d: Dialect, gm: Geom, mma: boolean): { body: string; floats: number } {
  const t = txt(d, gm), { u, f } = t, B = gm.B, Dp = gm.Dp;
  const mem = tgRegions(d, [['Qs', B * Dp], ['dOs', B * Dp], ['Kt', Dp * B], ['Vt', Dp * B], ['Ks', B * Dp], ...(mma ? [] : [['dQs', B * Dp]] as [string, number][]),
    ['Ss', B * B], ['dPs', B * B], ['dSs', B * B], ['Lq', B], ['Dq', B]]);
  const acc = new HeldAcc(d, 'accq', B, Dp);
  const kend = gm.causal ? d.imin(`q0 + ${u(B + gm.S - gm.T)}`, t.S) : t.S;
  const sProd = { C: 'Ss', A: 'Qs', Bm: 'Kt', rows: B, cols: B, K: mma ? Dp : gm.D, ldA: Dp, ldB: B, ldC: B };
  const dpProd = { C: 'dPs', A: 'dOs', Bm: 'Vt', rows: B, cols: B, K: mma ? Dp : gm.D, ldA: Dp, ldB: B, ldC: B };
  const body =
    `  // attention backward, dQ: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''};\n` +
    `  // one threadgroup per tile of ${B} queries, keys streamed in tiles of ${B}\n` +
    `  const uint bh = tgid.y, q0 = tgid.x * ${t.B};\n` +
    headBases(d, gm) +
    mem.decl +
    loadRows(t, gm, [{ src: 'q', base: 'qb', r0: 'q0', rows: t.T, dst: 'Qs' }, { src: 'dout', base: 'ob', r0: 'q0', rows: t.T, dst: 'dOs' }]).replace(/^ {2}/gm, '') +
    rowStats(t, d).replace(/^ {2}/gm, '') +
    (mma ? acc.decl() : `  for (uint e = tidx; e < ${u(B * Dp)}; e += ${t.TGT}) dQs[e] = ${f(0)};\n`) +
    `  for (uint k0 = 0u; k0 < ${kend}; k0 += ${t.B}) {\n` +
    loadRows(t, gm, [{ src: 'k', base: 'kb', r0: 'k0', rows: t.S, dst: 'Ks', dstT: 'Kt' }, { src: 'v', base: 'vb', r0: 'k0', rows: t.S, dstT: 'Vt' }]) +
    `    ${d.barrier()}\n` +
    `    // raw scores Q K^T and dP = dO V^T of the tile pair\n` +
    (mma ? mmaProduct(d, sProd) + mmaProduct(d, dpProd) : plainProduct(d, { ...sProd, init: () => f(0) }) + plainProduct(d, { ...dpProd, init: () => f(0) })) +
    scoresReady(d, mma) +
    probsAndDs(t, d, gm, (_p, ds) => `      dSs[e] = ${ds};\n`) +
    `    ${d.barrier()}\n` +
    `    // dQ += dS K (scale folded into dS)\n` +
    (mma
      ? acc.mac('    ', { A: 'dSs', Bm: 'Ks', K: B, ldA: B, ldB: Dp })
      : plainProduct(d, { C: 'dQs', A: 'dSs', Bm: 'Ks', rows: B, cols: Dp, K: B, ldA: B, ldB: Dp, ldC: Dp, init: (e) => e })) +
    `    ${d.barrier()}\n` +
    `  }\n` +
    (mma ? `  // the held accumulators through the (now free) K tile\n` + acc.store('  ', 'Ks') + `  ${d.barrier()}\n` : '') +
    `  for (uint e = tidx; e < ${u(B * gm.D)}; e += ${t.TGT}) {\n` +
    `    const uint r = e / ${t.D}, c = e % ${t.D};\n` +
    `    if (q0 + r < ${t.T}) ${t.wr('dq', `qb + (q0 + r) * ${t.st('dq')} + c`, `${mma ? 'Ks' : 'dQs'}[r * ${t.Dp} + c]`)}\n` +
    `  }\n`;
  return { body, floats: mem.floats };
}

function spec(ctx: LowerCtx, g: Graph, n: Node, gm: Geom, args: KernelArg[], groups: [number, number, number], make: (mma: boolean) => { body: string; floats: number }, what: string): KernelSpec {
  for (const a of args) gm.elem[a.name] = a.type;
  const plain = make(false), mma = make(true);
  const name = ctx.next();
  return {
    name, node: n.id, op: n.op, label: label(g, n) + what, args, groups,
    tgsize: [TGT, 1, 1], tgmem: plain.floats * 4, sync: true, body: plain.body,
    mma: { name: `${name}_mma`, tgsize: [TGT, 1, 1], tgmem: mma.floats * 4, sync: true, body: mma.body },
  };
}

export function lowerAttention(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const a = (v: number, name: string, acc: 'r' | 'w' = 'r') => argOf(g, name, v, acc);
  const ins = n.inputs, outs = n.outputs, d = ctx.d;
  if (!['attention', 'attention_grad', 'attention_qkv', 'attention_qkv_grad'].includes(n.op)) return null;
  const gm = geomOf(g, n);
  if (n.op === 'attention' || n.op === 'attention_qkv') {
    const qkv = n.op === 'attention' ? [a(ins[0], 'q'), a(ins[1], 'k'), a(ins[2], 'v')] : [a(ins[0], 'qkv')];
    return [spec(ctx, g, n, gm, [...qkv, a(outs[0], 'o', 'w'), a(outs[1], 'lse', 'w')],
      [Math.max(1, ceilDiv(gm.T, gm.B)), gm.H, 1], (mma) => forwardBody(d, gm, mma), '')];
  }
  // inputs (do, q, k, v, o, lse) -> dq, dk, dv; packed: (do, qkv, o, lse) -> dqkv
  const packed = n.op === 'attention_qkv_grad';
  const ro = packed
    ? [a(ins[0], 'dout'), a(ins[1], 'qkv'), a(ins[2], 'o'), a(ins[3], 'lse')]
    : [a(ins[0], 'dout'), a(ins[1], 'q'), a(ins[2], 'k'), a(ins[3], 'v'), a(ins[4], 'o'), a(ins[5], 'lse')];
  const kvOut = packed ? [a(outs[0], 'dqkv', 'w')] : [a(outs[1], 'dk', 'w'), a(outs[2], 'dv', 'w')];
  const qOut = packed ? [a(outs[0], 'dqkv', 'w')] : [a(outs[0], 'dq', 'w')];
  const kv = spec(ctx, g, n, gm, [...ro, ...kvOut], [Math.max(1, ceilDiv(gm.S, gm.B)), gm.H, 1], (mma) => gradKVBody(d, gm, mma), ' [dk, dv]');
  const q = spec(ctx, g, n, gm, [...ro, ...qOut], [Math.max(1, ceilDiv(gm.T, gm.B)), gm.H, 1], (mma) => gradQBody(d, gm, mma), ' [dq]');
  return [kv, q];
}
