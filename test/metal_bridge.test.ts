/**
 * The macOS Metal bridge, checked on Linux as far as that goes (docs/metal.md, "What still needs a
 * Mac"): the Objective-C++ file compiles with ARC against the declaration headers of
 * runtime/metal-strict/sdk for the macOS 15 SDK and for an older SDK, with macOS 13 as deployment
 * target (negative controls: a misspelled selector, a wrong argument type, the SDK guard or the
 * @available guard removed); the CMake probes run under `cmake -P` with a fake `xcrun` (the
 * Xcode 26 `metal` stub must select the run-time compilation fallback); the generated project
 * carries package.json and node-addon-api's folder, so it configures outside the mpsc tree; and
 * the bridge handles a nil default device, the SIMD width, command-buffer timeouts and the
 * device-name lifetime.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { generateMetalProject } from '../compiler/codegen-metal/index.js';
import { BRIDGE_NAPI_VERSION } from '../compiler/codegen-metal/bridge_host.js';
import { checkBridge, findClang } from '../runtime/metal-strict/strict_check.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const BRIDGE = path.join(ROOT, 'runtime/metal-bridge');
const CLANG = findClang();

function clang(): string {
  if (!CLANG) throw new Error('clang++ is not installed: the Objective-C++ bridge check needs it (Debian: apt-get install -y clang; .ci/run installs it)');
  return CLANG;
}

let out = '';
let bridge = '';
beforeAll(() => {
  // lenet with a forced CPU fallback step: the .inc then holds CPU kernels too
  const model = checkFile(path.join(ROOT, 'specs/lenet.model'));
  out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-bridge-'));
  generateMetalProject(buildPrograms(model, { batch: model.train.batch }), out, { fallbackOps: ['maxpool2d_grad'] });
  bridge = path.join(out, 'bridge');
});
afterAll(() => {
  if (out) fs.rmSync(out, { recursive: true, force: true });
});

/** a copy of the bridge with `from` replaced (the edit must change the file), in the generated project */
function editedBridge(from: string | RegExp, to: string): string {
  const src = fs.readFileSync(path.join(bridge, 'mpsc_metal_bridge.mm'), 'utf8');
  const edited = src.replace(from, to);
  expect(edited).not.toBe(src);
  const f = path.join(bridge, `edited_${Math.random().toString(36).slice(2)}.mm`);
  fs.writeFileSync(f, edited);
  return f;
}

function expectClean(r: { ok: boolean; diagnostics: string }) {
  expect(r.ok ? '' : r.diagnostics).toBe('');
}

describe('the Objective-C++ bridge against Metal / Foundation declarations', () => {
  it('compiles with ARC for the macOS 15 SDK (deployment target macOS 13 and 15)', () => {
    expectClean(checkBridge(clang(), path.join(bridge, 'mpsc_metal_bridge.mm'), { sdk: 150000, minMacos: '13.0' }));
    expectClean(checkBridge(clang(), path.join(bridge, 'mpsc_metal_bridge.mm'), { sdk: 150000, minMacos: '15.0' }));
  });
  it('compiles for the macOS 14 SDK, which has no mathMode (the SDK guard)', () => {
    expectClean(checkBridge(clang(), path.join(bridge, 'mpsc_metal_bridge.mm'), { sdk: 140000, minMacos: '13.0' }));
  });

  it('negative control: a misspelled selector fails', () => {
    const r = checkBridge(clang(), editedBridge('[be->device newCommandQueue]', '[be->device newCommandQueues]'), { sdk: 150000, minMacos: '13.0' });
    expect(r.ok).toBe(false);
    expect(r.diagnostics).toMatch(/newCommandQueues/);
  });
  it('negative control: an argument of the wrong type fails', () => {
    const r = checkBridge(clang(), editedBridge('[enc setBuffer:region_buffer(be, S, b) offset:', '[enc setBuffer:be->queue offset:'), { sdk: 150000, minMacos: '13.0' });
    expect(r.ok).toBe(false);
    expect(r.diagnostics).toMatch(/cannot initialize a parameter of type 'id<MTLBuffer>' with an lvalue of type '__strong id<MTLCommandQueue>'/);
  });
  it('negative control: without the SDK guard the macOS 14 SDK fails (defect 3)', () => {
    const f = editedBridge(/#if defined\(__MAC_OS_X_VERSION_MAX_ALLOWED\) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000\n([\s\S]*?)#endif\n/, '$1');
    expectClean(checkBridge(clang(), f, { sdk: 150000, minMacos: '13.0' }));
    const r = checkBridge(clang(), f, { sdk: 140000, minMacos: '13.0' });
    expect(r.ok).toBe(false);
    expect(r.diagnostics).toMatch(/property 'mathMode' not found/);
  });
  it('negative control: without @available, macOS 15 API fails for a macOS 13 deployment target', () => {
    const r = checkBridge(clang(), editedBridge('if (@available(macOS 15.0, *)) {', 'if (true) {'), { sdk: 150000, minMacos: '13.0' });
    expect(r.ok).toBe(false);
    expect(r.diagnostics).toMatch(/'setMathMode:' is only available on macOS 15\.0 or newer/);
  });
});

describe('the bridge of a bf16 program (bfloat: MSL 3.1 and a GPU check, mpsc_metal_caps.h)', () => {
  it('compiles for the macOS 13, 14 and 15 SDKs (the MSL 3.1 and Metal3 guards)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-bridge-bf16-'));
    try {
      const model = checkFile(path.join(ROOT, 'specs/mnist_mlp.model'));
      generateMetalProject(buildPrograms({ ...model, train: { ...model.train, precision: 'bf16' } }, { batch: 8 }), dir);
      const mm = path.join(dir, 'bridge', 'mpsc_metal_bridge.mm');
      expect(fs.readFileSync(path.join(dir, 'bridge', 'mpsc_metal_plan.inc'), 'utf8')).toMatch(/kPrograms, true \};/);
      for (const sdk of [130000, 140000, 150000]) expectClean(checkBridge(clang(), mm, { sdk, minMacos: '13.0' }));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
  it('checks the GPU before loading any library, and compiles bfloat libraries as MSL 3.1', () => {
    const src = fs.readFileSync(path.join(BRIDGE, 'mpsc_metal_bridge.mm'), 'utf8');
    expect(src).toMatch(/if \(kModel\.needs_bfloat\) \{[\s\S]*?if \(mpsc_bfloat_unsupported\(gpu, why, sizeof why\)\) \{\s*set_error\(ctx, why\);\s*delete be;\s*return nullptr;/);
    expect(src.indexOf('kModel.needs_bfloat')).toBeLessThan(src.indexOf('S.library = load_library('));
    expect(src).toMatch(/if \(P\.uses_bfloat\) \{\s*if \(@available\(macOS 14\.0, \*\)\) opts\.languageVersion = MTLLanguageVersion3_1;/);
    expect(fs.readFileSync(path.join(BRIDGE, 'CMakeLists.txt'), 'utf8')).toMatch(/if\(bf16_lib\)\s*set\(std metal3\.1\)/);
  });
});

describe('bridge run-time behaviour (source facts the compile check cannot see)', () => {
  const src = fs.readFileSync(path.join(BRIDGE, 'mpsc_metal_bridge.mm'), 'utf8');
  it('falls back to MTLCopyAllDevices when MTLCreateSystemDefaultDevice returns nil, and links CoreGraphics (defect 2)', () => {
    expect(src).toMatch(/MTLCreateSystemDefaultDevice\(\);\s*if \(d\) return d;\s*NSArray<id<MTLDevice>>\* all = MTLCopyAllDevices\(\);/);
    expect(fs.readFileSync(path.join(BRIDGE, 'CMakeLists.txt'), 'utf8')).toMatch(/set\(MPSC_FRAMEWORKS [^)]*"-framework CoreGraphics"\)/);
  });
  it('refuses a pipeline whose threadExecutionWidth is not 32 (defect 5)', () => {
    expect(src).toMatch(/constexpr NSUInteger kSimdWidth = 32;/);
    expect(src).toMatch(/if \(pso\.threadExecutionWidth != kSimdWidth\) \{\s*err = [^}]*SIMD-groups of[^}]*return nil;\s*\}/);
  });
  it('never lets the runtime free memory a timed-out command buffer may write (defect 6)', () => {
    // the timeout keeps the command buffer and poisons the session ...
    expect(src).toMatch(/dispatch_semaphore_wait\([^)]*\)\) != 0\) \{\s*be->in_flight = cb;\s*be->poisoned = /);
    // ... every later run fails before touching memory ...
    expect(src).toMatch(/if \(!be->poisoned\.empty\(\)\) \{\s*set_error\(ctx, be->poisoned\);\s*return 1;\s*\}\s*for \(int i = 0; i < P\.ninputs/);
    // ... and freeing waits for the GPU before the runtime releases the arena
    expect(src).toMatch(/if \(be->in_flight\) \[be->in_flight waitUntilCompleted\];\s*delete be;/);
  });
  it('returns a device name owned by the session (defect 7a)', () => {
    expect(src).toMatch(/\*device_name = be->device_name\.c_str\(\);/);
    expect(src).not.toMatch(/\*device_name = be->device\.name\.UTF8String/);
  });
});

/** runs a CMake script with the bridge's probes; returns its messages (stderr) and status */
function cmakeScript(body: string, env: Record<string, string> = {}): { status: number | null; text: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cmake-probe-'));
  try {
    const script = path.join(dir, 'probe.cmake');
    fs.writeFileSync(script, `include("${path.join(BRIDGE, 'mpsc_bridge.cmake')}")\n${body.replaceAll('@DIR@', dir)}\n`);
    const r = spawnSync('cmake', ['-P', script], { cwd: dir, encoding: 'utf8', env: { ...process.env, ...env } });
    return { status: r.status, text: `${r.stdout}${r.stderr}` };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** a folder with a fake `xcrun`: 'stub' behaves like Xcode 26 without the Metal Toolchain component */
function fakeXcrun(kind: 'stub' | 'working'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-fake-xcrun-'));
  const body = kind === 'stub'
    ? `#!/bin/sh
# xcrun -sdk macosx -f metal finds the stub; running it fails
for a in "$@"; do [ "$a" = "-f" ] && { echo /usr/bin/metal; exit 0; }; done
echo "error: error: cannot execute tool 'metal' due to missing Metal Toolchain; use: xcodebuild -downloadComponent MetalToolchain" >&2
exit 1
`
    : `#!/bin/sh
# writes the file after -o, as metal -c / metallib do
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
[ -n "$out" ] && : > "$out"
exit 0
`;
  fs.writeFileSync(path.join(dir, 'xcrun'), body, { mode: 0o755 });
  return dir;
}

describe('CMake probes of the bridge project', () => {
  const probe = 'mpsc_probe_metal_toolchain(OK "@DIR@/work")\nmessage(STATUS "metal=${OK} why=${OK_WHY}")';
  const hostPath = (process.env.PATH ?? '').split(':').filter((d) => !fs.existsSync(path.join(d, 'xcrun'))).join(':');

  it('the Xcode 26 metal stub selects the fallback (defect 1)', () => {
    const bin = fakeXcrun('stub');
    try {
      // the old probe (`xcrun -sdk macosx -f metal`) would succeed here
      expect(spawnSync(path.join(bin, 'xcrun'), ['-sdk', 'macosx', '-f', 'metal']).status).toBe(0);
      const r = cmakeScript(probe, { PATH: `${bin}:${hostPath}` });
      expect(r.status).toBe(0);
      expect(r.text).toMatch(/metal=FALSE why=1 .*missing Metal Toolchain/);
    } finally {
      fs.rmSync(bin, { recursive: true, force: true });
    }
  });
  it('a working toolchain (compiles .air, links .metallib) is detected', () => {
    const bin = fakeXcrun('working');
    try {
      const r = cmakeScript(probe, { PATH: `${bin}:${hostPath}` });
      expect(r.text).toMatch(/metal=TRUE/);
    } finally {
      fs.rmSync(bin, { recursive: true, force: true });
    }
  });
  it('no xcrun at all selects the fallback', () => {
    const r = cmakeScript(probe, { PATH: hostPath });
    expect(r.text).toMatch(/metal=FALSE/);
  });
  it('CMakeLists.txt builds .metallib files only when the probe passes', () => {
    const cm = fs.readFileSync(path.join(BRIDGE, 'CMakeLists.txt'), 'utf8');
    expect(cm).not.toMatch(/xcrun -sdk macosx -f metal/);
    expect(cm).toMatch(/mpsc_probe_metal_toolchain\(MPSC_METAL_TOOLCHAIN [^)]*\)\s*set\(MPSC_METALLIBS ""\)\s*if\(MPSC_METAL_TOOLCHAIN\)[\s\S]*add_custom_target\(mpsc_metallibs ALL[\s\S]*else\(\)/);
  });
});

describe('the generated bridge project outside the mpsc tree (defect 4)', () => {
  it('has package.json for cmake-js and the napi.h folder next to CMakeLists.txt', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(bridge, 'package.json'), 'utf8'));
    expect(pkg.binary.napi_versions).toEqual([BRIDGE_NAPI_VERSION]);
    expect(fs.readFileSync(path.join(bridge, 'CMakeLists.txt'), 'utf8')).toContain(`NAPI_VERSION=${BRIDGE_NAPI_VERSION}`);
    expect(fs.existsSync(path.join(bridge, 'mpsc_bridge.cmake'))).toBe(true);
    expect(fs.readFileSync(path.join(bridge, 'mpsc_paths.cmake'), 'utf8')).toMatch(/^set\(MPSC_NAPI_INC_RECORDED "[^"]+"\)$/m);
  });
  it('finds napi.h from a project folder with no node_modules above it', () => {
    expect(fs.existsSync(path.join(os.tmpdir(), 'node_modules'))).toBe(false);
    const env = { MPSC_NAPI_INC: '' };
    const found = cmakeScript(`include("${path.join(bridge, 'mpsc_paths.cmake')}")\nunset(ENV{MPSC_NAPI_INC})\nmpsc_find_napi_include(INC "${bridge}")\nmessage(STATUS "napi=\${INC}")`, env);
    expect(found.status).toBe(0);
    const inc = /napi=(.*)/.exec(found.text)![1].trim();
    expect(fs.existsSync(path.join(inc, 'napi.h'))).toBe(true);
    // without the recorded folder (the project as mpsc wrote it before): a fatal error that names the fix
    const missing = cmakeScript(`unset(ENV{MPSC_NAPI_INC})\nmpsc_find_napi_include(INC "${bridge}")`, env);
    expect(missing.status).not.toBe(0);
    expect(missing.text).toMatch(/cannot find node-addon-api's napi\.h[\s\S]*MPSC_NAPI_INC/);
  });
  it('the generated plan tables compile as C++ (g++)', () => {
    execFileSync('g++', ['-std=c++17', '-fsyntax-only', '-x', 'c++', path.join(bridge, 'mpsc_metal_plan.inc')], { stdio: ['ignore', 'ignore', 'pipe'] });
  });
});
