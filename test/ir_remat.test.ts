/**
 * remat.ts: cheap forward values (unary, layernorm) recomputed right before their first backward
 * reader when their inputs stay alive anyway. Checked on a small GPT (gelu, layernorm) at fp32 and
 * bf16 (CUDA's folded casts): which nodes get a copy, that backward readers read the copy, that the
 * copy's inputs were alive there anyway, that the reference interpreter gives the same loss and
 * update bit for bit with and without it, and that the planned arena shrinks. And the caps' rule
 * (programs.ts fuseForBackend): copies only for a program planned at `fromPeakBytes` or more
 * without them; CUDA's threshold (4 GiB) leaves the toy GPT without.
 */
import { describe, expect, it } from 'vitest';
import { gptModel } from '../bench/gpt_tiny.js';
import { cudaFusions, REMAT_FROM_PEAK_BYTES, REMAT_LN_FROM_PEAK_BYTES } from '../compiler/codegen-cuda/fusions.js';
import type { FusionCaps } from '../compiler/ir/fuse.js';
import { fuseProgram } from '../compiler/ir/fuse.js';
import { planMemory, verifyPlan } from '../compiler/ir/memory_plan.js';
import { opDef } from '../compiler/ir/ops.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { rematerialize } from '../compiler/ir/remat.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { runTwin } from './ir_helpers.js';

const base = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
/** CUDA's caps with remat from any peak (the toy GPT is far below CUDA's threshold) */
const rematAlways: FusionCaps = { ...cudaFusions(['grad_fwd']), remat: { fromPeakBytes: 0 } };
const rematCount = (p: { graph: { values: { name: string }[] } }) => p.graph.values.filter((v) => v.name.endsWith('.remat')).length;

for (const precision of ['fp32', 'bf16'] as const) {
  describe(`remat at ${precision}`, () => {
    const model = { ...base, train: { ...base.train, precision } };
    const set = buildPrograms(model, { batch: 2, fusions: rematAlways });
    // the same train step fused, without remat: the set's step is fuse + remat of the unfused one
    const unfused = buildPrograms(model, { batch: 2 });
    const plain = fuseProgram(unfused.train_step, cudaFusions(['small_epi'])); // as programs.ts fuses a program it recomputes
    const withRemat = rematerialize(plain);
    const g = withRemat.graph;
    const bw = g.nodes.findIndex((n) => opDef(n.op).category === 'backward');

    it('copies each gelu and layernorm read in the backward, before its first backward reader; readers there read the copy', () => {
      expect(graphProblems(g)).toEqual([]);
      const copies = g.nodes.filter((n) => n.outputs.some((o) => g.values[o].name.endsWith('.remat')));
      const kinds = copies.map((n) => (n.op === 'unary' ? String(n.attrs.fn) : n.op));
      expect(kinds.filter((k) => k === 'gelu').length).toBe(2); // one per block
      expect(kinds.filter((k) => k === 'layernorm').length).toBeGreaterThanOrEqual(4); // ln1, ln2 per block
      // CUDA folds each block's residual add into the layernorm after it: those are copied too
      expect(plain.graph.nodes.filter((n) => n.attrs.add_in === true).length).toBeGreaterThanOrEqual(4);
      for (const c of copies) {
        expect(c.id, `${c.op} copy`).toBeGreaterThanOrEqual(bw);
        const origName = g.values[c.outputs[0]].name.replace(/\.remat$/, '');
        const orig = g.nodes.find((n) => n.id < bw && n.op === c.op && g.values[n.outputs[0]].name === origName)!;
        expect(orig, `the forward node of ${g.values[c.outputs[0]].name}`).toBeDefined();
        // the same computation: a layernorm with a folded residual add (fuse.ts rule 5) is copied as the plain layernorm of its sum
        const { add_in: addIn, ...plain } = orig.attrs;
        expect(c.attrs).toEqual(plain);
        expect(c.inputs).toEqual(addIn === true ? [orig.outputs[3], ...orig.inputs.slice(1, -1)] : orig.inputs);
        expect(c.outputs.length).toBe(addIn === true ? 3 : orig.outputs.length);
        // no node after the copy reads the forward node's outputs; each copy input is read again later
        for (const n of g.nodes.slice(c.id + 1)) for (const o of orig.outputs.slice(0, c.outputs.length)) expect(n.inputs.includes(o), `${n.op} reads ${g.values[o].name}`).toBe(false);
        for (const id of c.inputs) {
          const v = g.values[id];
          if (id < 0 || ['param', 'input'].includes(v.kind)) continue;
          expect(g.nodes.some((n) => n.id > c.id && n.inputs.includes(id)), `${v.name} read after the copy`).toBe(true);
        }
      }
      // the set built for CUDA is exactly this
      expect(JSON.stringify(set.train_step.graph)).toBe(JSON.stringify(g));
    });

    it('the reference interpreter gives the same loss and update bit for bit; the originals die in the forward', () => {
      const { losses, stores } = runTwin(model.params, plain, withRemat, 5, 1);
      expect(losses[0][1]).toBe(losses[0][0]);
      for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
      const planned = { ...withRemat, plan: planMemory(withRemat) };
      expect(verifyPlan(planned)).toEqual([]);
      expect(planned.plan.arenaBytes).toBeLessThanOrEqual(planMemory(plain).arenaBytes);
      // the copied nodes' forward outputs are dead before the backward starts (what frees their memory)
      for (const c of g.nodes.filter((n) => n.outputs.some((o) => g.values[o].name.endsWith('.remat')))) {
        for (const o of c.outputs) {
          const orig = g.values.findIndex((v) => v.name === g.values[o].name.replace(/\.remat$/, ''));
          const last = Math.max(...g.nodes.filter((n) => n.inputs.includes(orig)).map((n) => n.id));
          expect(last, g.values[orig].name).toBeLessThan(bw);
        }
      }
    });
  });
}

it('the caps recompute only a program planned at fromPeakBytes or more without the copies; CUDA\'s 4 GiB leaves small ones alone', () => {
  const peak = planMemory(fuseProgram(buildPrograms(base, { batch: 2 }).train_step, cudaFusions(['small_epi']))).peakBytes; // remat decides on it
  const at = (fromPeakBytes: number) => rematCount(buildPrograms(base, { batch: 2, fusions: { ...cudaFusions(), remat: { fromPeakBytes } } }).train_step);
  expect(at(peak)).toBeGreaterThan(0);
  expect(at(peak + 1)).toBe(0);
  expect(REMAT_FROM_PEAK_BYTES).toBe(4 * 2 ** 30);
  expect(peak).toBeLessThan(REMAT_FROM_PEAK_BYTES);
  expect(rematCount(buildPrograms(base, { batch: 2, fusions: cudaFusions() }).train_step)).toBe(0);
});

it('remat is idempotent and leaves a program without a backward as it is', () => {
  const set = buildPrograms(base, { batch: 2, fusions: rematAlways });
  expect(rematerialize(set.train_step)).toBe(set.train_step);
  expect(rematerialize(set.eval)).toBe(set.eval);
});

it('the caps may name fewer ops: MPSC_CUDA_FUSE_OFF=remat_unary copies the layernorms only (no gelu copies), remat_ln the gelus only', () => {
  const later = { ops: ['layernorm'], fromPeakBytes: REMAT_LN_FROM_PEAK_BYTES };
  const caps = cudaFusions(['remat_unary']);
  expect(caps.remat).toEqual({ fromPeakBytes: REMAT_FROM_PEAK_BYTES, ops: ['layernorm'], later });
  expect(cudaFusions(['remat_ln']).remat).toEqual({ fromPeakBytes: REMAT_FROM_PEAK_BYTES, ops: ['unary'] });
  expect(cudaFusions(['remat_ln', 'remat_unary']).remat).toBeUndefined();
  const step = buildPrograms(base, { batch: 2, fusions: { ...caps, remat: { fromPeakBytes: 0, ops: caps.remat!.ops } } }).train_step;
  const copies = step.graph.nodes.filter((n) => n.outputs.some((o) => step.graph.values[o].name.endsWith('.remat')));
  expect(copies.length).toBeGreaterThanOrEqual(4);
  expect(copies.every((n) => n.op === 'layernorm')).toBe(true);
  const all = buildPrograms(base, { batch: 2, fusions: rematAlways }).train_step;
  expect(rematCount(all)).toBeGreaterThan(rematCount(step));
});

it("the `later` ops (CUDA: layernorm, from 12 GiB) are copied only when the step with the other copies still plans their peak", () => {
  const caps = cudaFusions(['grad_fwd']);
  expect(caps.remat!.later).toEqual({ ops: ['layernorm'], fromPeakBytes: REMAT_LN_FROM_PEAK_BYTES });
  const copied = (laterFrom: number) => {
    const step = buildPrograms(base, { batch: 2, fusions: { ...caps, remat: { fromPeakBytes: 0, later: { ops: ['layernorm'], fromPeakBytes: laterFrom } } } }).train_step;
    const ops = step.graph.nodes.filter((n) => n.outputs.some((o) => step.graph.values[o].name.endsWith('.remat'))).map((n) => n.op);
    return { step, ops: [...new Set(ops)].sort() };
  };
  // the toy step plans far below 12 GiB: the gelu copies only, as the first tier gives them
  const gelus = copied(REMAT_LN_FROM_PEAK_BYTES);
  expect(gelus.ops).toEqual(['unary']);
  // its peak with the gelu copies reaches the later tier's bound exactly: the layernorms too, as remat of every op
  const both = copied(gelus.step.plan!.peakBytes);
  expect(both.ops).toEqual(['layernorm', 'unary']);
  expect(rematCount(both.step)).toBe(rematCount(buildPrograms(base, { batch: 2, fusions: rematAlways }).train_step));
  expect(copied(gelus.step.plan!.peakBytes + 1).ops).toEqual(['unary']);
});
