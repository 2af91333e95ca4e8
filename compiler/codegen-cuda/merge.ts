/**
 * merge: the CUDA backend's multi-kernel launches. A training step ends with one optimizer kernel
 * per parameter tensor (53 for the 4-block GPT), each a few microseconds of launch for a few
 * thousand elements; any run of independent element-wise kernels is the same. This pass puts each
 * run of consecutive, independent element-wise kernels of a program into ONE kernel whose blocks
 * are cut into segments, one per original kernel: block b of segment s runs the original body with
 * `gid.x = (b - first block of s) * 256 + thread`, so every element gets the same statements as
 * before (bitwise the same results; only the launch count changes). The merged body is kernel
 * language (tgid, tid, the dialect's address spaces), so the Metal emulator can run it in tests.
 * Consumes a program lowered in the CUDA dialect and its dispatch plan (codegen-metal's
 * lower_program.ts / dispatch_plan.ts); produces both with the runs replaced (plain data, the
 * inputs are not modified).
 * Mergeable: a kernel of no cuBLASLt call's node (cublaslt.ts), launched as the shared `elementwise` launch (common.ts: 256 threads, a 1-D
 * grid, no barriers, no shared memory, no tensor-core variant) whose body uses no built-in but
 * `gid.x`; at most one kernel of a run uses the scratch region (the second kernel of a chunked sum,
 * reduce_cuda.ts, reading what the kernel before the run wrote), and the merged kernel then takes it. Independent: no byte range one kernel of the run writes overlaps a range
 * another kernel of the run reads or writes (the bindings' device ranges, so memory-plan reuse of
 * arena bytes counts). A run holds at most MAX_ARGS buffers (CUDA's 4 KiB of kernel parameters).
 */
import type { KernelArg, KernelSpec } from '../kernels/kernel_types.js';
import { builtinsOf, type Dialect } from '../kernels/dialect.js';
import { EW_THREADS } from '../kernels/common.js';
import type { DispatchPlan, PlanBinding, PlanLaunch } from '../codegen-metal/dispatch_plan.js';
import type { LoweredProgram } from '../codegen-metal/lower_program.js';
import { editKernels } from './plan.js';

/** buffers per merged kernel: 8-byte pointers, well inside CUDA's 4 KiB of parameters */
export const MAX_ARGS = 256;

function mergeable(k: KernelSpec): boolean {
  const b = builtinsOf(k.body);
  // never a kernel of a cuBLASLt call's node (cublaslt.ts: its fallback and after-call kernels run on one branch or the other)
  return !k.library && !k.libraryPart && !k.sync && !k.mma && k.tgmem === 0 && k.tgsize[0] === EW_THREADS && k.tgsize[1] === 1 && k.tgsize[2] === 1 &&
    k.groups[1] === 1 && k.groups[2] === 1 && b.length === 1 && b[0] === 'gid' &&
    (k.body.match(/\bgid\b/g) ?? []).length === (k.body.match(/\bgid\.x\b/g) ?? []).length;
}

type Range = { key: string; lo: number; hi: number; writes: boolean };
/** the persistent block and the arena are one buffer each (offsets within it); each input is its own */
const rangesOf = (bs: PlanBinding[]): Range[] =>
  bs.map((b) => ({ key: b.region === 'input' ? `input:${b.slot}` : b.region, lo: b.offset, hi: b.offset + b.bytes, writes: b.access !== 'r' }));
const clash = (a: Range[], b: Range[]) =>
  a.some((x) => b.some((y) => (x.writes || y.writes) && x.key === y.key && x.lo < y.hi && y.lo < x.hi));

/** one kernel for a run of mergeable, independent kernels (in launch order) */
function mergedKernel(d: Dialect, name: string, run: KernelSpec[]): KernelSpec {
  const args: KernelArg[] = [];
  let first = 0;
  const segments = run.map((k, s) => {
    // the kernel's own parameter names as aliases of the merged kernel's (only the ones its body uses)
    const alias = k.args.map((a) => {
      const p = `mpsc_a${args.length}`;
      args.push({ ...a, name: p });
      return new RegExp(`(?<![.\\w])${a.name}\\b`).test(k.body) ? `    ${d.space.global}${a.access === 'r' ? 'const ' : ''}${d.typeName(a.type)}* const ${a.name} = ${p};\n` : '';
    });
    const b0 = first;
    first += k.groups[0];
    const body = k.body.replace(/\bgid\.x\b/g, 'mpsc_gx').replace(/\n+$/, '').replace(/^(?=.)/gm, '  ');
    return `  ${s === 0 ? '' : 'else '}if (tgid.x < ${first}u) {\n    // ${k.label.replace(/\*\//g, '* /')}\n` +
      alias.join('') + `    const uint mpsc_gx = (tgid.x - ${b0}u) * ${EW_THREADS}u + tid.x;\n${body}\n  }\n`;
  });
  const nodes = run.map((k) => k.node);
  const ops = [...new Set(run.map((k) => k.op))];
  return {
    name, node: run[0].node, op: ops.length === 1 ? ops[0] : 'multi', args,
    label: `${run.length} element-wise kernels in one launch (${ops.join(', ')}; nodes ${nodes[0]}..${nodes[nodes.length - 1]}), a block segment each`,
    groups: [first, 1, 1], tgsize: [EW_THREADS, 1, 1], tgmem: 0, sync: false,
    body: `  // segment s: the blocks of the s-th kernel of the run, its body unchanged\n${segments.join('')}`,
    ...(run.some((k) => k.scratch) ? { scratch: Math.max(...run.map((k) => k.scratch ?? 0)) } : {}),
  };
}

/** The program with each run of at least two consecutive independent element-wise kernels launched as one kernel. */
export function mergeLaunches(lp: LoweredProgram, plan: DispatchPlan, d: Dialect): { lp: LoweredProgram; plan: DispatchPlan } {
  const byName = new Map(lp.kernels.map((k) => [k.name, k]));
  const launches = new Map<string, number>();
  for (const s of plan.steps) if (s.kind === 'kernel') launches.set(s.kernel, (launches.get(s.kernel) ?? 0) + 1);
  const steps: DispatchPlan['steps'] = [];
  /** first kernel of a merged run -> the merged kernel; the run's other kernels are dropped */
  const replace = new Map<string, KernelSpec>();
  const dropped = new Set<string>();
  let run: { k: KernelSpec; step: PlanLaunch; ranges: Range[] }[] = [];
  let nargs = 0;
  const flush = () => {
    if (run.length === 1) steps.push(run[0].step);
    else if (run.length > 1) {
      const k = mergedKernel(d, `${run[0].k.name}_m`, run.map((r) => r.k));
      replace.set(run[0].k.name, k);
      for (const r of run.slice(1)) dropped.add(r.k.name);
      const bindings = run.flatMap((r) => r.step.bindings).map((b, index) => ({ ...b, index }));
      steps.push({ ...run[0].step, kernel: k.name, op: k.op, groups: k.groups, barrier: run.some((r) => r.step.barrier), paramsIndex: bindings.length, bindings });
    }
    run = [];
    nargs = 0;
  };
  for (const s of plan.steps) {
    const k = s.kind === 'kernel' ? byName.get(s.kernel) : undefined;
    if (s.kind !== 'kernel' || !k || !mergeable(k) || launches.get(k.name) !== 1) {
      flush();
      steps.push(s);
      continue;
    }
    const r = rangesOf(s.bindings);
    if (run.length && (nargs + k.args.length > MAX_ARGS || run.some((x) => clash(x.ranges, r)) || (k.scratch && run.some((x) => x.k.scratch)))) flush();
    run.push({ k, step: s, ranges: r });
    nargs += k.args.length;
  }
  flush();
  return { lp: editKernels(lp, dropped, replace), plan: { ...plan, steps } };
}
