/**
 * The emulator catches what it is meant to catch: kernels broken on purpose (a missing
 * threadgroup barrier, a wrong index, a barrier in divergent control flow) and a dispatch
 * plan with a missing memory barrier between dependent launches either give results that
 * differ from the reference or fail with a message naming the kernel and the binding.
 * The untouched kernels of the same programs pass (the control).
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
const list = Object.values(cases);
const index = (c: OpCase) => list.indexOf(c);

function edit(a: MetalArtifacts, c: OpCase, from: string | RegExp, to: string, count = 1) {
  const p = a.programs[index(c)];
  let n = 0;
  p.library = p.library.replace(new RegExp(typeof from === 'string' ? from.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') : from.source, 'g'), (m) => (n++ < count ? to : m));
  if (n === 0) throw new Error(`test setup: '${from}' not found in ${p.program.name}`);
}

let results: ReturnType<typeof runCases>;

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
    const plan = a.programs[index(cases.planWithoutBarrier)].plan;
    const dep = plan.steps.find((s) => s.kind === 'kernel' && s.barrier);
    if (!dep || dep.kind !== 'kernel') throw new Error('test setup: the chain has no barrier');
    dep.barrier = false;
  });
  results = runCases(build, list, S);
});

function maxErr(c: OpCase): number {
  const got = results[index(c)];
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
  it('a dispatch plan without the memory barrier between dependent launches gives wrong results', () => {
    expect(maxErr(cases.planWithoutBarrier)).toBeGreaterThan(1e-2);
  });
});
