/**
 * Helpers shared by the test/ir_*.test.ts files: a seeded float64 RNG, a hand-made
 * CheckedModel around a GraphBuilder forward graph, and running a Program in the
 * reference interpreter with persistent tensors kept by name (as a backend does).
 */
import { expect } from 'vitest';
import { hostDType, isPersistent, numel, type Graph, type Program, type StepScalars } from '../compiler/ir/graph.js';
import { autodiff } from '../compiler/ir/autodiff.js';
import { graphProblems } from '../compiler/ir/verify.js';
import type { CheckedModel, InitSpec, OptimizerConfig, ScheduleConfig, TrainConfig } from '../compiler/model.js';
import { runGraph, type Env } from '../compiler/reference/interpret.js';
import { makeRng } from '../compiler/reference/fixtures.js';

/** small deterministic RNG in [0,1) (the reference fixtures' mulberry32) */
export const rng = makeRng;

export function randArray(n: number, r: () => number, lo = -1, hi = 1): Float64Array {
  const a = new Float64Array(n);
  for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * r();
  return a;
}

export function randInts(n: number, k: number, r: () => number): Float64Array {
  const a = new Float64Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.floor(r() * k);
  return a;
}

export const SGD: OptimizerConfig = { kind: 'sgd', lr: 0.1, momentum: 0, nesterov: false, weight_decay: 0 };
export const CONSTANT: ScheduleConfig = { kind: 'constant', warmup_steps: 0, warmup_start_factor: 1 };

export function trainConfig(over: Partial<TrainConfig> = {}): TrainConfig {
  return {
    data: { kind: 'synthetic', train_size: 64, test_size: 16, seed: 1 },
    epochs: 1,
    steps: null,
    batch: 4,
    shuffle: false,
    seed: 0,
    drop_last: false,
    grad_clip: null,
    grad_accum: 1,
    eval_every: null,
    checkpoint_every: null,
    ...over,
  };
}

/**
 * A CheckedModel around a hand-built forward graph (training form, BATCH for N):
 * inputs are the 'input' values in id order, params the 'param'/'state' values.
 */
export function makeModel(
  graph: Graph,
  o: { loss: number | null; metrics?: { name: string; value: number }[]; optimizer?: OptimizerConfig; schedule?: ScheduleConfig; train?: Partial<TrainConfig>; init?: (name: string) => InitSpec },
): CheckedModel {
  return {
    name: 'test',
    file: 'test.model',
    sourceHash: '0',
    graph,
    inputs: graph.values.filter((v) => v.kind === 'input').map((v) => ({ name: v.name, value: v.id, dtype: hostDType(v), shape: [...v.shape] })),
    params: graph.values
      .filter((v) => v.kind === 'param' || v.kind === 'state')
      .map((v) => ({
        path: v.name,
        value: v.id,
        shape: [...v.shape],
        kind: v.kind as 'param' | 'state',
        init: o.init ? o.init(v.name) : v.name.endsWith('running_var') ? { kind: 'ones' } : v.name.endsWith('running_mean') ? { kind: 'zeros' } : { kind: 'normal', mean: 0, std: 0.5 },
        layer: v.name.split('.')[0],
        layerType: 'test',
      })),
    layers: [],
    loss: o.loss === null ? null : { kind: 'test', value: o.loss },
    metrics: o.metrics ?? [],
    optimizer: o.optimizer ?? SGD,
    schedule: o.schedule ?? CONSTANT,
    train: trainConfig(o.train),
    numClasses: null,
  };
}

/** Persistent tensors by name, as a backend keeps them across programs. */
export type Store = Map<string, Float64Array>;

/**
 * Run `program` with the persistent tensors of `store` (missing ones are created
 * zero-filled) and the given inputs; returns the env (value id -> data) after the run.
 * Persistent arrays are shared with the store, so in-place updates persist.
 */
export function runProgram(program: Program, store: Store, inputs: Float64Array[], scalars: StepScalars): Env {
  const env: Env = new Map();
  for (const v of program.graph.values) {
    if (!isPersistent(v)) continue;
    let a = store.get(v.name);
    if (!a) {
      a = new Float64Array(numel(v.shape));
      store.set(v.name, a);
    }
    env.set(v.id, a);
  }
  program.inputs.forEach((id, k) => env.set(id, inputs[k]));
  runGraph(program.graph, env, scalars);
  return env;
}

export function scalarsAt(step: number, lr = 0.1): StepScalars {
  return { lr, t: step + 1, seed: 1234, counter: step };
}

export function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

// ---------------------------------------------------------------- finite-difference gradient check

const SCALARS: StepScalars = { lr: 0.1, t: 1, seed: 777, counter: 3 };
const H = 1e-5;

export interface Case {
  graph: Graph;
  loss: number;
  /** i32 inputs: value id -> exclusive upper bound */
  ints?: Record<number, number>;
  /** f32 inputs in [0,1] (targets of bce) */
  unit?: number[];
}

function feedFor(c: Case, seed: number): Env {
  const r = rng(seed);
  const env: Env = new Map();
  for (const v of c.graph.values) {
    const n = numel(v.shape);
    if (v.kind === 'param') env.set(v.id, randArray(n, r, -0.8, 0.8));
    else if (v.kind === 'state') env.set(v.id, v.name.endsWith('running_var') ? randArray(n, r, 0.5, 1.5) : randArray(n, r, -0.5, 0.5));
    else if (v.kind === 'input') {
      if (v.dtype === 'i32') env.set(v.id, randInts(n, c.ints?.[v.id] ?? 2, r));
      else if (c.unit?.includes(v.id)) env.set(v.id, randArray(n, r, 0, 1));
      else env.set(v.id, randArray(n, r, -1.5, 1.5));
    }
  }
  return env;
}

function copyEnv(env: Env): Env {
  const out: Env = new Map();
  for (const [k, a] of env) out.set(k, Float64Array.from(a));
  return out;
}

function lossOf(graph: Graph, loss: number, feed: Env): number {
  const env = copyEnv(feed);
  runGraph(graph, env, SCALARS);
  return env.get(loss)![0];
}

/** the ops of every graph gradCheck has checked in this test file (coverage of the catalogue's gradient rules) */
export const GRAD_CHECKED_OPS = new Set<string>();

/** Returns names of params that got gradients; asserts each one against central differences. */
export function gradCheck(c: Case, seed = 1): string[] {
  for (const n of c.graph.nodes) GRAD_CHECKED_OPS.add(n.op);
  const ad = autodiff(c.graph, c.loss);
  expect(graphProblems(ad.graph)).toEqual([]);
  // forward part is unchanged
  expect(ad.graph.nodes.slice(0, c.graph.nodes.length)).toEqual(c.graph.nodes);
  const feed = feedFor(c, seed);
  const env = copyEnv(feed);
  runGraph(ad.graph, env, SCALARS);
  expect(env.get(c.loss)![0]).toBeCloseTo(lossOf(c.graph, c.loss, feed), 12);
  const names: string[] = [];
  for (const { param, grad } of ad.grads) {
    const pv = c.graph.values[param];
    names.push(pv.name);
    expect(ad.graph.values[grad].shape).toEqual(pv.shape);
    expect(ad.graph.values[grad].kind).toBe('grad');
    const g = env.get(grad)!;
    const fd = new Float64Array(g.length);
    for (let i = 0; i < g.length; i++) {
      const p = feed.get(param)!;
      const orig = p[i];
      p[i] = orig + H;
      const up = lossOf(c.graph, c.loss, feed);
      p[i] = orig - H;
      const down = lossOf(c.graph, c.loss, feed);
      p[i] = orig;
      fd[i] = (up - down) / (2 * H);
    }
    const scale = Math.max(maxAbs(fd), maxAbs(g), 1e-4);
    const rel = maxAbsDiff(g, fd) / scale;
    expect(rel, `${pv.name}: rel err ${rel}, grad ${Array.from(g.slice(0, 4))} vs fd ${Array.from(fd.slice(0, 4))}`).toBeLessThan(1e-6);
  }
  return names.sort();
}

/**
 * The same `steps` train steps of two programs of one model (from the same seeded parameters and
 * inputs, a store each): the losses of each step side by side and the two stores after them.
 * For checking that a rewrite of a program (fusion, remat) changes no value.
 */
export function runTwin(params: { path: string; shape: number[] }[], a: Program, b: Program, seed: number, steps: number, lr = 1e-3) {
  const rng = makeRng(seed);
  const stores: [Store, Store] = [new Map(), new Map()];
  for (const pd of params) {
    const init = Float64Array.from({ length: numel(pd.shape) }, () => Math.fround((2 * rng() - 1) * 0.3));
    for (const s of stores) s.set(pd.path, init.slice());
  }
  const inputs = a.inputs.map((id) => {
    const v = a.graph.values[id];
    return Float64Array.from({ length: numel(v.shape) }, () => (v.dtype === 'i32' ? Math.floor(rng() * 13) : rng()));
  });
  const losses: [number, number][] = [];
  for (let step = 0; step < steps; step++) {
    const l = [a, b].map((p, k) => runProgram(p, stores[k], inputs, scalarsAt(step, lr)).get(p.outputs[0].value)![0]);
    losses.push([l[0], l[1]]);
  }
  return { losses, stores };
}
