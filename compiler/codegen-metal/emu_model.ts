/**
 * emu_model: the metal-emu backend's generated C++: an implementation of the model ABI
 * (runtime/cpp/mpsc_model.h) whose program run functions execute the dispatch plans through
 * the MSL emulator. The `.metal` libraries are #included unmodified, each in its own
 * namespace; per kernel a shim passes the bound buffers, the StepParams, threadgroup memory
 * and the built-in values in the kernel's parameter order. A model using `bfloat` (buffers, or the
 * matrix-unit GEMMs' bfloat tiles: lower_program.ts usesBfloat) checks
 * the emulated GPU family (MPSC_METAL_EMU_GPU) at creation with the bridge's rule
 * (runtime/metal-bridge/mpsc_metal_caps.h).
 */
import type { KernelSpec, KernelVariant } from '../kernels/kernel_types.js';
import { builtinsOf } from '../kernels/dialect.js';
import { cString, commentText } from '../cfamily/text.js';
import type { DispatchPlan, PlanBinding } from './dispatch_plan.js';
import { type LoweredProgram, usesBfloat } from './lower_program.js';
import type { PersistentTable } from './layout.js';
import { render } from './templates.js';

export interface EmuProgram {
  lowered: LoweredProgram;
  plan: DispatchPlan;
  /** file name of the program's .metal library */
  library: string;
}

/** C++ for the CPU fallback of one node: `static int NAME(mpsc_ctx*, void* const* ptrs, const mpsc_scalars*)`, ptrs = the step's bindings in order. */
export type CpuFallbackEmitter = (lp: LoweredProgram, node: number, fnName: string) => string;

export interface EmuModelOptions {
  /** emits CPU fallback functions (compiler/codegen-cpu); required when a plan has CPU steps */
  cpuFallback?: CpuFallbackEmitter;
}

const BUILTIN_VALUE: Record<string, string> = {
  gid: 'gid_of()',
  tgid: 'u3(mtlemu::g_group->tgpos)',
  tid: 'u3(mtlemu::g_cur->tid)',
  tidx: 'mtlemu::g_cur->index',
  lane: 'mtlemu::g_cur->lane',
  sg: 'mtlemu::g_cur->simd',
};

function shimCall(ns: string, k: KernelSpec, v: KernelVariant): string {
  const args = k.args.map((a, i) => `static_cast<${a.access === 'r' ? 'const ' : ''}${a.type}*>(static_cast<void*>(a->buf[${i}]))`);
  args.push(`*static_cast<const ${ns}::StepParams*>(a->params)`);
  if (v.tgmem > 0) args.push('reinterpret_cast<volatile float*>(a->tgmem)');
  for (const b of builtinsOf(v.body)) args.push(BUILTIN_VALUE[b]);
  return `${ns}::${v.name}(\n      ${args.join(',\n      ')})`;
}

const dims = (d: number[]) => `{${d[0]}u, ${d[1]}u, ${d[2]}u}`;

function bindView(b: PlanBinding) {
  return {
    region: b.region === 'arena' ? 'R_ARENA' : b.region === 'persistent' ? 'R_PERSISTENT' : 'R_INPUT',
    slot: b.slot, offset: b.offset, bytes: b.bytes, write: b.access !== 'r', name: cString(b.name),
  };
}

export function emuModelSource(model: string, table: PersistentTable, progs: EmuProgram[], opts: EmuModelOptions = {}): { source: string; fallbackSource: string | null } {
  let fallback = '';
  const programs = progs.map((ep, pi) => {
    const id = `p${pi}`, ns = `mtl_${id}`;
    const lp = ep.lowered;
    const byName = new Map(lp.kernels.map((k) => [k.name, k]));
    const shims: { shim: string; call: string }[] = [];
    const steps = ep.plan.steps.map((s, si) => {
      const bindName = `b_${id}_${si}`;
      if (s.kind === 'cpu') {
        if (!opts.cpuFallback) throw new Error(`internal: program ${lp.program.name} has a CPU fallback step (${s.op}) but no CPU fallback emitter was given`);
        const fn = `fb_${id}_${si}`;
        fallback += opts.cpuFallback(lp, s.node, fn) + '\n';
        const none = 'mtlemu::Launch{nullptr, nullptr, {0u, 0u, 0u}, {0u, 0u, 0u}, 0u, false}';
        return { bindName, binds: s.bindings.map(bindView), cpu: true, barrier: true, plain: none, mma: none, nbind: s.bindings.length, cpuFn: fn };
      }
      const k = byName.get(s.kernel)!;
      const launch = (v: KernelVariant) => {
        const shim = `s_${id}_${v.name}`;
        shims.push({ shim, call: shimCall(ns, k, v) });
        return `mtlemu::Launch{${cString(`${lp.program.name}.${v.name} (${commentText(k.label)})`)}, ${shim}, ${dims(k.groups)}, ${dims(v.tgsize)}, ${v.tgmem}u, ${v.sync}}`;
      };
      const plain = launch(k);
      const mma = k.mma ? launch(k.mma) : 'mtlemu::Launch{nullptr, nullptr, {0u, 0u, 0u}, {0u, 0u, 0u}, 0u, false}';
      return { bindName, binds: s.bindings.map(bindView), cpu: false, barrier: s.barrier, plain, mma, nbind: s.bindings.length, cpuFn: 'nullptr' };
    });
    const g = lp.program.graph;
    return {
      name: id, ns, library: ep.library, shims, steps, stepsName: `steps_${id}`, nsteps: steps.length,
      outputs: ep.plan.outputs.map((o) => ({ offset: o.offset, cname: cString(o.name) })),
      inputs: lp.program.inputs.map((v, i) => {
        const val = g.values[v];
        return { shapeName: `ishape_${id}_${i}`, shape: val.shape.length ? val.shape.join(', ') : '0', cname: cString(val.name),
          dtype: val.dtype === 'i32' ? 'MPSC_I32' : 'MPSC_F32', rank: val.shape.length, numel: val.shape.reduce((x, y) => x * y, 1) };
      }),
      batch: lp.program.batch, ninputs: lp.program.inputs.length, noutputs: ep.plan.outputs.length,
      arenaBytes: ep.plan.arenaBytes, nlaunches: ep.plan.steps.filter((s) => s.kind === 'kernel').length,
      cname: cString(lp.program.name),
    };
  });
  const kinds: Record<string, string> = { param: 'MPSC_PARAM', state: 'MPSC_STATE', optstate: 'MPSC_OPTSTATE', gradacc: 'MPSC_GRADACC' };
  const source = render('emu_model', {
    modelComment: commentText(model), modelName: cString(model),
    fallbackInclude: fallback ? 'metal_emu_fallback.inc' : '',
    programs: programs.map((p) => ({ ...p, name: p.name })),
    tensors: table.tensors.map((t) => ({ cname: cString(t.name), dtype: t.dtype === 'i32' ? 'MPSC_I32' : 'MPSC_F32', kind: kinds[t.kind] ?? 'MPSC_STATE',
      rank: t.shape.length, shape: t.shape.length ? t.shape.join(', ') : '0', numel: t.shape.reduce((x, y) => x * y, 1), offset: t.offset })),
    ntensors: table.tensors.length, persistentBytes: table.bytes, nprograms: programs.length,
    needsBfloat: progs.some((ep) => usesBfloat(ep.lowered)),
  });
  return { source, fallbackSource: fallback || null };
}
