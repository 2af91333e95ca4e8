/** runNode / runGraph plumbing: op coverage, environment errors, optional inputs, in-place mutation. */
import { describe, expect, it } from 'vitest';
import { GraphBuilder } from '../compiler/ir/graph.js';
import { OPS } from '../compiler/ir/ops.js';
import { type Env, REFERENCE_OPS, runGraph, runNode } from '../compiler/reference/interpret.js';
import { DEFAULT_SCALARS } from '../compiler/reference/fixtures.js';

describe('reference interpreter', () => {
  it('implements exactly the ops of ops.ts', () => {
    expect(Object.keys(REFERENCE_OPS).sort()).toEqual(Object.keys(OPS).sort());
  });

  it('runs a graph in order and stores outputs by value id', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 2], 'input');
    const [r] = b.emit('unary', [x], [{ name: 'r', shape: [2, 2] }], { fn: 'relu' });
    const [y] = b.emit('reshape', [r], [{ name: 'y', shape: [4] }], { shape: [4] });
    const env: Env = new Map([[x, Float64Array.from([-1, 2, -3, 4])]]);
    runGraph(b.graph, env, DEFAULT_SCALARS);
    expect(Array.from(env.get(y)!)).toEqual([0, 2, 0, 4]);
  });

  it('throws an internal error naming a value absent from the environment', () => {
    const b = new GraphBuilder();
    const x = b.value('fc1.weight', 'f32', [2], 'param');
    b.emit('unary', [x], [{ name: 'y', shape: [2] }], { fn: 'neg' }, 'fc1');
    expect(() => runGraph(b.graph, new Map(), DEFAULT_SCALARS)).toThrow(/node 0 \(unary at fc1\) reads value 0 'fc1.weight' \[2\], which has no data/);
  });

  it('rejects data whose length does not match the value shape', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [3], 'input');
    b.emit('unary', [x], [{ name: 'y', shape: [3] }], { fn: 'neg' });
    expect(() => runGraph(b.graph, new Map([[x, new Float64Array(2)]]), DEFAULT_SCALARS)).toThrow(/holds 2 elements, expected 3/);
  });

  it('rejects unknown ops, missing attrs and wrong output shapes', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 3], 'input');
    const env: Env = new Map([[x, new Float64Array(6)]]);
    b.emit('frobnicate', [x], [{ name: 'y', shape: [2, 3] }]);
    b.emit('softmax', [x], [{ name: 'y', shape: [2, 3] }]);
    b.emit('binary', [x, x], [{ name: 'y', shape: [3, 2] }], { fn: 'add' });
    const [n0, n1, n2] = b.graph.nodes;
    expect(() => runNode(b.graph, n0, env, DEFAULT_SCALARS)).toThrow(/no op 'frobnicate'/);
    expect(() => runNode(b.graph, n1, env, DEFAULT_SCALARS)).toThrow(/missing attr 'axis'/);
    expect(() => runNode(b.graph, n2, env, DEFAULT_SCALARS)).toThrow(/output has shape \[3,2\], expected \[2,3\]/);
  });

  it('optional inputs are -1; mutated inputs change in place', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [1, 2], 'input');
    const w = b.value('w', 'f32', [1, 2], 'param');
    const [y] = b.emit('linear', [x, w, -1], [{ name: 'y', shape: [1, 1] }]);
    const g = b.value('g', 'f32', [1, 2], 'input');
    b.node('sgd_update', [w, g, -1, -1], [], { momentum: 0, nesterov: false, weight_decay: 0 });
    const wData = Float64Array.from([1, 2]);
    const env: Env = new Map([[x, Float64Array.from([3, 4])], [w, wData], [g, Float64Array.from([10, 20])]]);
    runGraph(b.graph, env, { ...DEFAULT_SCALARS, lr: 0.1 });
    expect(Array.from(env.get(y)!)).toEqual([11]);
    expect(Array.from(wData)).toEqual([0, 0]);
  });

  it('rejects out-of-range labels and ids', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [1, 2], 'input');
    const l = b.value('label', 'i32', [1], 'input');
    b.emit('cross_entropy', [x, l], [{ name: 'loss', shape: [], kind: 'output' }]);
    expect(() => runGraph(b.graph, new Map([[x, new Float64Array(2)], [l, Float64Array.from([2])]]), DEFAULT_SCALARS)).toThrow(/label 2 at row 0 is outside \[0, 2\)/);
  });
});
