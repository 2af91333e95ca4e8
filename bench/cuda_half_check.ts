/**
 * cuda_half_check: the CUDA dialect's 16-bit kernels on a GPU, without the CUDA host (issue 15; until
 * the CUDA backend runs 16-bit programs, bench/cuda_check.ts cannot reach them). Consumes the
 * 16-bit kernel cases of the Metal tests (test/metal_cases.ts halfCases: casts, GEMM family and
 * attention with f16 / bf16 operands) plus f32 -> f16 / bf16 -> f32 round trips at the edge values
 * (ties, subnormals, the midpoints above the largest finite numbers, overflow, inf, NaN, -0);
 * produces one standalone .cu (the kernels in the CUDA dialect and a main that launches each
 * case's kernels, plain and 8x8 matrix-unit variants, and checks the results against the float64
 * reference baked in: the round trips bit for bit, the rest within 1e-4 max-norm relative),
 * compiles it with nvcc for the GPU found and runs it. Exit status 1 when a check fails.
 * Relies on: nvcc and a GPU (runtime/cuda/session.ts findNvcc / findGpu); without a GPU it only
 * compiles. Usage: node --import tsx bench/cuda_half_check.ts
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { GraphBuilder, type HalfDType, type Program, numel } from '../compiler/ir/graph.js';
import { lowerProgram } from '../compiler/codegen-metal/lower_program.js';
import { persistentTable, programLayout } from '../compiler/codegen-metal/layout.js';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import { kernelFile } from '../compiler/kernels/prelude.js';
import type { Helper, KernelSpec } from '../compiler/kernels/kernel_types.js';
import { cudaArchitecture, findGpu, findNvcc } from '../runtime/cuda/session.js';
import { reference, type OpCase } from '../test/metal_harness.js';
import { halfCases } from '../test/metal_cases.js';

const edge: number[] = [0, -0, Infinity, -Infinity, NaN];
for (const x of [1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -24, 2 ** -25, 3 * 2 ** -25, 1.5 * 2 ** -24, 2 ** -26, 2 ** -14, 2 ** -14 - 2 ** -25, 65504, 65519, 65519.996, 65520, 1e5, 0.1,
  1 + 2 ** -8, 1 + 3 * 2 ** -8, 2 ** -126, 2 ** -133, 3 * 2 ** -134, 2 ** -149, 1e-40, 3.3895313892515355e38, 3.3961775292304473e38, 3.4028234663852886e38]) edge.push(Math.fround(x), Math.fround(-x));
function roundTrip(to: HalfDType): OpCase {
  const b = new GraphBuilder();
  const x = b.value(`e_${to}.x`, 'f32', [edge.length], 'input');
  const h = b.emit('cast', [x], [{ name: `e_${to}.h`, dtype: to, shape: [edge.length] }], { to })[0];
  const y = b.emit('cast', [h], [{ name: `e_${to}.y`, shape: [edge.length] }], { to: 'f32' })[0];
  return { program: { name: `e_${to}`, batch: 1, graph: b.graph, inputs: [x], outputs: [] } as unknown as Program, data: new Map([[x, Float64Array.from(edge)]]), check: [y] };
}
const cases = [roundTrip('f16'), roundTrip('bf16'), ...halfCases()];
const kernels: KernelSpec[] = [];
const helpers = new Set<Helper>();
let main = '';
const lit = (x: number) => (Number.isNaN(x) ? 'NAN' : x === Infinity ? 'INFINITY' : x === -Infinity ? '-INFINITY' : Object.is(x, -0) ? '-0.0f' : `${Math.fround(x).toPrecision(9)}f`);
cases.forEach((c, ci) => {
  const p = c.program;
  const layout = programLayout(p, persistentTable([p]));
  const lp = lowerProgram(p, { noFallback: true, kernelPrefix: `c${ci}_` }, layout, CUDA);
  kernels.push(...lp.kernels);
  for (const h of lp.helpers) helpers.add(h);
  const ref = reference(c, { lr: 0, t: 1, seed: 0, counter: 0 });
  const exact = ci < 2;
  main += `  { // case ${p.name}\n    char* arena; cudaMalloc(&arena, ${Math.max(64, layout.arenaBytes)});\n`;
  p.inputs.forEach((id, k) => {
    const d = c.data.get(id)!;
    main += `    static const float in${k}[] = {${Array.from(d, lit).join(', ')}};\n    float* d_in${k}; cudaMalloc(&d_in${k}, ${d.length * 4}); cudaMemcpy(d_in${k}, in${k}, ${d.length * 4}, cudaMemcpyHostToDevice);\n`;
  });
  const ptr = (id: number) => { const h = layout.homes[id]!; return h.region === 'input' ? `d_in${h.index}` : `(arena + ${h.offset})`; };
  for (const mma of [false, true]) {
    for (const k of lp.kernels) {
      const v = mma && k.mma ? k.mma : k;
      const args = k.args.map((a) => `(${a.access === 'r' ? 'const ' : ''}${CUDA.typeName(a.type)}*)${ptr(a.value)}`);
      main += `    ${v.name}<<<dim3(${k.groups.join(', ')}), dim3(${v.tgsize.join(', ')})>>>(${[...args, 'spp'].join(', ')});\n`;
    }
    main += `    if (cudaDeviceSynchronize() != cudaSuccess) { printf("${p.name}: launch failed: %s\\n", cudaGetErrorString(cudaGetLastError())); return 1; }\n`;
    for (const id of c.check) {
      const want = ref.get(id)!, n = numel(p.graph.values[id].shape);
      main += `    { static const float want[] = {${Array.from(want, lit).join(', ')}}; static float got[${n}]; cudaMemcpy(got, ${ptr(id)}, ${n * 4}, cudaMemcpyDeviceToHost);\n` +
        (exact
          ? `      int bad = 0; for (int i = 0; i < ${n}; i++) { uint32_t a, b; memcpy(&a, &got[i], 4); memcpy(&b, &want[i], 4); if (a != b && !(isnan(got[i]) && isnan(want[i]))) { bad++; printf("  ${p.name}[%d]: got %a want %a\\n", i, got[i], want[i]); } }\n      printf("${p.name} ${mma ? 'mma' : 'plain'}: %s (%d of ${n} differ)\\n", bad ? "FAIL" : "ok", bad); fails += bad != 0;\n`
          : `      double d = 0, m = 0; for (int i = 0; i < ${n}; i++) { d = fmax(d, fabs((double)got[i] - want[i])); m = fmax(m, fabs((double)want[i])); }\n      printf("${p.name} ${p.graph.values[id].name} ${mma ? 'mma' : 'plain'}: rel %.3g %s\\n", d / m, d / m < 1e-4 ? "ok" : "FAIL"); fails += !(d / m < 1e-4);\n`) +
        `    }\n`;
    }
  }
  main += `  }\n`;
});
const src = kernelFile(CUDA, ['gpu16 probe'], helpers, kernels, { plain: '', mma: '' }) +
  `\n#include <cstdio>\n#include <cstring>\n#include <cstdint>\nint main() {\n  int fails = 0;\n  StepParams sp0 = {0.0f, 1, 0u, 0u}; StepParams* spp; cudaMalloc(&spp, sizeof sp0); cudaMemcpy(spp, &sp0, sizeof sp0, cudaMemcpyHostToDevice);\n${main}  printf("%s\\n", fails ? "SOME FAILED" : "ALL OK");\n  return fails ? 1 : 0;\n}\n`;
const nvcc = findNvcc();
if (!nvcc) {
  console.error('cuda_half_check: no nvcc (set MPSC_NVCC)');
  process.exit(1);
}
const gpu = findGpu();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-half-check-'));
fs.writeFileSync(path.join(dir, 'half_check.cu'), src);
execFileSync(nvcc.nvcc, [`-arch=sm_${cudaArchitecture(gpu?.computeCap ?? null)}`, '-fmad=true', '-o', path.join(dir, 'half_check'), path.join(dir, 'half_check.cu')], { stdio: 'inherit' });
console.log(`compiled ${kernels.length} kernels of ${cases.length} cases (${dir})`);
if (!gpu) {
  console.log('no GPU: compiled only');
  process.exit(0);
}
const r = spawnSync(path.join(dir, 'half_check'), { stdio: 'inherit' });
process.exit(r.status ?? 1);
