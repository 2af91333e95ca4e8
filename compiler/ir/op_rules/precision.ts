/**
 * Op rules, mixed precision (issue 15): `cast`, the op that rounds to and widens from 16 bits in
 * compiler/ir/precision.ts's canonical form (see ops.ts for what each field means). The pass
 * inserts it; it never appears in a spec's forward graph, so it has no gradient rule.
 */
import type { OpDef } from '../ops.js';

export const CAST_TARGETS = ['f32', 'f16', 'bf16'] as const;

export const PRECISION_OPS = {
  cast: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { to: 'f16 | bf16 | f32: the element type of y' },
    doc:
      'y = x converted to the element type `to`, element by element. To f16 (IEEE binary16) or bf16 (bfloat16): ' +
      'round to nearest, ties to even; values beyond the largest finite number become ±inf, NaN stays NaN, ' +
      'subnormals are kept (no flush to zero). To f32: exact. torch.Tensor.to(dtype).',
    category: 'forward',
    halfInputs: [0],
    shape(c) {
      c.want((CAST_TARGETS as readonly string[]).includes(String(c.attrs.to)), `attr to must be one of ${CAST_TARGETS.join(', ')}, got ${String(c.attrs.to)}`);
      c.want(c.dtype(0) !== 'i32', 'x must be a float tensor');
      return [c.in(0)];
    },
  },
} satisfies Record<string, OpDef>;
