/** Shared by test/cpu_build.test.ts and its child process (test/cpu_build_child.ts). */
import { GraphBuilder, type ProgramSet } from '../compiler/ir/graph.js';

/** an awkward persistent-tensor name: quotes, backslash, newline, trigraph, non-ASCII */
export const ODD_NAME = 'fc"1\\\n??=.wéight';

/**
 * A tiny hand-made model: logits = linear(x [B,6], w [3,6], b [3]); loss = cross_entropy; accuracy;
 * train_step also takes an SGD step on w and b (matmul / sum_to backward).
 */
export function tinyProgramSet(batch = 4, tag = 'tiny'): ProgramSet {
  const make = (train: boolean) => {
    const g = new GraphBuilder();
    const x = g.value('x', 'f32', [batch, 6], 'input');
    const label = g.value('label', 'i32', [batch], 'input');
    const w = g.value(ODD_NAME, 'f32', [3, 6], 'param');
    const b = g.value('fc1.bias', 'f32', [3], 'param');
    const [logits] = g.emit('linear', [x, w, b], [{ name: 'logits', shape: [batch, 3] }]);
    const [loss] = g.emit('cross_entropy', [logits, label], [{ name: 'loss', shape: [] }]);
    const [acc] = g.emit('accuracy', [logits, label], [{ name: 'acc', shape: [] }]);
    if (train) {
      const [dl] = g.emit('cross_entropy_grad', [logits, label], [{ name: 'dlogits', shape: [batch, 3], kind: 'grad' }]);
      const [dw] = g.emit('matmul', [dl, x], [{ name: 'dw', shape: [3, 6], kind: 'grad' }], { transA: true, transB: false });
      const [db] = g.emit('sum_to', [dl], [{ name: 'db', shape: [3], kind: 'grad' }], { axes: [0] });
      g.node('sgd_update', [w, dw, -1, -1], [], { momentum: 0, nesterov: false, weight_decay: 0 });
      g.node('sgd_update', [b, db, -1, -1], [], { momentum: 0, nesterov: false, weight_decay: 0 });
    }
    return { graph: g.graph, inputs: [x, label], outputs: [{ name: 'loss', value: loss }, { name: 'accuracy', value: acc }] };
  };
  const t = make(true), e = make(false);
  return {
    model: tag,
    train_step: { name: 'train_step', batch, ...t },
    eval: { name: 'eval', batch, ...e },
  };
}
