/**
 * bridge_host: the dispatch plans compiled into host code for the Objective-C++ bridge
 * (runtime/metal-bridge/mpsc_metal_bridge.mm): `mpsc_metal_plan.inc` holds, per program, the
 * library source (a raw string literal, for newLibraryWithSource when no .metallib was built),
 * the launches with their bindings, grids, threadgroup sizes, threadgroup memory and barrier
 * flags, the CPU fallback steps, whether the library has `bfloat` buffers (MSL 3.1, and a GPU
 * check at load: mpsc_metal_caps.h), and the persistent-tensor table of the model ABI.
 * bridgeProjectFiles: the generated files of the bridge's CMake project besides the sources
 * (package.json for cmake-js, mpsc_paths.cmake with node-addon-api's folder).
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import type { MetalArtifacts } from './index.js';
import { cString } from '../cfamily/text.js';
import { render } from './templates.js';
import { cpuFallbackFunction } from './cpu_fallback.js';
import { usesBfloat } from './lower_program.js';

function rawString(s: string): string {
  let delim = 'MSL';
  while (s.includes(`)${delim}"`)) delim += 'X';
  // MSVC/clang limit single literals to ~64 KiB in places: split into chunks concatenated by the compiler
  const parts: string[] = [];
  for (let i = 0; i < s.length; i += 16000) parts.push(`R"${delim}(${s.slice(i, i + 16000)})${delim}"`);
  return parts.length ? parts.join('\n') : '""';
}

export function bridgeHostSource(a: MetalArtifacts): string {
  const kinds: Record<string, string> = { param: 'MPSC_PARAM', state: 'MPSC_STATE', optstate: 'MPSC_OPTSTATE', gradacc: 'MPSC_GRADACC' };
  let fallback = '';
  const programs = a.programs.map((p, pi) => {
    const id = `p${pi}`;
    const steps = p.plan.steps.map((s, si) => ({
      cpuFn: s.kind === 'cpu' ? ((fallback += cpuFallbackFunction(p.lowered, s.node, `mfb_${id}_${si}`) + '\n'), `mfb_${id}_${si}`) : 'nullptr',
      bindName: `mb_${id}_${si}`,
      binds: s.bindings.map((b) => ({
        region: b.region === 'arena' ? 0 : b.region === 'persistent' ? 1 : 2, slot: b.slot, offset: b.offset, bytes: b.bytes,
        access: b.access === 'r' ? 0 : b.access === 'w' ? 1 : 2,
      })),
      cpu: s.kind === 'cpu',
      kernel: s.kind === 'kernel' ? cString(s.kernel) : 'nullptr',
      mmaKernel: s.kind === 'kernel' && s.mma ? cString(s.mma.kernel) : 'nullptr',
      groups: s.kind === 'kernel' ? s.groups.join(', ') : '0, 0, 0',
      tg: s.kind === 'kernel' ? s.threadgroup.join(', ') : '0, 0, 0',
      tgmem: s.kind === 'kernel' ? s.threadgroupMemory : 0,
      mmaTg: s.kind === 'kernel' && s.mma ? s.mma.threadgroup.join(', ') : '0, 0, 0',
      mmaTgmem: s.kind === 'kernel' && s.mma ? s.mma.threadgroupMemory : 0,
      barrier: s.kind === 'kernel' ? s.barrier : true,
      node: s.node, op: cString(s.op), nbind: s.bindings.length,
    }));
    const g = p.program.graph;
    return {
      id, name: cString(p.program.name), batch: p.program.batch, source: rawString(p.library), steps, nsteps: steps.length,
      arenaBytes: p.plan.arenaBytes,
      outputs: p.plan.outputs.map((o) => ({ offset: o.offset, cname: cString(o.name) })),
      inputs: p.program.inputs.map((v, i) => ({
        shapeName: `mishape_${id}_${i}`, shape: g.values[v].shape.length ? g.values[v].shape.join(', ') : '0', cname: cString(g.values[v].name),
        dtype: g.values[v].dtype === 'i32' ? 'MPSC_I32' : 'MPSC_F32', rank: g.values[v].shape.length, numel: g.values[v].shape.reduce((x, y) => x * y, 1),
      })),
      ninputs: p.program.inputs.length, noutputs: p.plan.outputs.length,
      nlaunches: p.plan.steps.filter((s) => s.kind === 'kernel').length,
      usesBfloat: usesBfloat(p.lowered),
    };
  });
  return render('bridge_plan', {
    fallback,
    modelName: cString(a.model), programs, nprograms: programs.length, needsBfloat: programs.some((p) => p.usesBfloat), persistentBytes: a.table.bytes, ntensors: a.table.tensors.length,
    tensors: a.table.tensors.map((t) => ({ cname: cString(t.name), dtype: t.dtype === 'i32' ? 'MPSC_I32' : 'MPSC_F32', kind: kinds[t.kind] ?? 'MPSC_STATE',
      rank: t.shape.length, shape: t.shape.length ? t.shape.join(', ') : '0', numel: t.shape.reduce((x, y) => x * y, 1), offset: t.offset })),
  });
}

/** the Node-API version the bridge is built for (`NAPI_VERSION=8` in runtime/metal-bridge/CMakeLists.txt) */
export const BRIDGE_NAPI_VERSION = 8;

/** CMake's quoted-argument escaping */
function cmakeQuoted(s: string): string {
  return '"' + s.replace(/[\\"$;]/g, (c) => '\\' + c) + '"';
}

/**
 * Files written next to the bridge's CMakeLists.txt: `package.json`, whose
 * `binary.napi_versions` tells cmake-js the project is a Node-API addon (no Node headers to
 * download), and `mpsc_paths.cmake`, which records the node-addon-api folder (napi.h) of this
 * mpsc installation, so the project also builds when its folder is outside any node_modules tree
 * (mpsc_bridge.cmake: mpsc_find_napi_include).
 */
export function bridgeProjectFiles(): Record<string, string> {
  const napi = path.dirname(createRequire(import.meta.url).resolve('node-addon-api/package.json'));
  return {
    'package.json': JSON.stringify({ name: 'mpsc_metal', private: true, binary: { napi_versions: [BRIDGE_NAPI_VERSION] } }, null, 2) + '\n',
    'mpsc_paths.cmake': `# generated by mpsc build --target metal: node-addon-api's include folder (napi.h)\nset(MPSC_NAPI_INC_RECORDED ${cmakeQuoted(napi)})\n`,
  };
}
