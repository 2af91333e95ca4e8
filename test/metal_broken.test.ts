/**
 * The emulator catches what it is meant to catch: kernels broken on purpose (a missing
 * threadgroup barrier, a wrong index, a barrier in divergent control flow) and a dispatch
 * plan with a missing memory barrier between dependent launches either give results that
 * differ from the reference or fail with a message naming the kernel and the binding.
 * The untouched kernels of the same programs pass (the control). Every barrier of the fused
 * attention's loops (forward, backward dK/dV, backward dQ) is needed: without any one of them
 * the results are wrong when the threads of a threadgroup run in ascending or in descending
 * order (MPSC_METAL_EMU_ORDER=reverse).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { GraphBuilder, type Program } from '../compiler/ir/graph.js';
import { makeRng, randomTensor, relError } from '../compiler/reference/fixtures.js';
import type { MetalArtifacts } from '../compiler/codegen-metal/index.js';
import { compileEmu, opCase, reference, runCases, type OpCase } from './metal_harness.js';

const S = { lr: 0.1, t: 1, seed: 1, counter: 0 };
const rng = makeRng(3);
const f = (shape: number[]) => ({ shape, data: randomTensor(shape, rng) });

function chain(name: string): OpCase {
  const b = new GraphBuilder();
  const x = b.value(`${name}.x`, 'f32', [20, 40], 'input'), w = b.value(`${name}.w`, 'f32', [18, 40], 'input');
  const [y] = b.emit('linear', [x, w, -1], [{ name: `${name}.y`, shape: [20, 18] }]);
  const [z] = b.emit('unary', [y], [{ name: `${name}.z`, shape: [20, 18] }], { fn: 'tanh' });
  const program = { name, batch: 1, graph: b.graph, inputs: [x, w], outputs: [] } as unknown as Program;
  return { program, data: new Map([[x, randomTensor([20, 40], rng)], [w, randomTensor([18, 40], rng)]]), check: [y, z] };
}

const cases = {
  control: opCase('control', 'linear', [f([20, 40]), f([18, 40]), f([18])], [[20, 18]]),
  noBarrierAfterLoad: opCase('nb_load', 'linear', [f([20, 40]), f([18, 40]), f([18])], [[20, 18]]),
  noBarrierAfterUse: opCase('nb_use', 'linear', [f([20, 40]), f([18, 40]), f([18])], [[20, 18]]),
  noBarrierInReduce: opCase('nb_reduce', 'softmax', [f([5, 300])], [[5, 300]], { axis: 1 }),
  divergentBarrier: opCase('divergent', 'softmax', [f([5, 300])], [[5, 300]], { axis: 1 }),
  threadgroupPastEnd: opCase('oob_tg', 'softmax', [f([5, 300])], [[5, 300]], { axis: 1 }),
  writePastEnd: opCase('oob_write', 'unary', [f([300])], [[300]], { fn: 'relu' }),
  readPastEnd: opCase('oob_read', 'linear', [f([20, 40]), f([18, 40]), f([18])], [[20, 18]]),
  controlChain: chain('chain_ok'),
  planWithoutBarrier: chain('chain_nb'),
};

// fused attention: forward and backward at a causal shape that is not a tile multiple; each
// barrier of the key / query loop of each kernel is removed in its own copy
const [AN, AH, AT, AD] = [1, 2, 37, 8];
const attnAttrs = { causal: true, scale: 1 / Math.sqrt(AD) };
const attnIn = [f([AN, AH, AT, AD]), f([AN, AH, AT, AD]), f([AN, AH, AT, AD])];
const attnOut = [[AN, AH, AT, AD], [AN, AH, AT]];
const attnFwdCase = (name: string) => opCase(name, 'attention', attnIn, attnOut, attnAttrs);
const fwdRef = attnFwdCase('attn_ref'), fwdVals = reference(fwdRef, S);
const [attnO, attnLse] = fwdRef.check.map((id) => ({ shape: fwdRef.program.graph.values[id].shape, data: fwdVals.get(id)! }));
const attnDo = f([AN, AH, AT, AD]);
const attnGradCase = (name: string) => opCase(name, 'attention_grad', [attnDo, ...attnIn, attnO, attnLse], [[AN, AH, AT, AD], [AN, AH, AT, AD], [AN, AH, AT, AD]], attnAttrs);
/** the kernels of the attention ops (plain variants: k0 forward; k0 dK/dV and k1 dQ of the backward) and the barriers in their loops */
const attnBroken = [
  ...[0, 1, 2, 3].map((k) => ({ kernel: 'k0', barrier: k, c: attnFwdCase(`nb_attn_fwd${k}`), what: 'forward' })),
  ...[0, 1, 2].map((k) => ({ kernel: 'k0', barrier: k, c: attnGradCase(`nb_attn_dkv${k}`), what: 'backward dK/dV' })),
  ...[0, 1, 2].map((k) => ({ kernel: 'k1', barrier: k, c: attnGradCase(`nb_attn_dq${k}`), what: 'backward dQ' })),
];
const attnControl = [attnFwdCase('attn_ok'), attnGradCase('attn_grad_ok')];

const list = [...Object.values(cases), ...attnBroken.map((b) => b.c), ...attnControl];
const index = (c: OpCase) => list.indexOf(c);

function edit(a: MetalArtifacts, c: OpCase, from: string | RegExp, to: string, count = 1) {
  const p = a.programs[index(c)];
  let n = 0;
  p.library = p.library.replace(new RegExp(typeof from === 'string' ? from.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') : from.source, 'g'), (m) => (n++ < count ? to : m));
  if (n === 0) throw new Error(`test setup: '${from}' not found in ${p.program.name}`);
}

let results: ReturnType<typeof runCases>;
/** the same build with the threads of each threadgroup in descending order */
let reversed: ReturnType<typeof runCases>;

beforeAll(() => {
  const build = compileEmu(list.map((c) => c.program), { fuse: false }, undefined, 'broken', (a) => {
    const barrier = '    threadgroup_barrier(mem_flags::mem_threadgroup);\n';
    edit(a, cases.noBarrierAfterLoad, barrier, '', 1); // first barrier of the tiled GEMM loop
    const p1 = a.programs[index(cases.noBarrierAfterUse)];
    const at = p1.library.indexOf(barrier, p1.library.indexOf(barrier) + 1);
    p1.library = p1.library.slice(0, at) + p1.library.slice(at + barrier.length); // second barrier
    edit(a, cases.noBarrierInReduce, '  if (lane == 0u) sh[sg] = v;\n  threadgroup_barrier(mem_flags::mem_threadgroup);\n', '  if (lane == 0u) sh[sg] = v;\n', 1);
    edit(a, cases.divergentBarrier, '  const uint r = tgid.x;\n', '  const uint r = tgid.x;\n  if (tidx == 5u) return;\n', 1);
    edit(a, cases.threadgroupPastEnd, '  if (lane == 0u) sh[sg] = v;\n', '  if (lane == 0u) sh[sg + 8u] = v;\n', 1);
    edit(a, cases.writePastEnd, '  y[i] = ', '  y[i + 1u] = ', 1);
    edit(a, cases.readPastEnd, 'v = x[mi * 40u + ki];', 'v = x[mi * 40u + ki + 1u];', 2);
    for (const b of attnBroken) {
      // the k-th barrier line inside the kernel's loop (the plain variant: `kernel void k0(`)
      const p = a.programs[index(b.c)];
      const start = p.library.indexOf(`kernel void ${b.kernel}(`);
      let at = start;
      for (let k = 0; k <= b.barrier; k++) at = p.library.indexOf(barrier, at + 1);
      const end = p.library.indexOf('\nkernel void', start + 1);
      if (start < 0 || at < 0 || (end >= 0 && at > end)) throw new Error(`test setup: barrier ${b.barrier} of ${b.kernel} not found in ${p.program.name}`);
      p.library = p.library.slice(0, at) + p.library.slice(at + barrier.length);
    }
    const plan = a.programs[index(cases.planWithoutBarrier)].plan;
    const dep = plan.steps.find((s) => s.kind === 'kernel' && s.barrier);
    if (!dep || dep.kind !== 'kernel') throw new Error('test setup: the chain has no barrier');
    dep.barrier = false;
  });
  results = runCases(build, list, S);
  reversed = runCases(build, list, S, { MPSC_METAL_EMU_ORDER: 'reverse' });
});

function maxErr(c: OpCase, from = results): number {
  const got = from[index(c)];
  if (typeof got === 'string') throw new Error(got);
  const ref = reference(c, S);
  return Math.max(...c.check.map((id) => relError(got.get(id)!, ref.get(id)!)));
}

function error(c: OpCase): string {
  const got = results[index(c)];
  return typeof got === 'string' ? got : '(no error)';
}

describe('the emulator catches broken kernels and plans', () => {
  it('control: the untouched kernels are right', () => {
    expect(maxErr(cases.control)).toBeLessThan(1e-5);
    expect(maxErr(cases.controlChain)).toBeLessThan(1e-5);
  });
  it('a missing barrier between loading a tile and using it gives wrong results', () => {
    expect(maxErr(cases.noBarrierAfterLoad)).toBeGreaterThan(1e-2);
  });
  it('a missing barrier before the next tile overwrites threadgroup memory gives wrong results', () => {
    expect(maxErr(cases.noBarrierAfterUse)).toBeGreaterThan(1e-2);
  });
  it('a missing barrier in the simd_sum + threadgroup reduction gives wrong results', () => {
    expect(maxErr(cases.noBarrierInReduce)).toBeGreaterThan(1e-2);
  });
  it('a barrier some threads never reach is reported', () => {
    expect(error(cases.divergentBarrier)).toMatch(/threadgroup_barrier reached by 255 of 256 threads/);
  });
  it('a write past the end of a buffer is reported with the kernel and binding', () => {
    expect(error(cases.writePastEnd)).toMatch(/oob_write\.k0 .*out-of-bounds access to \[\[buffer\(1\)\]\] 'oob_write\.out0' \(1200 bytes\): byte offset 1200/);
  });
  it('an access past the end of threadgroup memory is reported', () => {
    expect(error(cases.threadgroupPastEnd)).toMatch(/oob_tg\.k0 .*out-of-bounds access to threadgroup memory \[\[threadgroup\(0\)\]\] \(32 bytes\): byte offset 32/);
  });
  it('a read past the end of a buffer (wrong index) is reported', () => {
    expect(error(cases.readPastEnd)).toMatch(/out-of-bounds access to \[\[buffer\(0\)\]\] 'oob_read\.in0' \(3200 bytes\)/);
  });
  it('control: the untouched attention kernels are right in both thread orders', () => {
    for (const c of attnControl) {
      expect(maxErr(c), c.program.name).toBeLessThan(1e-5);
      expect(maxErr(c, reversed), c.program.name).toBeLessThan(1e-5);
    }
  });
  it.each(attnBroken.map((b) => [b.what, b.barrier, b] as const))('fused attention %s without loop barrier %i gives wrong results (in one thread order or the other)', (_w, _k, b) => {
    expect(Math.max(maxErr(b.c), maxErr(b.c, reversed))).toBeGreaterThan(1e-2);
  });
  it('a dispatch plan without the memory barrier between dependent launches gives wrong results', () => {
    expect(maxErr(cases.planWithoutBarrier)).toBeGreaterThan(1e-2);
  });
});
