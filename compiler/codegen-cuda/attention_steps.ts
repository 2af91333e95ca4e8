/**
 * attention_steps: the per-tile statements the CUDA flash attention kernels on the tensor cores share,
 * the 16-bit ones (attention_cuda.ts, m16n8k16) and the fp32 3xTF32 ones (attention_tf32x3.ts, m16n8k8
 * TF32). Both hold a warp's 16-row score tile as fp32 mma C fragments of `nt` n8 tiles (lane (g, t):
 * rows g, g + 8 at columns 8j + 2t, 8j + 2t + 1; mma.ts), so the forward's online softmax and the
 * backward's recompute of P and dS from the saved lse and Delta are the same statements over `nt`
 * tiles: only the tile width (64 keys / queries in the 16-bit kernels; 32 or 16 in the 3xTF32 ones)
 * and the accumulator width differ. Consumes a geometry (attention_f32.ts AttnGeom) and the names of
 * the calling kernel's variables (documented per function); produces CUDA statement text, placed by
 * the caller inside its streamed-tile loop (the variables k0 / q0, w, g, t, kw, SC, lse tiles Ls / Ds
 * or row values L0 / L1, D0 / D1 are the kernels' own, as each function says).
 */
import { lit, visibleTest, type AttnGeom } from './attention_f32.js';

/**
 * The forward's online-softmax step over one warp's score tile `sv[nt][4]` (rows qw + g, qw + g + 8;
 * keys k0 + 8j + 2t (+1); `edge` a warp-uniform test for tiles that need the element mask): running max
 * m (of the unscaled scores when `fold`: the scale in one FMA per exponent, exp2(s * SC - m * SC); else
 * of the base-2 scores s * SC), per-lane partial sums l, the accumulator `acc[nd][4]` rescaled; sv
 * becomes P. One braced block of statements.
 */
export function softmaxStep(gm: AttnGeom, nt: number, nd: number, fold: boolean, sv: string, m: [string, string], l: [string, string], acc: string, qw: string, edge: string): string {
  return `    {\n` + softmaxCore(gm, nt, fold, sv, sv, m, l, qw, edge, 'const float al0') + rescaleAcc(nd, acc) + `    }\n`;
}

/**
 * softmaxStep for the pipelined wgmma forward (attention_cuda.ts forwardBodyWgmmaPiped): the same statements per
 * element, reading the scores `sv` and writing P into `pv` (another array: ptxas serializes every product of a kernel
 * where plain instructions write a wgmma accumulator while a product group is in flight), and the accumulator's
 * rescale left to the caller (rescaleAcc, once the product that adds into it is done): the factors into `al0`, `al1`,
 * which the caller declares. Statements in the caller's scope (no braces): mx0 / mx1, mn0 / mn1, b0 / b1, c0 / c1,
 * ls0 / ls1 and edge are declared here.
 */
export function softmaxStepSplit(gm: AttnGeom, nt: number, fold: boolean, sv: string, pv: string, m: [string, string], l: [string, string], qw: string, edge: string): string {
  return softmaxCore(gm, nt, fold, sv, pv, m, l, qw, edge, 'al0');
}

/** the online softmax's rescale of the accumulator `acc[nd][4]` by the step's factors al0 (row g), al1 (row g + 8) */
export function rescaleAcc(nd: number, acc: string): string {
  return `    #pragma unroll\n    for (int j = 0; j < ${nd}; ++j) { ${acc}[j][0] *= al0; ${acc}[j][1] *= al0; ${acc}[j][2] *= al1; ${acc}[j][3] *= al1; }\n`;
}

/** softmaxStep's statements up to the accumulator's rescale: P of `sv` into `pv` (the same array: in place); `alDecl` how al0 / al1 are introduced */
function softmaxCore(gm: AttnGeom, nt: number, fold: boolean, sv: string, pv: string, m: [string, string], l: [string, string], qw: string, edge: string, alDecl: 'const float al0' | 'al0'): string {
  const visible = visibleTest(gm);
  return (
    `    const bool edge = ${edge};\n` +
    `    float mx0 = -INFINITY, mx1 = -INFINITY;\n` +
    `    #pragma unroll\n    for (int j = 0; j < ${nt}; ++j)\n      #pragma unroll\n      for (int e = 0; e < 4; ++e) {\n` +
    `        float z = ${sv}[j][e]${fold ? '' : ' * SC'};\n` +
    `        if (edge) {\n          const int kc = k0 + j * 8 + 2 * t + (e & 1);\n` +
    (gm.causal ? `          const int qr = ${qw} + g + (e >> 1) * 8;\n` : '') +
    `          if (!(${visible('qr', 'kc', { k: true })})) z = -INFINITY;\n        }\n` +
    `        ${pv}[j][e] = z;\n        if (e < 2) mx0 = fmaxf(mx0, z); else mx1 = fmaxf(mx1, z);\n      }\n` +
    `    mx0 = mpsc_quad_max(mx0);\n    mx1 = mpsc_quad_max(mx1);\n` +
    `    const float mn0 = fmaxf(${m[0]}, mx0), mn1 = fmaxf(${m[1]}, mx1);\n` +
    `    const float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;\n` +
    (fold
      ? `    ${alDecl} = exp2f((${m[0]} - b0) * SC), al1 = exp2f((${m[1]} - b1) * SC);\n    const float c0 = -b0 * SC, c1 = -b1 * SC;\n`
      : `    ${alDecl} = exp2f(${m[0]} - b0), al1 = exp2f(${m[1]} - b1);\n`) +
    `    ${m[0]} = mn0;\n    ${m[1]} = mn1;\n` +
    `    float ls0 = 0.0f, ls1 = 0.0f;\n` +
    `    #pragma unroll\n    for (int j = 0; j < ${nt}; ++j)\n      #pragma unroll\n      for (int e = 0; e < 4; ++e) {\n` +
    (fold
      ? `        const float p = exp2f(fmaf(${pv}[j][e], SC, e < 2 ? c0 : c1));\n`
      : `        const float p = exp2f(${pv}[j][e] - (e < 2 ? b0 : b1));\n`) +
    `        ${pv}[j][e] = p;\n        if (e < 2) ls0 += p; else ls1 += p;\n      }\n` +
    `    ${l[0]} = ${l[0]} * al0 + ls0;\n    ${l[1]} = ${l[1]} * al1 + ls1;\n`
  );
}

/**
 * The forward's end for a warp's m16 tile (rows qw + g, + 8): the partial sums `l` reduced over the
 * row's 4 lanes, o = acc / l by `storeRows` (the kernel's row store, given the two row factors), lse =
 * m (base 2, of the unscaled scores when `fold`) in natural log + ln l. One braced block.
 */
export function forwardStore(fold: boolean, m: [string, string], l: [string, string], qw: string, storeRows: (mul: [string, string]) => string): string {
  return (
    `  {\n  const float sum0 = mpsc_quad_sum(${l[0]}), sum1 = mpsc_quad_sum(${l[1]});\n` +
    `  const float i0 = 1.0f / sum0, i1 = 1.0f / sum1;\n` +
    storeRows([' * i0', ' * i1']) +
    `  if (t == 0) {\n    const int r0 = ${qw} + g, r1 = r0 + 8;\n` +
    `    if (r0 < T) lse[(size_t)bh * T + r0] = ${m[0]} * ${fold ? 'SC * ' : ''}${lit(Math.LN2)} + logf(sum0);\n` +
    `    if (r1 < T) lse[(size_t)bh * T + r1] = ${m[1]} * ${fold ? 'SC * ' : ''}${lit(Math.LN2)} + logf(sum1);\n  }\n  }\n`
  );
}

/** which half of a backward recompute step: P and dS together, P alone (its mask included), or dS from the P already there */
export type ProbPart = 'both' | 'p' | 'ds';
/**
 * the fp32 fragment arrays a recompute step reads and writes: scores s, P, dP, dS (the mma.sync kernels: P over s and dS
 * over dP, in place; the wgmma kernels write new arrays, as ptxas serializes the products when plain instructions
 * write a wgmma accumulator while a product group is in flight)
 */
export interface ProbArrays { s: string; p: string; dp: string; ds: string }

/**
 * The dK/dV kernel's recompute over one query tile (q0..): the transposed scores `st[nt][4]` (keys kw + g
 * (+ 8) by queries q0 + 8j + 2t (+1)) become P^T = exp2(st * SC - lse) (zero where masked; Ls[] the
 * tile's lse in base 2, or the expression `lse2` of qc giving it), and `dpt[nt][4]` (dP^T) becomes dS^T = P^T (dP^T - Delta) scale (Ds[] the tile's
 * Delta), the scale folded in so the products need none. `part` 'p' / 'ds': only P^T, or only dS^T from the P^T there
 * (the wgmma kernels compute P^T while dP^T's product runs); `a`: the arrays (default in place). The statements per
 * element are the same.
 */
export function kvProbStep(gm: AttnGeom, nt: number, edge: string, lse2 = 'Ls[qc]', part: ProbPart = 'both', a: ProbArrays = { s: 'st', p: 'st', dp: 'dpt', ds: 'dpt' }): string {
  const visible = visibleTest(gm);
  const p = part !== 'ds', ds = part !== 'p';
  return (
    (p ? `    const bool edge = ${edge};\n` : '') +
    `    #pragma unroll\n    for (int j = 0; j < ${nt}; ++j)\n      #pragma unroll\n      for (int e = 0; e < 4; ++e) {\n` +
    `        const int qc = j * 8 + 2 * t + (e & 1);\n` +
    (p
      ? `        float p = exp2f(${a.s}[j][e] * SC - ${lse2});\n` +
        `        if (edge) {\n          const int qr = q0 + qc;\n` +
        (gm.causal ? `          const int kr = kw + g + (e >> 1) * 8;\n` : '') +
        `          if (!(${visible('qr', 'kr', { q: true })})) p = 0.0f;\n        }\n` +
        `        ${a.p}[j][e] = p;\n`
      : `        const float p = ${a.p}[j][e];\n`) +
    (ds ? `        ${a.ds}[j][e] = p * (${a.dp}[j][e] - Ds[qc]) * ${lit(gm.scale)};\n` : '') +
    `      }\n`
  );
}

/**
 * The dQ kernel's recompute over one key tile (k0..): the scores `s[nt][4]` (queries r0 = qw + g, r1 =
 * r0 + 8, with lse L0 / L1 in base 2 and Delta D0 / D1) and dP `dp[nt][4]` give dS = P (dP - Delta) scale
 * in `s` (P zero where masked). `part` 'p' / 'ds': only P, or only dS from the P there; `a`: the arrays (default in place).
 */
export function qProbStep(gm: AttnGeom, nt: number, edge: string, part: ProbPart = 'both', a: ProbArrays = { s: 's', p: 's', dp: 'dp', ds: 's' }): string {
  const visible = visibleTest(gm);
  const p = part !== 'ds', ds = part !== 'p';
  return (
    (p ? `    const bool edge = ${edge};\n` : '') +
    `    #pragma unroll\n    for (int j = 0; j < ${nt}; ++j)\n      #pragma unroll\n      for (int e = 0; e < 4; ++e) {\n` +
    (p
      ? `        float p = exp2f(${a.s}[j][e] * SC - (e < 2 ? L0 : L1));\n` +
        `        if (edge) {\n          const int kc = k0 + j * 8 + 2 * t + (e & 1);\n` +
        (gm.causal ? `          const int qr = e < 2 ? r0 : r1;\n` : '') +
        `          if (!(${visible('qr', 'kc', { k: true })})) p = 0.0f;\n        }\n`
      : `        const float p = ${a.p}[j][e];\n`) +
    (ds ? `        ${a.ds}[j][e] = p * (${a.dp}[j][e] - (e < 2 ? D0 : D1)) * ${lit(gm.scale)};\n` : `        ${a.p}[j][e] = p;\n`) +
    `      }\n`
  );
}
