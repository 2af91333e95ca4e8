/**
 * grad_fwd.ts: a unary recomputed in the backward (remat.ts) and the unary_grad of the same fn over the same x
 * become one unary_grad with `fwd_out` (CUDA caps `gradWithForward`, programs.ts fuseForBackend after remat).
 * Checked on a small GPT (gelu) with remat from any peak, fp32 and bf16: which nodes pair, where the pair sits,
 * verify.ts's checks of the attr, and that the reference interpreter gives the same loss and update bit for bit.
 */
import { describe, expect, it } from 'vitest';
import { gptModel } from '../bench/gpt_tiny.js';
import { cudaFusions } from '../compiler/codegen-cuda/fusions.js';
import { fuseProgram } from '../compiler/ir/fuse.js';
import { pairGradWithForward } from '../compiler/ir/grad_fwd.js';
import type { Program } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { rematerialize } from '../compiler/ir/remat.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { runTwin } from './ir_helpers.js';

const base = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);

for (const precision of ['fp32', 'bf16'] as const) {
  describe(`grad_fwd at ${precision}`, () => {
    const model = { ...base, train: { ...base.train, precision } };
    const plain = fuseProgram(buildPrograms(model, { batch: 2 }).train_step, cudaFusions(['small_epi'])); // as programs.ts fuses a program it recomputes
    const copies = rematerialize(plain);
    const paired = pairGradWithForward(copies);
    const g = paired.graph;

    it('each gelu copy and gelu\'s gradient are one unary_grad writing dx and the copy, at the copy\'s place', () => {
      expect(graphProblems(g)).toEqual([]);
      const pairs = g.nodes.filter((n) => n.attrs.fwd_out === true);
      expect(pairs).toHaveLength(2); // one per block
      for (const n of pairs) {
        expect(n.op).toBe('unary_grad');
        expect(n.attrs).toEqual({ fn: 'gelu', fwd_out: true });
        expect(g.values[n.outputs[1]].name).toMatch(/gelu\d*\.out\.remat$/);
        // the copy's readers (the proj weight gradient) and the gradient's come after it
        for (const o of n.outputs) for (const r of g.nodes.filter((m) => m.inputs.includes(o))) expect(r.id).toBeGreaterThan(n.id);
      }
      expect(g.nodes.length).toBe(copies.graph.nodes.length - 2);
      expect(g.nodes.filter((n) => n.op === 'unary' && n.attrs.fn === 'gelu')).toHaveLength(2); // the forward ones
      // idempotent; nothing to pair without the copies (the forward gelu's dy is written later)
      expect(pairGradWithForward(paired)).toBe(paired);
      expect(pairGradWithForward(plain)).toBe(plain);
    });

    it('the reference interpreter gives the same loss and update bit for bit', () => {
      const { losses, stores } = runTwin(model.params, plain, paired, 5, 1);
      expect(losses[0][1]).toBe(losses[0][0]);
      for (const pd of model.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
    });

    it('verify.ts: fwd_out only on unary_grad, with the forward value of x\'s shape as the extra last output', () => {
      const bad = (edit: (p: Program) => void) => {
        const copy: Program = JSON.parse(JSON.stringify(paired));
        edit(copy);
        return graphProblems(copy.graph).join('\n');
      };
      const pair = (p: Program) => p.graph.nodes.find((n) => n.attrs.fwd_out === true)!;
      expect(bad((p) => (p.graph.nodes.find((n) => n.op === 'unary')!.attrs.fwd_out = true))).toMatch(/fwd_out is only `true` on unary_grad/);
      expect(bad((p) => pair(p).outputs.pop())).toMatch(/expects 1 outputs and the sum, has 1/);
      expect(bad((p) => (p.graph.values[pair(p).outputs[1]].shape = [3]))).toMatch(/the forward output is .*\[3\], expected a float/);
    });
  });
}

it('CUDA builds pair them after remat (programs.ts), and MPSC_CUDA_FUSE_OFF=grad_fwd leaves the copies', () => {
  const count = (off: Parameters<typeof cudaFusions>[0]) => {
    const caps = cudaFusions(off);
    const step = buildPrograms(base, { batch: 2, fusions: { ...caps, remat: { fromPeakBytes: 0 } } }).train_step;
    return step.graph.nodes.filter((n) => n.attrs.fwd_out === true).length;
  };
  expect(count([])).toBe(2);
  expect(count(['grad_fwd'])).toBe(0);
  expect(cudaFusions(['grad_fwd']).gradWithForward).toBeUndefined();
});
