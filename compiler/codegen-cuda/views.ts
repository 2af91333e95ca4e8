/**
 * views: reshapes of a program input as views on CUDA. The shared lowering copies a reshape's
 * input into its output (elementwise.ts), which for the MLP's flatten of its image batch is a
 * launch that moves the whole batch once more. A program input lives in the program's upload
 * image for the whole step and no kernel writes it, so the reshape's output can be read there
 * instead: this pass drops the copy and binds every later reader of the output to the input's
 * bytes (row-major data is the same bytes under both shapes).
 * Consumes a program lowered in the CUDA dialect and its dispatch plan (codegen-metal's
 * lower_program.ts / dispatch_plan.ts); produces both without those reshape kernels (plain data,
 * the inputs are not modified). Left alone: a reshape whose output is a program output (its
 * value is read back from the arena) or is read by no kernel (the kernel check script reads it
 * from the arena), and reshapes of anything but a program input (the memory plan may reuse an
 * arena value's bytes once the reshape has read it).
 */
import type { DispatchPlan, PlanBinding } from '../codegen-metal/dispatch_plan.js';
import type { LoweredProgram } from '../codegen-metal/lower_program.js';
import { editKernels } from './plan.js';

export function reshapeViews(lp: LoweredProgram, plan: DispatchPlan): { lp: LoweredProgram; plan: DispatchPlan } {
  const byName = new Map(lp.kernels.map((k) => [k.name, k]));
  const outputs = new Set(plan.outputs.map((o) => o.value));
  /** values some kernel reads (a reshape nobody reads keeps its copy: a test reads it from the arena) */
  const readers = new Set(plan.steps.flatMap((s) => s.bindings.filter((b) => b.access !== 'w').map((b) => b.value)));
  /** reshape output value -> the input binding it is a view of */
  const view = new Map<number, PlanBinding>();
  const dropped = new Set<string>();
  const rebind = (b: PlanBinding): PlanBinding => {
    const v = view.get(b.value);
    return v ? { ...b, region: v.region, slot: v.slot, offset: v.offset } : b;
  };
  for (const s of plan.steps) {
    if (s.kind !== 'kernel' || s.op !== 'reshape') continue;
    const k = byName.get(s.kernel);
    if (!k || s.bindings.length !== 2 || k.args[0].name !== 'x' || k.args[1].name !== 'y') continue;
    // (a reshape of a view is a view of the same input)
    const src = rebind(s.bindings[0]), dst = s.bindings[1];
    if (src.region !== 'input' || src.bytes !== dst.bytes || outputs.has(dst.value) || !readers.has(dst.value)) continue;
    view.set(dst.value, src);
    dropped.add(s.kernel);
  }
  if (!view.size) return { lp, plan };
  const steps = plan.steps
    .filter((s) => s.kind !== 'kernel' || !dropped.has(s.kernel))
    .map((s) => ({ ...s, bindings: s.bindings.map(rebind) }));
  return {
    lp: editKernels(lp, dropped),
    plan: { ...plan, steps },
  };
}
