/**
 * The fusion pass (compiler/ir/fuse.ts) on its own: which pairs fuse for which capability set,
 * which must not, the fused graph verified (and verify.ts rejecting malformed fusion attrs), the
 * reference interpreter running fused nodes to the same values as the unfused graph, and the
 * memory planner's in-place rule (ops.ts `inPlace`) for fused pool gradients; rules 5 and 6 (the
 * residual add folded into the layernorm, the residual-gradient add into layernorm_grad) on their own
 * graphs and on a small GPT's train step.
 */
import { describe, expect, it } from 'vitest';
import { CPU_FUSIONS } from '../compiler/codegen-cpu/fusions.js';
import { metalFusions } from '../compiler/codegen-metal/fusions.js';
import { type FusionCaps, NO_FUSIONS, fuseProgram } from '../compiler/ir/fuse.js';
import { type AttrValue, GraphBuilder, type Node, type Program } from '../compiler/ir/graph.js';
import { inPlacePairs, planMemory, verifyPlan } from '../compiler/ir/memory_plan.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { type Env, runGraph } from '../compiler/reference/interpret.js';
import { gptModel } from '../bench/gpt_tiny.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { rematerialize } from '../compiler/ir/remat.js';
import { pairGradWithForward } from '../compiler/ir/grad_fwd.js';
import { runTwin } from './ir_helpers.js';
import { withEnv } from './env_helpers.js';
import { HALF_IO_OPS } from '../compiler/kernels/registry.js';

const SCALARS = { lr: 0.1, t: 1, seed: 1, counter: 0 };

/** a Program around a builder's graph; `outs` are the values the host reads */
function program(b: GraphBuilder, inputs: number[], outs: number[]): Program {
  return { name: 'train_step', batch: 2, graph: b.graph, inputs, outputs: outs.map((v) => ({ name: b.get(v).name, value: v })) };
}

const opsOf = (p: Program) => p.graph.nodes.map((n) => n.op);
const nodeOf = (p: Program, op: string): Node => p.graph.nodes.find((n) => n.op === op)!;
const valueId = (p: Program, name: string) => p.graph.values.findIndex((v) => v.name === name);

/** x [4,6] -> linear (w [5,6], b [5]) -> y -> unary fn -> z; extra readers of y from `more` */
function linearUnary(fn: string, attrs: Record<string, AttrValue> = {}, more?: (b: GraphBuilder, y: number, z: number) => number[]) {
  const b = new GraphBuilder();
  const x = b.value('x', 'f32', [4, 6], 'input');
  const w = b.value('w', 'f32', [5, 6], 'param');
  const bias = b.value('b', 'f32', [5], 'param');
  const [y] = b.emit('linear', [x, w, bias], [{ name: 'y', shape: [4, 5] }]);
  const [z] = b.emit('unary', [y], [{ name: 'z', shape: [4, 5] }], { fn, ...attrs });
  const outs = more ? more(b, y, z) : [z];
  return { b, p: program(b, [x], outs), x, y, z };
}

/** dz -> unary_grad fn (dz, y) -> dy, the backward of the unary */
const withGrad = (fn: string, attrs: Record<string, AttrValue> = {}) => (b: GraphBuilder, y: number, z: number) => {
  const dz = b.emit('unary', [z], [{ name: 'dz', shape: [4, 5] }], { fn: 'neg' })[0];
  const [dy] = b.emit('unary_grad', [dz, y], [{ name: 'dy', shape: [4, 5] }], { fn, ...attrs });
  return [dy];
};

function fused(p: Program, caps: FusionCaps): Program {
  const f = fuseProgram(p, caps);
  expect(graphProblems(f.graph)).toEqual([]);
  return f;
}

/** verify.ts's problems with a copy of f edited by `edit` (one string) */
const problemsAfter = (f: Program) => (edit: (p: Program) => void): string => {
  const copy: Program = JSON.parse(JSON.stringify(f));
  edit(copy);
  return graphProblems(copy.graph).join('\n');
};

/** runs both graphs in float64 on the same random inputs / params; compares every value both have (by name) */
function sameValues(a: Program, b: Program, seed = 3): number {
  let s = seed;
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
  const data = new Map<string, Float64Array>();
  const envOf = (p: Program): Env => {
    const env: Env = new Map();
    for (const v of p.graph.values) {
      if (v.kind !== 'input' && v.kind !== 'param') continue;
      if (!data.has(v.name)) data.set(v.name, Float64Array.from({ length: v.shape.reduce((x, y) => x * y, 1) }, rnd));
      env.set(v.id, data.get(v.name)!);
    }
    runGraph(p.graph, env, SCALARS);
    return env;
  };
  const ea = envOf(a), eb = envOf(b);
  let compared = 0;
  for (const v of b.graph.values) {
    const i = valueId(a, v.name);
    if (i < 0 || v.kind === 'input' || v.kind === 'param') continue;
    expect(Array.from(eb.get(v.id)!), v.name).toEqual(Array.from(ea.get(i)!));
    compared++;
  }
  return compared;
}

describe('GEMM epilogue', () => {
  it('folds the unary into the linear: attrs, the unary gone, ids renumbered, same values', () => {
    const { p } = linearUnary('relu');
    const f = fused(p, CPU_FUSIONS);
    expect(opsOf(f)).toEqual(['linear']);
    const lin = f.graph.nodes[0];
    expect(lin.attrs).toEqual({ epilogue: 'relu' });
    expect(f.graph.values.map((v) => v.name)).toEqual(['x', 'w', 'b', 'z']);
    expect(lin.outputs).toEqual([3]);
    expect(f.outputs).toEqual([{ name: 'z', value: 3 }]);
    expect(sameValues(p, f)).toBe(1);
    // the input program is unchanged
    expect(opsOf(p)).toEqual(['linear', 'unary']);
  });

  it('copies the fn attrs as epilogue_<name> (Metal: any fn; the CPU: any fn on linear)', () => {
    const { p } = linearUnary('hardtanh', { min_val: -0.5, max_val: 0.25 });
    const f = fused(p, metalFusions());
    expect(f.graph.nodes[0].attrs).toEqual({ epilogue: 'hardtanh', epilogue_min_val: -0.5, epilogue_max_val: 0.25 });
    expect(sameValues(p, f)).toBe(1);
    // the CPU's linear applies any fn (CPU_FUSIONS.epilogue.opFns); fns listed for another op only do not fold
    const c = fused(p, CPU_FUSIONS);
    expect(opsOf(c)).toEqual(['linear']);
    expect(c.graph.nodes[0].attrs).toEqual({ epilogue: 'hardtanh', epilogue_min_val: -0.5, epilogue_max_val: 0.25 });
    expect(opsOf(fused(p, { epilogue: { ops: ['conv2d'], fns: ['hardtanh'], gradReaders: false, opFns: { matmul: ['hardtanh'] } } }))).toEqual(['linear', 'unary']);
  });

  it('redirects relu-grads of the pre-activation to the relu output when the backend allows it', () => {
    const { p } = linearUnary('relu', {}, withGrad('relu'));
    const f = fused(p, CPU_FUSIONS);
    expect(opsOf(f)).toEqual(['linear', 'unary', 'unary_grad']);
    expect(nodeOf(f, 'unary_grad').inputs[1]).toBe(valueId(f, 'z'));
    expect(valueId(f, 'y')).toBe(-1);
    expect(sameValues(p, f)).toBeGreaterThan(0);
    // Metal fuses only a unary that is the GEMM output's only reader
    expect(opsOf(fused(p, metalFusions()))).toEqual(opsOf(p));
  });

  it('does not fold when another reader needs the pre-activation', () => {
    // a leaky_relu-grad: its derivative is not read from the output (GRAD_FROM_OUTPUT)
    const leaky = linearUnary('leaky_relu', { alpha: 0.1 }, withGrad('leaky_relu', { alpha: 0.1 })).p;
    expect(opsOf(fused(leaky, { epilogue: { ops: ['linear'], fns: ['leaky_relu'], gradReaders: true } }))).toEqual(opsOf(leaky));
    // a relu-grad with other attrs than the relu, a binary reader, y read by the host, two unaries
    const cases = [
      linearUnary('relu', {}, withGrad('relu', { alpha: 1 })).p,
      linearUnary('relu', {}, (b, y, z) => [b.emit('binary', [y, z], [{ name: 's', shape: [4, 5] }], { fn: 'add' })[0]]).p,
      linearUnary('relu', {}, (_b, y, z) => [y, z]).p,
      linearUnary('relu', {}, (b, y, z) => [z, b.emit('unary', [y], [{ name: 't', shape: [4, 5] }], { fn: 'relu' })[0]]).p,
    ];
    for (const p of cases) expect(opsOf(fused(p, CPU_FUSIONS))).toEqual(opsOf(p));
  });

  it('only for ops and fns the capability set lists', () => {
    const b = new GraphBuilder();
    const a = b.value('a', 'f32', [3, 4], 'input');
    const w = b.value('w', 'f32', [4, 2], 'param');
    const [y] = b.emit('matmul', [a, w], [{ name: 'y', shape: [3, 2] }], { transA: false, transB: false });
    const [z] = b.emit('unary', [y], [{ name: 'z', shape: [3, 2] }], { fn: 'relu' });
    const p = program(b, [a], [z]);
    expect(opsOf(fused(p, CPU_FUSIONS))).toEqual(['matmul', 'unary']);
    expect(opsOf(fused(p, metalFusions()))).toEqual(['matmul']);
    expect(opsOf(fused(p, metalFusions(['matmul'])))).toEqual(['matmul', 'unary']);
    expect(opsOf(fused(p, metalFusions(['unary'])))).toEqual(['matmul', 'unary']);
    expect(fuseProgram(p, NO_FUSIONS).graph).toBe(p.graph);
  });
});

/** x [2,3,4,4] -> conv (fused relu when `fuseConv`) ... the backward of a pool over relu(conv) */
function poolGradGraph(pool: 'global' | 'max', window: { kernel: number[]; stride: number[] } = { kernel: [2, 2], stride: [2, 2] }) {
  const b = new GraphBuilder();
  const x = b.value('x', 'f32', [2, 3, 4, 4], 'input');
  const w = b.value('w', 'f32', [3, 3, 3, 3], 'param');
  const conv = { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 };
  const [y] = b.emit('conv2d', [x, w, -1], [{ name: 'y', shape: [2, 3, 4, 4] }], conv);
  const [z] = b.emit('unary', [y], [{ name: 'z', shape: [2, 3, 4, 4] }], { fn: 'relu' });
  let g: number;
  if (pool === 'global') {
    const [m] = b.emit('global_avgpool', [z], [{ name: 'm', shape: [2, 3, 1, 1] }]);
    const [dm] = b.emit('unary', [m], [{ name: 'dm', shape: [2, 3, 1, 1] }], { fn: 'tanh' });
    [g] = b.emit('global_avgpool_grad', [dm], [{ name: 'g', shape: [2, 3, 4, 4], kind: 'grad' }], { x_shape: [2, 3, 4, 4] });
  } else {
    const oh = Math.floor((4 - window.kernel[0]) / window.stride[0]) + 1;
    const [m] = b.emit('maxpool2d', [z], [{ name: 'm', shape: [2, 3, oh, oh] }], { ...window, padding: [0, 0] });
    const [dm] = b.emit('unary', [m], [{ name: 'dm', shape: [2, 3, oh, oh] }], { fn: 'tanh' });
    [g] = b.emit('maxpool2d_grad', [dm, z], [{ name: 'g', shape: [2, 3, 4, 4], kind: 'grad' }], { ...window, padding: [0, 0] });
  }
  const [dy] = b.emit('unary_grad', [g, y], [{ name: 'dy', shape: [2, 3, 4, 4], kind: 'grad' }], { fn: 'relu' });
  const [s] = b.emit('unary', [dy], [{ name: 's', shape: [2, 3, 4, 4] }], { fn: 'sigmoid' });
  return { b, p: program(b, [x], [s]) };
}

describe('relu-grad folded into the pool gradient', () => {
  it('global_avgpool_grad takes the relu output as its mask and writes the relu-grad output', () => {
    const { p } = poolGradGraph('global');
    const f = fused(p, CPU_FUSIONS);
    expect(opsOf(f)).toEqual(['conv2d', 'global_avgpool', 'unary', 'global_avgpool_grad', 'unary']);
    const P = nodeOf(f, 'global_avgpool_grad');
    expect(P.attrs.relu_grad).toBe(true);
    expect(P.inputs).toEqual([valueId(f, 'dm'), valueId(f, 'z')]);
    expect(P.outputs).toEqual([valueId(f, 'dy')]);
    expect(valueId(f, 'g')).toBe(-1);
    expect(sameValues(p, f)).toBeGreaterThan(0);
  });

  it('a 2x2 / stride-2 max-pool grad whose mask is its own input (after the epilogue fold)', () => {
    const { p } = poolGradGraph('max');
    const f = fused(p, CPU_FUSIONS);
    const P = nodeOf(f, 'maxpool2d_grad');
    const z = valueId(f, 'z');
    expect(P.inputs).toEqual([valueId(f, 'dm'), z, z]);
    expect(P.attrs.relu_grad).toBe(true);
    expect(opsOf(f)).not.toContain('unary_grad');
    expect(sameValues(p, f)).toBeGreaterThan(0);
  });

  it('not when the mask is not the pool input, off the 2x2 kernel, or when g has another reader', () => {
    // without the epilogue fold the relu-grad reads the conv output, not the pool input
    const { p } = poolGradGraph('max');
    expect(opsOf(fused(p, { poolGradRelu: { globalAvgpool: true, maxpool2x2: true } }))).toContain('unary_grad');
    const s1 = poolGradGraph('max', { kernel: [2, 2], stride: [1, 1] }).p;
    expect(opsOf(fused(s1, CPU_FUSIONS))).toContain('unary_grad');
    const two = poolGradGraph('global');
    const g = valueId(two.p, 'g');
    two.b.emit('unary', [g], [{ name: 'extra', shape: [2, 3, 4, 4] }], { fn: 'neg' });
    const extra = program(two.b, two.p.inputs, [valueId(two.p, 's'), valueId(two.p, 'extra')]);
    expect(opsOf(fused(extra, CPU_FUSIONS))).toContain('unary_grad');
    // Metal folds no pool gradients
    expect(opsOf(fused(poolGradGraph('global').p, metalFusions()))).toContain('unary_grad');
  });
});

describe('relu-grad folded into conv2d_grad_input (CUDA)', () => {
  /** x -> conv -> relu -> z -> conv -> tanh; the backward's dz = conv2d_grad_input of the second conv, then the relu-grad */
  const graph = (extraReader: boolean) => {
    const b = new GraphBuilder();
    const conv = { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 };
    const x = b.value('x', 'f32', [2, 3, 5, 5], 'input');
    const w0 = b.value('w0', 'f32', [4, 3, 3, 3], 'param');
    const w1 = b.value('w1', 'f32', [2, 4, 3, 3], 'param');
    const [y] = b.emit('conv2d', [x, w0], [{ name: 'y', shape: [2, 4, 5, 5] }], conv);
    const [z] = b.emit('unary', [y], [{ name: 'z', shape: [2, 4, 5, 5] }], { fn: 'relu' });
    const [v] = b.emit('conv2d', [z, w1], [{ name: 'v', shape: [2, 2, 5, 5] }], conv);
    const [dv] = b.emit('unary', [v], [{ name: 'dv', shape: [2, 2, 5, 5] }], { fn: 'tanh' });
    const [dz] = b.emit('conv2d_grad_input', [dv, w1], [{ name: 'dz', shape: [2, 4, 5, 5], kind: 'grad' }], { ...conv, x_shape: [2, 4, 5, 5] });
    const [dy] = b.emit('unary_grad', [dz, y], [{ name: 'dy', shape: [2, 4, 5, 5], kind: 'grad' }], { fn: 'relu' });
    const [s] = b.emit('unary', [dy], [{ name: 's', shape: [2, 4, 5, 5] }], { fn: 'sigmoid' });
    const outs = [s];
    if (extraReader) outs.push(b.emit('unary', [dz], [{ name: 'n', shape: [2, 4, 5, 5] }], { fn: 'neg' })[0]);
    return program(b, [x], outs);
  };
  const caps: FusionCaps = { epilogue: { ops: ['conv2d'], fns: ['relu'], gradReaders: true }, poolGradRelu: { globalAvgpool: false, maxpool2x2: false, convGradInput: true } };

  it('the relu-grad disappears into the conv input gradient, masked by the relu output, with the same values', () => {
    const p = graph(false);
    const f = fused(p, caps);
    expect(opsOf(f)).toEqual(['conv2d', 'conv2d', 'unary', 'conv2d_grad_input', 'unary']);
    const P = nodeOf(f, 'conv2d_grad_input');
    expect(P.attrs.relu_grad).toBe(true);
    expect(P.inputs).toEqual([valueId(f, 'dv'), valueId(f, 'w1'), valueId(f, 'z')]);
    expect(P.outputs).toEqual([valueId(f, 'dy')]);
    expect(sameValues(p, f)).toBeGreaterThan(0);
  });

  it('not without the cap, nor when the gradient has another reader; verify.ts rejects relu_grad on the weight gradient', () => {
    expect(opsOf(fused(graph(false), { ...caps, poolGradRelu: { globalAvgpool: true, maxpool2x2: true } }))).toContain('unary_grad');
    expect(opsOf(fused(graph(true), caps))).toContain('unary_grad');
    const f = fused(graph(false), caps);
    const P = nodeOf(f, 'conv2d_grad_input');
    const bad = { ...f.graph, nodes: f.graph.nodes.map((n) => (n === P ? { ...n, op: 'conv2d_grad_weight', attrs: { ...n.attrs, x_shape: undefined, w_shape: [4, 2, 3, 3] } } : n)) };
    expect(graphProblems(bad as typeof f.graph).join('\n')).toMatch(/relu_grad is only a boolean of|expects 2 inputs/);
  });
});

describe('relu folded into global_avgpool', () => {
  const graph = (extraReader: boolean) => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 3, 4, 4], 'input');
    const [y] = b.emit('unary', [x], [{ name: 'y', shape: [2, 3, 4, 4] }], { fn: 'tanh' });
    const [z] = b.emit('unary', [y], [{ name: 'z', shape: [2, 3, 4, 4] }], { fn: 'relu' });
    const [m] = b.emit('global_avgpool', [z], [{ name: 'm', shape: [2, 3, 1, 1] }]);
    const outs = [m];
    if (extraReader) outs.push(b.emit('unary', [z], [{ name: 'n', shape: [2, 3, 4, 4] }], { fn: 'neg' })[0]);
    return program(b, [x], outs);
  };

  it('the pool reads the relu input with relu_in', () => {
    const p = graph(false);
    const f = fused(p, CPU_FUSIONS);
    expect(opsOf(f)).toEqual(['unary', 'global_avgpool']);
    expect(nodeOf(f, 'global_avgpool')).toMatchObject({ inputs: [valueId(f, 'y')], attrs: { relu_in: true } });
    expect(sameValues(p, f)).toBe(2);
    expect(opsOf(fused(p, metalFusions()))).toEqual(opsOf(p));
  });

  it('not when the relu output has another reader', () => {
    const p = graph(true);
    expect(opsOf(fused(p, CPU_FUSIONS))).toEqual(opsOf(p));
  });
});

it('running the pass on its own output changes nothing', () => {
  for (const p of [linearUnary('relu', {}, withGrad('relu')).p, poolGradGraph('max').p, poolGradGraph('global').p]) {
    const once = fuseProgram(p, CPU_FUSIONS);
    expect(fuseProgram(once, CPU_FUSIONS)).toEqual(once);
  }
});

describe('verify.ts checks the fusion attrs', () => {
  const problems = (edit: (p: Program) => void) => {
    const f = fuseProgram(poolGradGraph('max').p, CPU_FUSIONS);
    const copy: Program = JSON.parse(JSON.stringify(f));
    edit(copy);
    return graphProblems(copy.graph).join('\n');
  };
  const node = (p: Program, op: string) => p.graph.nodes.find((n) => n.op === op)!;

  it('accepts the fused graph and rejects malformed attrs', () => {
    expect(problems(() => {})).toBe('');
    expect(problems((p) => (node(p, 'maxpool2d').attrs.epilogue = 'relu'))).toMatch(/epilogue is only allowed on linear/);
    expect(problems((p) => (node(p, 'conv2d').attrs.epilogue = 'swish'))).toMatch(/'swish' is not a unary fn/);
    expect(problems((p) => (node(p, 'conv2d').attrs.epilogue_alpha = 0.1))).toMatch(/epilogue_alpha does not belong to the epilogue 'relu'/);
    expect(problems((p) => (node(p, 'maxpool2d_grad').attrs.relu_grad = false))).toMatch(/mask input is present exactly when relu_grad/);
    expect(problems((p) => node(p, 'maxpool2d_grad').inputs.pop())).toMatch(/mask input is present exactly when relu_grad/);
    expect(problems((p) => (node(p, 'maxpool2d_grad').inputs[2] = node(p, 'maxpool2d').outputs[0]))).toMatch(/mask %\d+ is f32\[2,3,2,2\], expected f32\[2,3,4,4\]/);
    expect(problems((p) => (node(p, 'maxpool2d').attrs.relu_in = true))).toMatch(/relu_in is only a boolean of global_avgpool/);
    expect(problems((p) => (node(p, 'conv2d').attrs.relu_grad = true))).toMatch(/relu_grad is only a boolean of/);
  });
});

describe('memory plan of fused pool gradients (ops.ts inPlace)', () => {
  it('puts the fused max-pool grad output exactly over its input when it is the last reader', () => {
    const f = fuseProgram(poolGradGraph('max').p, CPU_FUSIONS);
    f.plan = planMemory(f);
    const P = nodeOf(f, 'maxpool2d_grad');
    expect(inPlacePairs(f.graph).get(P.outputs[0])).toBe(P.inputs[1]);
    expect(f.plan.offsets[P.outputs[0]]).toBe(f.plan.offsets[P.inputs[1]]);
    expect(verifyPlan(f)).toEqual([]);
    // the plan checker still rejects an in-place overlap the op does not allow
    const unfused = poolGradGraph('max').p;
    unfused.plan = planMemory(unfused);
    const g = valueId(unfused, 'g'), z = valueId(unfused, 'z');
    unfused.plan.offsets[g] = unfused.plan.offsets[z];
    expect(verifyPlan(unfused).join('\n')).toMatch(/live at the same time and overlap/);
  });

  it('not when the input is read after the node', () => {
    const { b, p } = poolGradGraph('max');
    const z = valueId(p, 'z');
    b.emit('unary', [z], [{ name: 'late', shape: [2, 3, 4, 4] }], { fn: 'neg' });
    const f = fuseProgram(program(b, p.inputs, [valueId(p, 's'), valueId(p, 'late')]), CPU_FUSIONS);
    f.plan = planMemory(f);
    const P = nodeOf(f, 'maxpool2d_grad');
    expect(P.attrs.relu_grad).toBe(true);
    expect(inPlacePairs(f.graph).size).toBe(0);
    expect(f.plan.offsets[P.outputs[0]]).not.toBe(f.plan.offsets[P.inputs[1]]);
    expect(verifyPlan(f)).toEqual([]);
  });
});

describe('residual add folded into the layernorm after it (rule 5, CUDA)', () => {
  const CAPS: FusionCaps = { addLayernorm: { maxD: 8 } };
  /** h = a + r ([3, D]); layernorm(h, w, bias); h read again after (the next residual add); `between`: a reader of h before the layernorm */
  function addLn(D: number, opts: { between?: boolean; broadcast?: boolean; noAffine?: boolean } = {}) {
    const b = new GraphBuilder();
    const a = b.value('a', 'f32', [3, D], 'input');
    const r = b.value('r', 'f32', opts.broadcast ? [D] : [3, D], 'input');
    const w = opts.noAffine ? -1 : b.value('w', 'f32', [D], 'param'), bias = opts.noAffine ? -1 : b.value('bias', 'f32', [D], 'param');
    const [h] = b.emit('binary', [a, r], [{ name: 'h', shape: [3, D] }], { fn: 'add' });
    const extra = opts.between ? b.emit('unary', [h], [{ name: 'early', shape: [3, D] }], { fn: 'neg' }) : [];
    const [y] = b.emit('layernorm', opts.noAffine ? [h] : [h, w, bias], [{ name: 'y', shape: [3, D] }, { name: 'mean', shape: [3] }, { name: 'rstd', shape: [3] }], { eps: 1e-5 });
    const [next] = b.emit('binary', [h, y], [{ name: 'next', shape: [3, D] }], { fn: 'add' });
    return program(b, [a, r], [next, ...extra]);
  }

  it('the layernorm reads a and r, writes h as its last output; the add is gone; same values', () => {
    for (const noAffine of [false, true]) {
      const p = addLn(7, { noAffine });
      const f = fused(p, CAPS);
      expect(opsOf(f)).toEqual(['layernorm', 'binary']);
      const ln = f.graph.nodes[0];
      expect(ln.attrs).toEqual({ eps: 1e-5, add_in: true });
      const name = (id: number) => (id < 0 ? '-' : f.graph.values[id].name);
      expect(ln.inputs.map(name)).toEqual(['a', noAffine ? '-' : 'w', noAffine ? '-' : 'bias', 'r']);
      expect(ln.outputs.map(name)).toEqual(['y', 'mean', 'rstd', 'h']);
      expect(sameValues(p, f)).toBe(5);
      expect(fuseProgram(f, CAPS)).toEqual(f);
      expect(verifyPlan({ ...f, plan: planMemory(f) })).toEqual([]);
    }
  });

  it('not without the cap, over rows wider than maxD, for a broadcast add, or when h is read before the layernorm', () => {
    expect(opsOf(fused(addLn(7), NO_FUSIONS))).toEqual(['binary', 'layernorm', 'binary']);
    expect(opsOf(fused(addLn(9), CAPS))).toEqual(['binary', 'layernorm', 'binary']);
    expect(opsOf(fused(addLn(7, { broadcast: true }), CAPS))).toEqual(['binary', 'layernorm', 'binary']);
    expect(opsOf(fused(addLn(7, { between: true }), CAPS))).toEqual(['binary', 'unary', 'layernorm', 'binary']);
  });

  it('verify.ts rejects add_in off layernorm, without the addend, with an addend of another shape, and the sum without add_in', () => {
    const f = fused(addLn(7), CAPS);
    const bad = problemsAfter(f);
    expect(bad(() => {})).toBe('');
    expect(bad((p) => (p.graph.nodes[1].attrs.add_in = true))).toMatch(/add_in is only `true` on layernorm/);
    expect(bad((p) => p.graph.nodes[0].inputs.pop())).toMatch(/add_in needs every input/);
    expect(bad((p) => (p.graph.nodes[0].inputs[3] = p.graph.nodes[0].inputs[1]))).toMatch(/the addend %\d+ is f32\[7\], expected a float\[3,7\]/);
    expect(bad((p) => (delete p.graph.nodes[0].attrs.add_in))).toMatch(/expects 3 outputs, has 4/);
  });
});

describe('residual-gradient add folded into the layernorm_grad before it (rule 6, CUDA)', () => {
  const CAPS: FusionCaps = { addLayernorm: { maxD: 8 } };
  /** dx = layernorm_grad(dy, x, w?, mean, rstd); out = r + dx; `more`: another reader of dx; `late`: r written after the grad */
  function gradAdd(D: number, opts: { more?: boolean; late?: boolean; noWeight?: boolean } = {}) {
    const b = new GraphBuilder();
    const dy = b.value('dy', 'f32', [3, D], 'input'), x = b.value('x', 'f32', [3, D], 'input');
    const w = opts.noWeight ? -1 : b.value('w', 'f32', [D], 'param');
    const mean = b.value('mean', 'f32', [3], 'input'), rstd = b.value('rstd', 'f32', [3], 'input');
    const r0 = b.value('r0', 'f32', [3, D], 'input');
    const early = opts.late ? -1 : b.emit('unary', [r0], [{ name: 'r', shape: [3, D] }], { fn: 'neg' })[0];
    const [dx] = b.emit('layernorm_grad', [dy, x, w, mean, rstd], [{ name: 'dx', shape: [3, D] }, { name: 'dw', shape: [D] }, { name: 'db', shape: [D] }]);
    const r = opts.late ? b.emit('unary', [r0], [{ name: 'r', shape: [3, D] }], { fn: 'neg' })[0] : early;
    const [out] = b.emit('binary', [dx, r], [{ name: 'out', shape: [3, D] }], { fn: 'add' });
    const extra = opts.more ? b.emit('unary', [dx], [{ name: 'dx2', shape: [3, D] }], { fn: 'neg' }) : [];
    const grads = b.graph.nodes.find((n) => n.op === 'layernorm_grad')!.outputs.slice(1);
    return program(b, [dy, x, mean, rstd, r0], [out, ...grads, ...extra]);
  }

  it('the layernorm_grad reads r last and writes the sum as its output 0; dx and the add are gone; same values', () => {
    for (const noWeight of [false, true]) {
      const p = gradAdd(7, { noWeight });
      const f = fused(p, CAPS);
      expect(opsOf(f)).toEqual(['unary', 'layernorm_grad']);
      const lg = nodeOf(f, 'layernorm_grad');
      const name = (id: number) => (id < 0 ? '-' : f.graph.values[id].name);
      expect(lg.attrs).toEqual({ add_out: true });
      expect(lg.inputs.map(name)).toEqual(['dy', 'x', noWeight ? '-' : 'w', 'mean', 'rstd', 'r']);
      expect(lg.outputs.map(name)).toEqual(['out', 'dw', 'db']);
      expect(valueId(f, 'dx')).toBe(-1);
      expect(sameValues(p, f)).toBe(4);
      expect(fuseProgram(f, CAPS)).toEqual(f);
    }
  });

  it("rule 7: a bias gradient (sum_to over the rows) of the sum becomes the grad's last output; not a sum over other dims", () => {
    const withSum = (shape: number[], axes: number[]) => {
      const p = gradAdd(7);
      const b = new GraphBuilder();
      Object.assign(b, { graph: JSON.parse(JSON.stringify(p.graph)) });
      const out = valueId(p, 'out');
      const [s] = b.emit('sum_to', [out], [{ name: 'dbias_lin', shape }], { shape, axes });
      return program(b, p.inputs, [...p.outputs.map((o) => o.value).filter((v) => v !== out), s]);
    };
    const p = withSum([7], [0]);
    const f = fused(p, CAPS);
    expect(opsOf(f)).toEqual(['unary', 'layernorm_grad']);
    const lg = nodeOf(f, 'layernorm_grad');
    expect(lg.attrs).toEqual({ add_out: true, sum_out: true });
    expect(lg.outputs.map((id) => f.graph.values[id].name)).toEqual(['out', 'dw', 'db', 'dbias_lin']);
    expect(sameValues(p, f)).toBe(5);
    expect(opsOf(fused(withSum([3], [1]), CAPS))).toEqual(['unary', 'layernorm_grad', 'sum_to']);
  });

  it('not when dx has another reader, r is written after the grad, or rows are wider than maxD; verify.ts checks add_out', () => {
    expect(opsOf(fused(gradAdd(7, { more: true }), CAPS))).toContain('binary');
    expect(opsOf(fused(gradAdd(7, { late: true }), CAPS))).toContain('binary');
    expect(opsOf(fused(gradAdd(9), CAPS))).toContain('binary');
    const f = fused(gradAdd(7), CAPS);
    const bad = problemsAfter(f);
    expect(bad((p) => (nodeOf(p, 'unary').attrs.add_out = true))).toMatch(/add_out is only `true` on layernorm_grad/);
    expect(bad((p) => (nodeOf(p, 'layernorm_grad').attrs.sum_out = true))).toMatch(/expects 3 outputs and the sum, has 3/);
    expect(bad((p) => (nodeOf(p, 'unary').attrs.sum_out = true))).toMatch(/sum_out is only `true`, with add_out or on unary_grad/);
    expect(bad((p) => nodeOf(p, 'layernorm_grad').inputs.pop())).toMatch(/expects 5 inputs \(.*\) and the addend, has 5/);
    expect(bad((p) => (nodeOf(p, 'layernorm_grad').inputs[5] = nodeOf(p, 'layernorm_grad').inputs[3]))).toMatch(/the addend is f32\[3\], expected a float\[3,7\]/);
  });
});

describe('a bias gradient folded into the weight-gradient matmul reading the same rows (rule 8, CUDA)', () => {
  const CAPS: FusionCaps = { matmulBiasGrad: true };
  /** dy [2,3,5] (or [6,5] flat) -> dw = reshape(dy)^T x (x [6,4]) and db = sum_to(dy) over the rows; `early`: a reader of db before the matmul */
  function weightAndBias(opts: { flat?: boolean; transA?: boolean; axes?: number[]; early?: boolean } = {}) {
    const b = new GraphBuilder();
    const shape = opts.flat ? [6, 5] : [2, 3, 5];
    const dy0 = b.value('dy0', 'f32', shape, 'input'), x = b.value('x', 'f32', opts.transA === false ? [5, 4] : [6, 4], 'input');
    const [dy] = b.emit('unary', [dy0], [{ name: 'dy', shape }], { fn: 'neg' });
    const axes = opts.axes ?? shape.slice(0, -1).map((_, i) => i);
    const sumShape = shape.filter((_, i) => !axes.includes(i));
    const sum = () => b.emit('sum_to', [dy], [{ name: 'db', shape: sumShape }], { shape: sumShape, axes })[0];
    const db0 = opts.early ? sum() : -1;
    const early = opts.early ? b.emit('unary', [db0], [{ name: 'db2', shape: sumShape }], { fn: 'neg' }) : [];
    const rows = opts.flat ? dy : b.emit('reshape', [dy], [{ name: 'dy2', shape: [6, 5] }], { shape: [6, 5] })[0];
    const [dw] = opts.transA === false
      ? b.emit('matmul', [rows, x], [{ name: 'dw', shape: [6, 4] }], { transA: false, transB: false })
      : b.emit('matmul', [rows, x], [{ name: 'dw', shape: [5, 4] }], { transA: true, transB: false });
    const db = opts.early ? db0 : sum();
    return program(b, [dy0, x], [dw, db, ...early]);
  }

  it("the matmul (transA) over dy's rows writes their column sums as its last output; the sum_to is gone; same values", () => {
    for (const flat of [false, true]) {
      const p = weightAndBias({ flat });
      const f = fused(p, CAPS);
      expect(opsOf(f)).toEqual(flat ? ['unary', 'matmul'] : ['unary', 'reshape', 'matmul']);
      const mm = nodeOf(f, 'matmul');
      expect(mm.attrs).toEqual({ transA: true, transB: false, a_sums: true });
      expect(mm.outputs.map((id) => f.graph.values[id].name)).toEqual(['dw', 'db']);
      expect(sameValues(p, f)).toBe(flat ? 3 : 4);
      expect(fuseProgram(f, CAPS)).toEqual(f);
      // without the caps (every other backend) nothing changes
      expect(opsOf(fused(p, NO_FUSIONS))).toContain('sum_to');
    }
  });

  it('not for a matmul without transA, a sum over other dims, or a reader of the sums before the matmul; verify.ts checks a_sums', () => {
    expect(opsOf(fused(weightAndBias({ transA: false }), CAPS))).toContain('sum_to');
    expect(opsOf(fused(weightAndBias({ axes: [0] }), CAPS))).toContain('sum_to');
    expect(opsOf(fused(weightAndBias({ early: true }), CAPS))).toContain('sum_to');
    const f = fused(weightAndBias(), CAPS);
    const bad = problemsAfter(f);
    expect(bad((p) => (nodeOf(p, 'unary').attrs.a_sums = true))).toMatch(/a_sums is only `true` on matmul/);
    expect(bad((p) => nodeOf(p, 'matmul').outputs.pop())).toMatch(/expects 1 outputs and the sum, has 1/);
    expect(bad((p) => (nodeOf(p, 'matmul').attrs.transA = false))).toMatch(/a_sums needs transA/);
    expect(bad((p) => (p.graph.values[nodeOf(p, 'matmul').outputs[1]].shape = [4]))).toMatch(/column sums of a are f32\[4\], expected f32\[5\]/);
  });
});

it("rule 8 on a small GPT's train step (each linear's bias gradient beside its weight gradient): the reference gives the same loss and update bit for bit", () => {
  const model = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  const unfused = buildPrograms(model, { batch: 2 }).train_step;
  const f = fused(unfused, { matmulBiasGrad: true });
  const sums = f.graph.nodes.filter((n) => n.attrs.a_sums === true);
  // every linear with a bias: in_proj, out_proj, fc, proj of each of the 2 blocks
  expect(sums).toHaveLength(8);
  expect(f.graph.nodes.filter((n) => n.op === 'sum_to')).toHaveLength(unfused.graph.nodes.filter((n) => n.op === 'sum_to').length - 8);
  const { losses, stores } = runTwin(model.params, unfused, f, 5, 2);
  for (const [a, b] of losses) expect(b).toBe(a);
  for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
});

it("rules 5 and 6 on a small GPT's train step (every residual add before a layernorm, every residual-gradient add after a layernorm_grad): the reference gives the same loss and update bit for bit", () => {
  const model = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  const unfused = buildPrograms(model, { batch: 2 }).train_step;
  const f = fused(unfused, { addLayernorm: { maxD: 16 } });
  // the embedding sum and both residual adds of each of the 2 blocks (the last one into ln_f): 5 layernorms read a sum
  expect(f.graph.nodes.filter((n) => n.attrs.add_in === true)).toHaveLength(5);
  // the layernorm_grads but ln_f's (its dx is the residual stream's whole gradient there); with the bias gradient of
  // the projection before them (rule 7) but block 0's ln1 (the embeddings' gradient: no bias)
  expect(f.graph.nodes.filter((n) => n.attrs.add_out === true)).toHaveLength(4);
  expect(f.graph.nodes.filter((n) => n.attrs.sum_out === true)).toHaveLength(3);
  expect(f.graph.nodes.filter((n) => n.op === 'binary' && n.attrs.fn === 'add')).toHaveLength(0);
  const { losses, stores } = runTwin(model.params, unfused, f, 5, 2);
  for (const [a, b] of losses) expect(b).toBe(a);
  for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
});

it("rule 11 on a small bf16 GPT's train step (each residual gradient's bf16 copy stored by the layernorm_grad writing it): the reference gives the same loss and update bit for bit", () => {
  const base = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  const model = { ...base, train: { ...base.train, precision: 'bf16' as const } };
  const unfused = buildPrograms(model, { batch: 2 }).train_step;
  const caps: FusionCaps = { casts: { reads: HALF_IO_OPS, stores: HALF_IO_OPS }, addLayernorm: { maxD: 16 } };
  const plain = fused(unfused, caps);
  const f = fused(unfused, { ...caps, addLayernorm: { maxD: 16, halfOut: true } });
  const castsOfGrads = (p: Program) => p.graph.nodes.filter((n) => n.op === 'cast' && p.graph.nodes.some((m) => m.op === 'layernorm_grad' && m.attrs.add_out === true && m.outputs[0] === n.inputs[0])).length;
  // the residual gradient of each add_out layernorm_grad but block 0's ln1 (the embeddings' gradient, read in f32) is
  // read by a product in bf16: the 3 casts become half_out
  expect(castsOfGrads(plain)).toBe(3);
  expect(castsOfGrads(f)).toBe(0);
  const halves = f.graph.nodes.filter((n) => n.attrs.half_out === 'bf16');
  expect(halves).toHaveLength(3);
  // the copy is the last output, after sum_out's column sums where both
  for (const n of halves) {
    expect(f.graph.values[n.outputs[n.outputs.length - 1]].dtype).toBe('bf16');
    if (n.attrs.sum_out === true) expect(f.graph.values[n.outputs[n.outputs.length - 2]].shape).toEqual([16]);
  }
  expect(fuseProgram(f, { ...caps, addLayernorm: { maxD: 16, halfOut: true } })).toEqual(f);
  const { losses, stores } = runTwin(model.params, plain, f, 5, 2);
  for (const [a, b] of losses) expect(b).toBe(a);
  for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
  // verify.ts: half_out needs add_out, a 16-bit type, and a last output of output 0's shape in it
  const bad = problemsAfter(f);
  const i = f.graph.nodes.indexOf(halves[0]);
  expect(bad((p) => { p.graph.nodes[i].attrs.half_out = 'f32'; })).toMatch(/half_out is only 'f16' or 'bf16', with add_out/);
  expect(bad((p) => { p.graph.nodes[i].attrs.half_out = 'f16'; })).toMatch(/the 16-bit copy is bf16\[.*\], expected f16/);
});

it("rule 14 on a small GPT's train step, fp32 and bf16 (each gelu gradient with its fc bias sum; then grad_fwd's fwd_out after it): the reference gives the same loss and update bit for bit", () => {
  const base = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  for (const precision of ['fp32', 'bf16'] as const) {
    const model = { ...base, train: { ...base.train, precision } };
    const unfused = buildPrograms(model, { batch: 2 }).train_step;
    const casts: FusionCaps = precision === 'bf16' ? { casts: { reads: HALF_IO_OPS, stores: HALF_IO_OPS } } : {};
    const caps: FusionCaps = { ...casts, unaryGradBiasSum: { multipleOf: 8, maxD: 64, minElements: 0 }, matmulBiasGrad: true };
    const f = fused(unfused, caps);
    // the fc bias of each of the 2 blocks (its gelu gradient's dx summed), which rule 8 takes without rule 14
    const sums = f.graph.nodes.filter((n) => n.op === 'unary_grad' && n.attrs.sum_out === true);
    expect(sums).toHaveLength(2);
    const aSums = (p: Program) => p.graph.nodes.filter((n) => n.attrs.a_sums === true).length;
    const rule8 = aSums(fused(unfused, { ...casts, matmulBiasGrad: true }));
    expect(aSums(f)).toBe(rule8 - 2);
    for (const n of sums) expect(f.graph.values[n.outputs[1]].name).toMatch(/fc\.bias\.grad$/);
    expect(fuseProgram(f, caps)).toEqual(f);
    // rows too narrow for the caps: rule 8 keeps them all
    expect(aSums(fused(unfused, { ...caps, unaryGradBiasSum: { multipleOf: 256, maxD: 1 << 16, minElements: 0 } }))).toBe(rule8);
    const { losses, stores } = runTwin(model.params, unfused, f, 5, 2);
    for (const [a, b] of losses) expect(b).toBe(a);
    for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), `${precision} ${pd.path}`).toEqual(Array.from(stores[0].get(pd.path)!));
    // with the gelu outputs recomputed in the backward and paired with their gradients (grad_fwd.ts): f(x) after the sums
    const r = pairGradWithForward(rematerialize(f, ['unary']));
    const both = r.graph.nodes.filter((n) => n.attrs.sum_out === true && n.attrs.fwd_out === true);
    expect(both).toHaveLength(2);
    for (const n of both) expect(n.outputs.map((id) => r.graph.values[id].name.replace(/^.*\.(fc\.bias\.grad|gelu\.out\.remat|fc\.out)$/, '$1'))).toEqual(['fc.out', 'fc.bias.grad', 'gelu.out.remat']);
    const twin = runTwin(model.params, unfused, r, 5, 2);
    for (const [a, b] of twin.losses) expect(b).toBe(a);
    // verify.ts: sum_out on a unary_grad needs its f32 [D] sums as output 1
    const bad = problemsAfter(f);
    const i = f.graph.nodes.indexOf(sums[0]);
    expect(bad((p) => { p.graph.values[p.graph.nodes[i].outputs[1]].shape = [3]; })).toMatch(/the column sums are f32\[3\], expected f32\[\d+\]/);
    expect(bad((p) => { p.graph.nodes[i].outputs.pop(); })).toMatch(/outputs/);
  }
});

it("rule 15 on a small bf16 GPT's train step (each attention gradient with its in_proj bias sum, which rule 8 takes without it): the reference gives the same loss and update bit for bit", () => {
  const base = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  const caps = (precision: 'fp32' | 'bf16'): FusionCaps => ({ ...(precision === 'bf16' ? { casts: { reads: HALF_IO_OPS, stores: HALF_IO_OPS } } : {}),
    attnGradBiasSum: { dtypes: ['bf16', 'f16'] }, matmulBiasGrad: true });
  const aSums = (p: Program) => p.graph.nodes.filter((n) => n.attrs.a_sums === true).length;
  const sumsOf = (p: Program) => p.graph.nodes.filter((n) => n.op === 'attention_qkv_grad' && n.attrs.sum_out === true);
  // fp32: dqkv is not of the caps' dtypes, rule 8 keeps the sums
  const f32 = buildPrograms(base, { batch: 2 }).train_step;
  expect(sumsOf(fused(f32, caps('fp32')))).toHaveLength(0);
  const model = { ...base, train: { ...base.train, precision: 'bf16' as const } };
  const unfused = buildPrograms(model, { batch: 2 }).train_step;
  const f = fused(unfused, caps('bf16'));
  const sums = sumsOf(f);
  expect(sums).toHaveLength(2);
  for (const n of sums) {
    expect(f.graph.values[n.outputs[0]].dtype).toBe('bf16');
    expect(f.graph.values[n.outputs[1]].name).toMatch(/in_proj_bias\.grad$/);
    expect(f.graph.values[n.outputs[1]].shape).toEqual([48]);
  }
  const { attnGradBiasSum: _, ...rest } = caps('bf16');
  expect(aSums(f)).toBe(aSums(fused(unfused, rest)) - 2);
  expect(fuseProgram(f, caps('bf16'))).toEqual(f);
  const { losses, stores } = runTwin(model.params, unfused, f, 5, 2);
  for (const [a, b] of losses) expect(b).toBe(a);
  for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
  // verify.ts: its sums are f32 [3C] as output 1
  const bad = problemsAfter(f);
  const i = f.graph.nodes.indexOf(sums[0]);
  expect(bad((p) => { p.graph.values[p.graph.nodes[i].outputs[1]].shape = [16]; })).toMatch(/the column sums are f32\[16\], expected f32\[48\]/);
  expect(bad((p) => { p.graph.nodes[i].outputs.pop(); })).toMatch(/outputs/);
});

it('MPSC_CUDA_FUSE_OFF switches rules 5, 6, 7, 8 (and remat) off one by one; an unknown name is a user error', async () => {
  const { cudaFusions, cudaFuseOff } = await import('../compiler/codegen-cuda/fusions.js');
  const model = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  const count = (off: Parameters<typeof cudaFusions>[0]) => {
    const g = fuseProgram(buildPrograms(model, { batch: 2 }).train_step, cudaFusions(off)).graph;
    return [g.nodes.filter((n) => n.attrs.add_in).length, g.nodes.filter((n) => n.attrs.add_out).length, g.nodes.filter((n) => n.attrs.sum_out).length,
      g.nodes.filter((n) => n.attrs.a_sums).length];
  };
  // rule 8 takes the bias gradients rule 7 left (in_proj and fc: the layernorm_grads took out_proj's and proj's but the last block's proj)
  const [, , ln, mm] = count([]);
  expect(count([])).toEqual([5, 4, ln, mm]);
  expect(ln + mm).toBe(8);
  expect(count(['add_ln'])).toEqual([0, 4, ln, mm]);
  expect(count(['bias_sum'])).toEqual([5, 4, 0, 8]);
  expect(count(['grad_add'])).toEqual([5, 0, 0, 8]);
  expect(count(['bias_grad'])).toEqual([5, 4, ln, 0]);
  expect(cudaFusions(['remat']).remat).toBeUndefined();
  // rule 11 (a bf16 step's casts: the test above) on by default, off by ln_half
  expect([cudaFusions([]).addLayernorm?.halfOut, cudaFusions(['ln_half']).addLayernorm?.halfOut]).toEqual([true, false]);
  expect(cudaFuseOff(' remat, bias_sum ')).toEqual(['remat', 'bias_sum']);
  expect(() => cudaFuseOff('remat,nope')).toThrow(/unknown fusion 'nope'/);
});

/**
 * p fused with caps is `op` then the unary reading its output 0 (rules 9, 10: the folded node is gone), `op` writing
 * `outs`; the three values both programs have are equal in the reference; fusing again changes nothing. Returns `op`'s node.
 */
function foldedInto(p: Program, caps: FusionCaps, op: string, outs: string[]): Node {
  const f = fused(p, caps);
  expect(opsOf(f)).toEqual([op, 'unary']);
  const n = nodeOf(f, op);
  expect(n.outputs.map((id) => f.graph.values[id].name)).toEqual(outs);
  expect(sameValues(p, f)).toBe(3);
  expect(fuseProgram(f, caps)).toEqual(f);
  return n;
}

describe('rule 9: a conv bias gradient into the global-avgpool gradient (c_sums)', () => {
  const CAPS: FusionCaps = { poolGradRelu: { globalAvgpool: true, maxpool2x2: false }, poolGradBiasSum: true };
  /** dy [2, 3, 1, 1] -> global_avgpool_grad -> (relu-grad by a mask) -> sum_to over `axes` (default N, H, W) */
  function poolAndBias(opts: { relu?: boolean; axes?: number[]; output?: boolean } = {}) {
    const b = new GraphBuilder();
    const xs = [2, 3, 4, 5];
    const dy = b.value('dy', 'f32', [2, 3, 1, 1], 'input'), mask = b.value('mask', 'f32', xs, 'input');
    const [g] = b.emit('global_avgpool_grad', [dy], [{ name: 'g', shape: xs }], { x_shape: xs });
    const [dx] = opts.relu === false ? [g] : b.emit('unary_grad', [g, mask], [{ name: 'dx', shape: xs }], { fn: 'relu' });
    const axes = opts.axes ?? [0, 2, 3];
    const sumShape = xs.filter((_, i) => !axes.includes(i));
    const [db] = b.emit('sum_to', [dx], [{ name: 'db', shape: sumShape }], { shape: sumShape, axes });
    const [next] = b.emit('unary', [dx], [{ name: 'next', shape: xs }], { fn: 'neg' });
    return program(b, opts.relu === false ? [dy] : [dy, mask], opts.output ? [next, db, dx] : [next, db]);
  }

  it('the pool gradient (with or without its folded relu-grad) writes the channel sums as its last output; the sum_to is gone; same values', () => {
    for (const relu of [true, false]) {
      const p = poolAndBias({ relu });
      const G = foldedInto(p, CAPS, 'global_avgpool_grad', [relu ? 'dx' : 'g', 'db']);
      expect(G.attrs).toEqual({ x_shape: [2, 3, 4, 5], c_sums: true, ...(relu ? { relu_grad: true } : {}) });
      expect(opsOf(fused(p, { poolGradRelu: CAPS.poolGradRelu }))).toContain('sum_to');
    }
    // a pool gradient that is a program output still writes it (and the sums)
    expect(opsOf(fused(poolAndBias({ output: true }), CAPS))).not.toContain('sum_to');
  });

  it('also into a conv2d_grad_input (caps.convGradBiasSum; not one with an epilogue)', () => {
    const b = new GraphBuilder();
    const dy = b.value('dy', 'f32', [2, 4, 5, 6], 'input'), w = b.value('w', 'f32', [4, 3, 3, 3], 'param');
    const conv = { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1, x_shape: [2, 3, 5, 6] };
    const [dx] = b.emit('conv2d_grad_input', [dy, w], [{ name: 'dx', shape: [2, 3, 5, 6] }], conv);
    const [db] = b.emit('sum_to', [dx], [{ name: 'db', shape: [3] }], { shape: [3], axes: [0, 2, 3] });
    const [next] = b.emit('unary', [dx], [{ name: 'next', shape: [2, 3, 5, 6] }], { fn: 'neg' });
    const p = program(b, [dy], [next, db]);
    const G = foldedInto(p, { convGradBiasSum: true }, 'conv2d_grad_input', ['dx', 'db']);
    expect(G.attrs.c_sums).toBe(true);
    expect(opsOf(fused(p, CAPS))).toContain('sum_to');
    // a gradient carrying a unary epilogue (dx = f(the product)) is left alone
    const e: Program = JSON.parse(JSON.stringify(p));
    nodeOf(e, 'conv2d_grad_input').attrs.epilogue = 'neg';
    expect(opsOf(fused(e, { convGradBiasSum: true }))).toContain('sum_to');
  });

  it('not for a sum over other dims; verify.ts checks c_sums', () => {
    expect(opsOf(fused(poolAndBias({ axes: [0, 1, 2] }), CAPS))).toContain('sum_to');
    expect(opsOf(fused(poolAndBias({ axes: [0] }), CAPS))).toContain('sum_to');
    const f = fused(poolAndBias(), CAPS);
    const bad = problemsAfter(f);
    expect(bad((p) => (nodeOf(p, 'unary').attrs.c_sums = true))).toMatch(/c_sums is only `true` on global_avgpool_grad/);
    expect(bad((p) => (p.graph.values[nodeOf(p, 'global_avgpool_grad').outputs[1]].shape = [2]))).toMatch(/channel sums are f32\[2\], expected f32\[C\]/);
  });
});

describe('rule 10: a global average pool into the conv2d before it (pool_out)', () => {
  const CAPS: FusionCaps = { epilogue: { ops: ['conv2d'], fns: ['relu'], gradReaders: true }, convPool: true };
  /** conv2d [2, 3, 5, 6] -> (relu) -> global_avgpool, and y (or relu's output) read again after the pool */
  function convPool(opts: { relu?: boolean; reluIn?: boolean } = {}) {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 3, 5, 6], 'input'), w = b.value('w', 'f32', [4, 3, 3, 3], 'param');
    const ys = [2, 4, 5, 6];
    const [y] = b.emit('conv2d', [x, w], [{ name: 'y', shape: ys }], { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 });
    const [z] = opts.relu === false ? [y] : b.emit('unary', [y], [{ name: 'z', shape: ys }], { fn: 'relu' });
    const [p] = b.emit('global_avgpool', [z], [{ name: 'p', shape: [2, 4, 1, 1] }], opts.reluIn ? { relu_in: true } : {});
    const [after] = b.emit('unary', [z], [{ name: 'after', shape: ys }], { fn: 'neg' });
    return program(b, [x], [p, after]);
  }

  it('the conv (with or without its relu epilogue) writes the pooled output last; the pool is gone; same values', () => {
    for (const relu of [true, false]) {
      const p = convPool({ relu });
      const C = foldedInto(p, CAPS, 'conv2d', [relu ? 'z' : 'y', 'p']);
      expect(C.attrs.pool_out).toBe(true);
      expect(C.attrs.epilogue).toBe(relu ? 'relu' : undefined);
      expect(opsOf(fused(p, { epilogue: CAPS.epilogue }))).toContain('global_avgpool');
    }
  });

  it('not for a pool with relu_in; verify.ts checks pool_out', () => {
    expect(opsOf(fused(convPool({ relu: false, reluIn: true }), CAPS))).toContain('global_avgpool');
    const bad = problemsAfter(fused(convPool(), CAPS));
    expect(bad((p) => (nodeOf(p, 'unary').attrs.pool_out = true))).toMatch(/pool_out is only `true` on conv2d/);
    expect(bad((p) => (p.graph.values[nodeOf(p, 'conv2d').outputs[1]].shape = [2, 4]))).toMatch(/pooled output is f32\[2,4\], expected f32\[N, C, 1, 1\]/);
  });
});

it("rules 9, 10 and MPSC_CUDA_FUSE_OFF=pool_bias / conv_bias / conv_pool on the seed CNN's train step (both bias gradients, the pool): the reference gives the same loss and update bit for bit", async () => {
  const { cudaFusions } = await import('../compiler/codegen-cuda/fusions.js');
  const { checkFile } = await import('../compiler/check/index.js');
  const model = checkFile(new URL('../specs/seed_cnn.model', import.meta.url).pathname);
  const unfused = buildPrograms(model, { batch: 2 }).train_step;
  const f = fused(unfused, cudaFusions([]));
  const count = (p: Program) => [p.graph.nodes.filter((n) => n.attrs.c_sums === true).length, p.graph.nodes.filter((n) => n.attrs.pool_out === true).length];
  // both bias gradients (conv 2's into the pool gradient, conv 1's into conv 2's input gradient), the pool into conv 2
  expect(count(f)).toEqual([2, 1]);
  expect(f.graph.nodes.some((n) => n.op === 'global_avgpool' || n.op === 'sum_to')).toBe(false);
  expect(f.graph.nodes.filter((n) => n.attrs.c_sums === true).map((n) => n.op)).toEqual(['global_avgpool_grad', 'conv2d_grad_input']);
  expect(count(fused(unfused, cudaFusions(['pool_bias'])))).toEqual([1, 1]);
  expect(count(fused(unfused, cudaFusions(['conv_bias'])))).toEqual([1, 1]);
  expect(count(fused(unfused, cudaFusions(['conv_pool'])))).toEqual([2, 0]);
  // one step (the loss, then every parameter and Adam moment after the update): the float64 interpreter's 64x64
  // convolutions cost ~6 s per program and step on the 2-core CI machine
  const { losses, stores } = runTwin(model.params, unfused, f, 3, 1);
  for (const [a, b] of losses) expect(b).toBe(a);
  for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
});

describe('rules 12, 13: a unary gradient into the small product writing its g (grad_fn); a unary into the small product before it, the product kept (pre_out)', () => {
  const CAPS: FusionCaps = { smallEpilogues: { fns: ['gelu', 'tanh'], maxMacs: 1000 } };
  /** x [4, 6] -> linear (w [5, 6]) -> y -> fn -> z; the backward: dz -> matmul (dz' [4, 5] . w2 [5, 5]) -> g -> unary_grad(g, y) */
  function mlp(fn = 'gelu', opts: { gReaders?: number; macs?: number } = {}) {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [4, 6], 'input'), w = b.value('w', 'f32', [5, 6], 'param'), w2 = b.value('w2', 'f32', [5, 5], 'param');
    const [y] = b.emit('linear', [x, w], [{ name: 'y', shape: [4, 5] }]);
    const [z] = b.emit('unary', [y], [{ name: 'z', shape: [4, 5] }], { fn });
    const [dz] = b.emit('unary', [z], [{ name: 'dz', shape: [4, 5] }], { fn: 'neg' });
    const [g] = b.emit('matmul', [dz, w2], [{ name: 'g', shape: [4, 5], kind: 'grad' }], { transA: false, transB: false });
    const [dy] = b.emit('unary_grad', [g, y], [{ name: 'dy', shape: [4, 5], kind: 'grad' }], { fn });
    const outs = [dy];
    if (opts.gReaders) outs.push(b.emit('unary', [g], [{ name: 'extra', shape: [4, 5] }], { fn: 'neg' })[0]);
    return program(b, [x], outs);
  }

  it('the gradient goes into the matmul (x last), the unary into the linear (y kept last); same values', () => {
    const p = mlp();
    const f = fused(p, CAPS);
    expect(opsOf(f)).not.toContain('unary_grad');
    const M = nodeOf(f, 'matmul'), L = nodeOf(f, 'linear');
    expect(M.attrs.grad_fn).toBe('gelu');
    expect(f.graph.values[M.inputs[M.inputs.length - 1]].name).toBe('y');
    expect(L.attrs.epilogue).toBe('gelu');
    expect(L.attrs.pre_out).toBe(true);
    expect(L.outputs.map((id) => f.graph.values[id].name)).toEqual(['z', 'y']);
    // the reference runs the fused nodes as the original ones in sequence: every value both graphs have, the same
    expect(sameValues(p, f)).toBeGreaterThan(3);
  });

  it('not past maxMacs, for fns outside the caps, or when g has another reader; verify.ts checks grad_fn and pre_out', () => {
    expect(opsOf(fused(mlp(), { smallEpilogues: { fns: ['gelu'], maxMacs: 99 } }))).toEqual(opsOf(mlp()));
    expect(opsOf(fused(mlp('sigmoid'), CAPS))).toEqual(opsOf(mlp('sigmoid')));
    expect(opsOf(fused(mlp('gelu', { gReaders: 1 }), CAPS))).toContain('unary_grad');
    const bad = problemsAfter(fused(mlp(), CAPS));
    expect(bad((p) => (nodeOf(p, 'linear').attrs.grad_fn = 'gelu'))).toMatch(/grad_fn is only a unary fn's name, on matmul/);
    expect(bad((p) => delete nodeOf(p, 'linear').attrs.epilogue)).toMatch(/pre_out is only `true` with an epilogue, on linear, matmul/);
    expect(bad((p) => (p.graph.values[nodeOf(p, 'linear').outputs[1]].shape = [5, 4]))).toMatch(/product before the epilogue is f32\[5,4\], expected f32\[4,5\]/);
  });

  it('preOut false (the CPU\'s caps): rule 12 alone, the unary stays its own node', () => {
    const f = fused(mlp('relu'), { smallEpilogues: { fns: ['relu'], maxMacs: Number.MAX_SAFE_INTEGER, preOut: false } });
    expect(opsOf(f)).not.toContain('unary_grad');
    expect(nodeOf(f, 'matmul').attrs.grad_fn).toBe('relu');
    expect(opsOf(f)).toContain('unary');
    expect(nodeOf(f, 'linear').attrs.pre_out).toBeUndefined();
  });
});

it("rules 12, 13 (on by default; MPSC_CUDA_SMALL_EPI=0 switches them off) and MPSC_CUDA_FUSE_OFF=small_epi on char_gpt's train step (every layer's gelu and its gradient): the reference gives the same loss and update bit for bit", async () => {
  const { cudaFusions } = await import('../compiler/codegen-cuda/fusions.js');
  const { checkFile } = await import('../compiler/check/index.js');
  const model = checkFile(new URL('../specs/char_gpt.model', import.meta.url).pathname);
  const unfused = buildPrograms(model, { batch: 2 }).train_step;
  expect(withEnv('MPSC_CUDA_SMALL_EPI', '0', () => cudaFusions([])).smallEpilogues).toBeUndefined();
  const f = fused(unfused, withEnv('MPSC_CUDA_SMALL_EPI', undefined, () => cudaFusions([]))); // on by default
  const count = (p: Program) => [p.graph.nodes.filter((n) => n.attrs.grad_fn === 'gelu').length, p.graph.nodes.filter((n) => n.attrs.pre_out === true).length];
  const layers = unfused.graph.nodes.filter((n) => n.op === 'unary' && n.attrs.fn === 'gelu').length;
  expect(layers).toBeGreaterThan(1);
  expect(count(f)).toEqual([layers, layers]);
  expect(count(fused(unfused, cudaFusions(['small_epi'])))).toEqual([0, 0]);
  const { losses, stores } = runTwin(model.params, unfused, f, 3, 2);
  for (const [a, b] of losses) expect(b).toBe(a);
  for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
});

it("rule 16 (caps hoistParamCasts; MPSC_CUDA_FUSE_OFF=cast_hoist) on a small bf16 GPT: every parameter's bf16 copy before the first other node, the same losses and updates bit for bit, and the CUDA build launches the copies as one kernel", async () => {
  const { cudaFusions } = await import('../compiler/codegen-cuda/fusions.js');
  const { buildCuda } = await import('../compiler/codegen-cuda/index.js');
  const base = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
  const model = { ...base, train: { ...base.train, precision: 'bf16' as const } };
  const set = buildPrograms(model, { batch: 2 });
  const isCopy = (p: Program, n: Node) => n.op === 'cast' && p.graph.values[n.inputs[0]].kind === 'param' && p.graph.values[n.outputs[0]].dtype === 'bf16';
  const copies = (p: Program) => p.graph.nodes.flatMap((n, i) => (isCopy(p, n) ? [i] : []));
  const firstOther = (p: Program) => p.graph.nodes.findIndex((n) => !isCopy(p, n));
  const names = (p: Program) => copies(p).map((i) => p.graph.values[p.graph.nodes[i].outputs[0]].name);
  expect(cudaFusions([]).hoistParamCasts).toBe(true);
  expect(cudaFusions(['cast_hoist']).hoistParamCasts).toBeUndefined();
  const on: Record<string, Program> = {};
  for (const name of ['train_step', 'eval'] as const) {
    const p = (on[name] = fused(set[name], cudaFusions([])));
    const off = fused(set[name], cudaFusions(['cast_hoist']));
    // the 2 blocks' 4 linears (weight and bias each) and the head's weight: 17 copies, first, in their order without the hoist
    expect(copies(p)).toEqual([...Array(17).keys()]);
    expect(firstOther(p)).toBe(17);
    expect(names(p)).toEqual(names(off));
    // without it, each copy before its first reader, layer by layer
    expect(Math.max(...copies(off))).toBeGreaterThan(firstOther(off));
    // the same nodes otherwise, in the same order
    expect(p.graph.nodes.filter((n) => !isCopy(p, n)).map((n) => n.op)).toEqual(off.graph.nodes.filter((n) => !isCopy(off, n)).map((n) => n.op));
    expect(fuseProgram(p, cudaFusions([]))).toEqual(p);
    // the copies live from the start: the toy's planned arena may grow, by at most the copies' bytes
    const bytes = copies(p).reduce((s, i) => s + 2 * p.graph.values[p.graph.nodes[i].outputs[0]].shape.reduce((a, b) => a * b, 1), 0);
    expect(planMemory(p).arenaBytes).toBeLessThanOrEqual(planMemory(off).arenaBytes + bytes + 64 * 17);
  }
  // the updates come after every copy (the optimizer's nodes end the step)
  const t = on.train_step.graph.nodes;
  expect(t.findIndex((n) => n.op === 'adam_update' || n.op === 'sgd_update')).toBeGreaterThan(16);
  const unfused = set.train_step;
  const plain = fused(unfused, cudaFusions(['cast_hoist']));
  for (const [a, b] of [[unfused, on.train_step], [plain, on.train_step]]) {
    const { losses, stores } = runTwin(model.params, a, b, 5, 2);
    for (const [x, y] of losses) expect(y).toBe(x);
    for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
  }
  // CUDA: merge.ts runs the consecutive copies as one launch (without the hoist, several)
  const progs = [set.train_step, set.eval];
  const art = buildCuda(progs, 'gpt_toy_bf16');
  const artOff = withEnv('MPSC_CUDA_FUSE_OFF', 'cast_hoist', () => buildCuda(progs, 'gpt_toy_bf16'));
  const want = names(on.train_step);
  /** the kernels of program i whose text names a copy as its output (a merged kernel's segments carry their kernels' labels) */
  const holders = (a: typeof art, i: number) => new Set(want.flatMap((c) => a.lowered[i].kernels.filter((k) => [' ', '\n'].some((e) => `${k.label}\n${k.body}`.includes(`-> ${c}${e}`))).map((k) => k.name)));
  for (const i of [0, 1]) {
    const h = [...holders(art, i)];
    expect(h).toHaveLength(1);
    expect(art.lowered[i].kernels.find((k) => k.name === h[0])!.label).toMatch(/^\d+ element-wise kernels in one launch \(cast/);
    expect(holders(artOff, i).size).toBeGreaterThan(1);
    expect(art.plan.programs[i].kernels).toBeLessThan(artOff.plan.programs[i].kernels);
  }
});

it('rule 16 leaves a copy of a parameter after a node that updates it where it is', () => {
  // x -> relu; w's update (sgd_update mutates w); then the copies of w and v: v's moves first, w's stays after the update
  const b = new GraphBuilder();
  const x = b.value('x', 'f32', [2, 4], 'input');
  const w = b.value('w', 'f32', [3, 4], 'param');
  const v = b.value('v', 'f32', [3, 4], 'param');
  const [r] = b.emit('unary', [x], [{ name: 'r', shape: [2, 4] }], { fn: 'relu' });
  const [gw] = b.emit('unary', [w], [{ name: 'gw', shape: [3, 4] }], { fn: 'neg' });
  b.emit('sgd_update', [w, gw, -1, -1], [], { momentum: 0, nesterov: false, weight_decay: 0 });
  const [wh] = b.emit('cast', [w], [{ name: 'w.bf16', dtype: 'bf16', shape: [3, 4] }], { to: 'bf16' });
  const [vh] = b.emit('cast', [v], [{ name: 'v.bf16', dtype: 'bf16', shape: [3, 4] }], { to: 'bf16' });
  const [wf] = b.emit('cast', [wh], [{ name: 'wf', shape: [3, 4] }], { to: 'f32' });
  const [vf] = b.emit('cast', [vh], [{ name: 'vf', shape: [3, 4] }], { to: 'f32' });
  const p = program(b, [x], [r, wf, vf]);
  expect(graphProblems(p.graph)).toEqual([]);
  const f = fused(p, { hoistParamCasts: true });
  const label = (q: Program) => q.graph.nodes.map((n) => `${n.op}:${q.graph.values[n.outputs[0]]?.name ?? ''}`);
  expect(label(f)).toEqual(['cast:v.bf16', 'unary:r', 'unary:gw', 'sgd_update:', 'cast:w.bf16', 'cast:wf', 'cast:vf']);
  expect(fuseProgram(f, { hoistParamCasts: true })).toEqual(f);
  // without the caps, nothing moves
  expect(label(fused(p, {}))).toEqual(label(p));
});
