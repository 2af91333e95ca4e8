/**
 * The strict MSL conformance check (runtime/metal-strict): every generated `.metal` file of every
 * example spec (all programs) and of every op case of the Metal kernel tests compiles with clang
 * against msl_strict.h, where device / constant / threadgroup are distinct address spaces and
 * only MSL's own functions exist; deliberately broken kernels fail it (negative control). The
 * Objective-C++ side is test/metal_bridge.test.ts. clang is required: without it these tests fail.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { buildMetal, generateMetalProject } from '../compiler/codegen-metal/index.js';
import { checkMsl, checkSignatures, findClang, rewriteAttributes, staticThreadgroupArrays, type MslFile } from '../runtime/metal-strict/strict_check.js';
import { allOpCases, fusedCases, halfCases } from './metal_cases.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const CLANG = findClang();

function clang(): string {
  if (!CLANG) throw new Error('clang++ is not installed: the strict MSL / Objective-C++ check needs it (Debian: apt-get install -y clang; .ci/run installs it)');
  return CLANG;
}

function expectClean(r: { ok: boolean; diagnostics: string }) {
  // the diagnostics are the message when this fails
  expect(r.ok ? '' : r.diagnostics).toBe('');
}

/** generates the Metal project of a spec into a temporary folder; returns the folder */
function generate(spec: string, opts: { fallbackOps?: string[] } = {}): string {
  const model = checkFile(path.join(ROOT, 'specs', spec));
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-strict-'));
  generateMetalProject(buildPrograms(model, { batch: model.train.batch }), out, opts);
  return out;
}

const SPECS = fs.readdirSync(path.join(ROOT, 'specs')).filter((f) => f.endsWith('.model')).sort();

describe('strict MSL check of the generated libraries', () => {
  for (const spec of SPECS) {
    it(`every program of ${spec}`, () => {
      const out = generate(spec);
      try {
        const files: MslFile[] = fs.readdirSync(out).filter((f) => f.endsWith('.metal')).sort()
          .map((f) => ({ name: `${spec}/${f}`, source: fs.readFileSync(path.join(out, f), 'utf8') }));
        expect(files.map((f) => path.basename(f.name))).toEqual(expect.arrayContaining(['train_step.metal', 'eval.metal']));
        expectClean(checkMsl(clang(), files));
      } finally {
        fs.rmSync(out, { recursive: true, force: true });
      }
    });
  }

  it('every op case of the Metal kernel tests (both GEMM variants), the fused chains and the 16-bit cases', () => {
    const cases = [...allOpCases(), ...fusedCases(), ...halfCases()];
    const art = buildMetal(cases.map((c) => c.program), 'metal_test');
    const files = art.programs.map((p) => ({ name: `cases/${p.libraryFile}`, source: p.library }));
    expect(files.length).toBe(cases.length);
    expect(files.some((f) => /simdgroup_multiply_accumulate/.test(f.source))).toBe(true);
    expectClean(checkMsl(clang(), files));
  });
});

describe('negative control: broken kernels fail the strict check', () => {
  // a real generated library with a GEMM (threadgroup tiles, simdgroup matrices) and a row reduction
  const cases = allOpCases();
  const gemm = cases.find((c) => c.program.graph.nodes[0].op === 'linear')!;
  const softmax = cases.find((c) => c.program.graph.nodes[0].op === 'softmax')!;
  // and a GEMM of f16 operands (half tiles, simdgroup_half8x8 operands, float accumulator)
  const halfGemm = halfCases().find((c) => /_linear_f16$/.test(c.program.name))!;
  const base = buildMetal([gemm.program, softmax.program, halfGemm.program], 'metal_test').programs.map((p) => ({ name: p.libraryFile, source: p.library }));

  /** applies `edit` to the library whose text matches `where` (the edit must change it) */
  function broken(where: RegExp, from: RegExp | string, to: string): MslFile {
    const f = base.find((b) => where.test(b.source))!;
    const source = f.source.replace(from, to);
    expect(source).not.toBe(f.source);
    return { name: `broken_${f.name}`, source };
  }

  it('the unmodified libraries pass (so each failure below comes from its edit)', () => {
    expectClean(checkMsl(clang(), base));
  });

  const breaks: [string, () => MslFile, RegExp][] = [
    ['a device pointer passed where threadgroup memory is expected',
      () => broken(/mpsc_block_max/, /mpsc_block_max\(([^,]+), tg/, 'mpsc_block_max($1, (device float*)x'), /cannot pass pointer to address space '1' as a pointer to address space '3'|no matching function for call to 'mpsc_block_max'/],
    ['a threadgroup tile initialised from a device buffer',
      () => broken(/simdgroup_float8x8/, 'threadgroup float* As = tg;', 'threadgroup float* As = x;'), /cannot initialize a variable of type 'threadgroup float \*' with an lvalue of type 'device float const \*'/],
    ['a simdgroup matrix loaded from thread memory',
      () => broken(/simdgroup_float8x8/, /simdgroup_load\(a, As,/, 'float loc[64]; simdgroup_load(a, loc,'), /no matching function for call to 'simdgroup_load'/],
    ['a half matrix loaded from a float tile',
      () => broken(/simdgroup_half8x8/, 'threadgroup half* As = (threadgroup half*)tg;', 'threadgroup float* As = tg;'), /no matching function for call to 'simdgroup_load'/],
    ['a mixed product with a float operand and a half operand',
      () => broken(/simdgroup_half8x8/, 'simdgroup_half8x8 b;', 'simdgroup_float8x8 b;'), /no matching function for call to 'simdgroup_(load|multiply_accumulate)'/],
    ['a call into the C++ standard library', () => broken(/precise::exp/, 'precise::exp(', 'std::exp('), /undeclared identifier 'std'/],
    ['a C math function Metal does not have', () => broken(/precise::exp/, 'precise::exp(', 'log1p('), /undeclared identifier 'log1p'/],
    ['a libm name instead of the Metal one', () => broken(/precise::exp/, 'precise::exp(', 'expf('), /undeclared identifier 'expf'/],
    ['a double', () => broken(/simdgroup_float8x8/, 'float acc = 0.0f;', 'double acc = 0.0;'), /double_is_not_a_Metal_type/],
    ['float arithmetic promoted to double', () => broken(/precise::exp/, /precise::exp\(([^;]*)\);/, 'precise::exp($1) * 0.5;'), /implicit conversion (increases|loses) floating-point precision/],
    ['[[buffer(n)]] on a thread pointer', () => broken(/simdgroup_float8x8/, 'device float* y [[buffer(', 'thread float* y [[buffer('), /\[\[buffer\(\d+\)\]\] on 'thread float\* y', which is not a device or constant pointer/],
    ['an attribute Metal does not define', () => broken(/simdgroup_float8x8/, '[[thread_position_in_threadgroup]]', '[[thread_position_in_warp]]'), /unknown kernel parameter attribute \[\[thread_position_in_warp\]\]/],
    ['a built-in of a type Metal does not allow', () => broken(/simdgroup_float8x8/, 'uint sg [[simdgroup_index_in_threadgroup]]', 'float sg [[simdgroup_index_in_threadgroup]]'), /\[\[simdgroup_index_in_threadgroup\]\] on type 'float'/],
  ];
  for (const [what, make, message] of breaks) {
    it(what, () => {
      const r = checkMsl(clang(), [make()]);
      expect(r.ok).toBe(false);
      expect(r.diagnostics).toMatch(message);
    });
  }
});

describe('strict check helpers', () => {
  it('rewrites attributes and leaves other brackets alone', () => {
    expect(rewriteAttributes('device float* y [[buffer(3)]], uint3 gid [[thread_position_in_grid]]) { a[b[0]] = 1; }'))
      .toBe('device float* y MSL_ATTR_buffer(3), uint3 gid MSL_ATTR_thread_position_in_grid) { a[b[0]] = 1; }');
  });
  it('makes threadgroup arrays inside functions static, and only there', () => {
    expect(staticThreadgroupArrays('threadgroup float g[4];\nkernel void k() {\n  threadgroup float t[2][8]; // tile\n  threadgroup float* p = t[0];\n}'))
      .toBe('threadgroup float g[4];\nkernel void k() {\n  static threadgroup float t[2][8]; // tile\n  threadgroup float* p = t[0];\n}');
  });
  it('accepts a threadgroup array declared in a kernel and keeps its address space', () => {
    const kernel = (call: string) => ({ name: 'tg_array.metal', source: `#include <metal_stdlib>
using namespace metal;
inline float first(threadgroup float* t) { return t[0]; }
inline float first_device(device float* t) { return t[0]; }
kernel void k(device float* y [[buffer(0)]], uint tidx [[thread_index_in_threadgroup]]) {
  threadgroup float tile[32];
  tile[tidx] = y[tidx];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tidx] = ${call}(tile);
}
` });
    expectClean(checkMsl(clang(), [kernel('first')]));
    const r = checkMsl(clang(), [kernel('first_device')]);
    expect(r.ok).toBe(false);
    expect(r.diagnostics).toMatch(/no matching function for call to 'first_device'/);
  });
  it('finds a buffer index bound twice and one beyond 30', () => {
    const src = 'kernel void k(device float* a [[buffer(0)]], device float* b [[buffer(0)]], constant float& c [[buffer(31)]]) {}';
    const errs = checkSignatures({ name: 'x.metal', source: src }).join('\n');
    expect(errs).toMatch(/\[\[buffer\(0\)\]\] is bound twice/);
    expect(errs).toMatch(/\[\[buffer\(31\)\]\] is outside 0..30/);
  });
});
