/**
 * The CPU build cache and the native binding:
 *  - two processes building the same key at once both succeed and load the same complete module;
 *  - a later build of the same sources is a cache hit (no rebuild, no leftovers);
 *  - the binding rejects wrong inputs with a JS Error before native code reads them;
 *  - names reach generated C++ only as escaped string literals (odd names round-trip);
 *  - a fixed thread count gives bitwise-identical results;
 *  - the CPU and CUDA build keys digest every module their generators reach and every header they ship
 *    (moduleClosure), so an edit to any of them never reuses a stale build.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cString } from '../compiler/cfamily/text.js';
import { generateCpuModel, kernelsHeader, KERNELS_HEADER_FILES } from '../compiler/codegen-cpu/emit_program.js';
import { buildAddon, moduleClosure } from '../runtime/native/build.js';
import { cpuGeneratorFiles, cpuInputsKey, createNativeSession } from '../runtime/native/native_session.js';
import { cudaGeneratorFiles } from '../runtime/cuda/session.js';
import type { Session } from '../runtime/session.js';
import { ODD_NAME, tinyProgramSet } from './cpu_helpers.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cache-test-'));
const TAG = `tiny_${process.pid}`;

function child(): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['--import', 'tsx', path.join(HERE, 'cpu_build_child.ts'), cacheDir, TAG], { cwd: path.join(HERE, '..'), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('close', (code) => resolve({ code, out, err }));
  });
}

describe('the build keys digest what the generators reach', () => {
  it('moduleClosure follows relative imports and re-exports, in either quote style, from .ts or .js', () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-closure-'));
    const put = (f: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(d, f)), { recursive: true });
      fs.writeFileSync(path.join(d, f), text);
    };
    try {
      put('src/a.ts', "import fs from 'node:fs';\nimport { b } from './b.js';\nimport type { T } from \"./t.js\";\nexport * from './e.js';\nimport './side.js';\nimport { gone } from './missing.js';\n// not an import: see './note.js'\n");
      put('src/b.ts', 'import {\n  c,\n  c2,\n} from "../lib/c.js"; export const b = c;\n');
      put('src/t.ts', 'export type T = number;\n');
      put('src/e.ts', "export { b } from './b.js';\n");
      put('src/side.js', 'globalThis.x = 1;\n');
      put('src/note.ts', '');
      put('lib/c.ts', 'export const c = 1, c2 = 2;\n');
      const rel = moduleClosure(path.join(d, 'src', 'a.ts')).map((f) => path.relative(d, f).split(path.sep).join('/'));
      expect(rel).toEqual(['lib/c.ts', 'src/a.ts', 'src/b.ts', 'src/e.ts', 'src/side.js', 'src/t.ts']);
    } finally {
      fs.rmSync(d, { recursive: true, force: true });
    }
  });

  it('the CPU key covers the headers the generated code ships and the IR passes the generator runs', () => {
    const files = new Set(cpuGeneratorFiles());
    for (const f of KERNELS_HEADER_FILES) expect(files.has(f), f).toBe(true);
    // every file kernelsHeader() inlines is one of KERNELS_HEADER_FILES (its `// ---- path` lines)
    const shipped = [...kernelsHeader().matchAll(/^\/\/ ---- (\S+)$/gm)].map((m) => m[1]);
    expect(shipped).toEqual(KERNELS_HEADER_FILES.map((f) => path.relative(path.join(HERE, '..'), f).split(path.sep).join('/')));
    const rel = [...files].map((f) => path.relative(path.join(HERE, '..'), f).split(path.sep).join('/'));
    for (const f of ['runtime/cpp/mpsc_half.hpp', 'compiler/codegen-cpu/cpp/mpsc_kernels.hpp', 'compiler/codegen-cpu/kernels/precision.ts', 'compiler/ir/fuse.ts', 'compiler/ir/scalar_fns.ts', 'compiler/cfamily/text.ts'])
      expect(rel, f).toContain(f);
  });

  it('the CUDA key covers the shared kernels, the Metal lowering it reuses and the IR passes it runs', () => {
    const rel = cudaGeneratorFiles().map((f) => path.relative(path.join(HERE, '..'), f).split(path.sep).join('/'));
    for (const f of ['compiler/codegen-cuda/attention_cuda.ts', 'compiler/kernels/registry.ts', 'compiler/codegen-metal/lower_program.ts', 'compiler/ir/memory_plan.ts', 'compiler/ir/fuse.ts', 'compiler/ir/remat.ts'])
      expect(rel, f).toContain(f);
  });
});

describe('cString', () => {
  it('escapes everything that could end or bend a C string literal', () => {
    expect(cString('fc1.weight')).toBe('"fc1.weight"');
    expect(cString('a"b\\c\nd??=e')).toBe('"a\\042b\\134c\\012d\\077\\077=e"');
    expect(cString('é')).toBe('"\\303\\251"');
  });
});

describe('CPU build cache and binding', () => {
  let modulePath = '';
  let session: Session;
  const programs = tinyProgramSet(4, TAG);

  beforeAll(async () => {
    const [a, b] = await Promise.all([child(), child()]);
    for (const r of [a, b]) {
      if (r.code !== 0) throw new Error(`child build failed (exit ${r.code}):\n${r.err}`);
    }
    const ra = JSON.parse(a.out), rb = JSON.parse(b.out);
    expect(ra.modulePath).toBe(rb.modulePath);
    expect(ra.model).toBe(TAG);
    modulePath = ra.modulePath;
  });
  afterAll(() => {
    session?.close();
    fs.rmSync(cacheDir, { recursive: true, force: true });
  });

  it('concurrent builders leave exactly one complete cache entry, one set of runtime objects and no temporary folders', () => {
    const entries = fs.readdirSync(cacheDir).filter((e) => e !== 'by-inputs');
    expect(entries.filter((e) => e.startsWith('tmp-'))).toEqual([]);
    const rt = entries.filter((e) => e.startsWith('rt-'));
    expect(rt).toHaveLength(1);
    expect(entries.filter((e) => !e.startsWith('rt-'))).toHaveLength(1);
    expect(fs.existsSync(modulePath)).toBe(true);
    expect(path.basename(modulePath)).toMatch(/^mpsc_[0-9a-f]{16}\.node$/);
    // binding.cc and mpsc_runtime.cc compiled once, linked as objects (the model's own source compiled in the entry)
    const objects = ['binding.cc.o', 'mpsc_runtime.cc.o'].map((o) => path.join(cacheDir, rt[0], o));
    for (const o of objects) expect(fs.existsSync(o), o).toBe(true);
    const cm = fs.readFileSync(path.join(path.dirname(modulePath), 'CMakeLists.txt'), 'utf8');
    const addon = cm.match(/add_library\(mpsc_\w+ SHARED ([^\n]*)\)/)![1];
    expect(addon).toContain('"src/model.cc"');
    expect(addon).not.toMatch(/src\/binding\.cc|src\/mpsc_runtime\.cc/);
    for (const o of objects) expect(addon).toContain(`"${o}"`);
  });

  it('another model of the same flags links the same runtime objects (no second compile of them)', async () => {
    const other = tinyProgramSet(2, `${TAG}_b`);
    const built = await buildAddon({ files: generateCpuModel(other).files, cacheDir, jobs: 1 });
    expect(built.cached).toBe(false);
    expect(fs.readdirSync(cacheDir).filter((e) => e.startsWith('rt-'))).toHaveLength(1);
    const s2 = createNativeSession(built.modulePath, other, 'cpu', 1);
    try {
      expect(s2.tensorNames()).toEqual([ODD_NAME, 'fc1.bias'].sort());
    } finally {
      s2.close();
    }
  });

  it('a second build of the same sources is a cache hit', async () => {
    const before = fs.statSync(modulePath).mtimeMs;
    const again = await buildAddon({ files: generateCpuModel(programs).files, cacheDir });
    expect(again.cached).toBe(true);
    expect(again.modulePath).toBe(modulePath);
    expect(fs.statSync(modulePath).mtimeMs).toBe(before);
  });

  it('a build keyed by the generator inputs finds the same entry, then skips code generation', async () => {
    let generated = 0;
    const files = () => {
      generated++;
      return generateCpuModel(programs).files;
    };
    const first = await buildAddon({ files, inputsKey: cpuInputsKey(programs), cacheDir });
    expect(first).toMatchObject({ cached: true, modulePath });
    expect(generated).toBe(1);
    const second = await buildAddon({ files, inputsKey: cpuInputsKey(programs), cacheDir });
    expect(second).toMatchObject({ cached: true, modulePath });
    expect(generated).toBe(1);
  });

  it('different flags give a different key', async () => {
    const files = generateCpuModel(programs).files;
    const { addonKey } = await import('../runtime/native/build.js');
    expect(addonKey(files, '-O2')).not.toBe(addonKey(files, '-O3 -march=native'));
  });

  it('round-trips odd tensor names and reports shapes', () => {
    session = createNativeSession(modulePath, programs, 'cpu', 2);
    expect(session.tensorNames()).toEqual([ODD_NAME, 'fc1.bias'].sort());
    expect(session.tensorShape(ODD_NAME)).toEqual([3, 6]);
    const w = Float32Array.from({ length: 18 }, (_, i) => (i - 9) / 10);
    session.write(ODD_NAME, w);
    expect(Array.from(session.read(ODD_NAME))).toEqual(Array.from(w));
  });

  const x = Float32Array.from({ length: 24 }, (_, i) => Math.sin(i));
  const label = Int32Array.from([0, 1, 2, 1]);
  const sc = { lr: 0.1, t: 1, seed: 1, counter: 0 };

  it('rejects a wrong-length batch, a wrong dtype and a wrong input count with an Error', () => {
    expect(() => session.run('eval', [x.subarray(0, 20), label], sc)).toThrow(/'x' has 20 elements, expected 24/);
    expect(() => session.run('eval', [x, new Int32Array(5)], sc)).toThrow(/'label' has 5 elements/);
    expect(() => session.run('eval', [x, Float32Array.from(label)], sc)).toThrow(/must be an Int32Array/);
    expect(() => session.run('eval', [x], sc)).toThrow(/got 1 inputs, the program takes 2/);
    expect(() => session.write('fc1.bias', new Float32Array(4))).toThrow(/got 4 elements, the tensor has 3/);
    expect(() => session.read('nope')).toThrow(/no persistent tensor/);
  });

  it('reports a label outside the class range as an error, and keeps working afterwards', () => {
    expect(() => session.run('eval', [x, Int32Array.from([0, 1, 3, 1])], sc)).toThrow(/label 3 in row 2 of the batch is outside the class range \[0, 3\)/);
    const out = session.run('eval', [x, label], sc);
    expect(out.length).toBe(2);
    expect(Number.isFinite(out[0])).toBe(true);
  });

  it('trains (loss goes down) and is bitwise reproducible for a fixed thread count', () => {
    const runSteps = (s: Session) => {
      s.write(ODD_NAME, Float32Array.from({ length: 18 }, (_, i) => ((i * 7) % 5) / 10 - 0.2));
      s.write('fc1.bias', new Float32Array(3));
      const losses: number[] = [];
      for (let i = 0; i < 30; i++) losses.push(s.run('train_step', [x, label], { ...sc, t: i + 1, counter: i })[0]);
      return { losses, w: s.read(ODD_NAME) };
    };
    const a = runSteps(session);
    const other = createNativeSession(modulePath, programs, 'cpu', 2);
    const b = runSteps(other);
    other.close();
    expect(a.losses[29]).toBeLessThan(a.losses[0]);
    expect(Array.from(b.w)).toEqual(Array.from(a.w));
    expect(b.losses).toEqual(a.losses);
  });

  it('refuses use after close', () => {
    const s = createNativeSession(modulePath, programs, 'cpu', 1);
    s.close();
    expect(() => s.read('fc1.bias')).toThrow(/after close/);
  });
});
