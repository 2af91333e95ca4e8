/** `mpsc build`: writes the CMake project and sources, compiles the CPU module, reports; bad options exit 1. */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-build-cli-'));
const env = { ...process.env, MPSC_CACHE_DIR: process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache') };

function mpsc(...args: string[]) {
  const r = spawnSync(process.execPath, [path.join(ROOT, 'bin', 'mpsc.js'), ...args], { cwd: ROOT, env, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

afterAll(() => fs.rmSync(out, { recursive: true, force: true }));

describe('mpsc build', () => {
  it('writes the project, compiles the CPU module and prints a report', () => {
    const r = mpsc('build', 'specs/mnist_mlp.model', '-o', out, '--batch', '16');
    expect(r.code, r.stderr).toBe(0);
    for (const f of ['CMakeLists.txt', 'package.json', 'src/model.cc', 'src/mpsc_model.h', 'src/mpsc_runtime.cc', 'src/binding.cc', 'src/mpsc_kernels.hpp']) {
      expect(fs.existsSync(path.join(out, 'cpu', f)), f).toBe(true);
    }
    // the written project stands alone: it compiles the runtime's sources itself (the build cache links them prebuilt)
    expect(fs.readFileSync(path.join(out, 'cpu', 'CMakeLists.txt'), 'utf8')).toMatch(/add_library\(\w+ SHARED "src\/binding\.cc" "src\/model\.cc" "src\/mpsc_runtime\.cc"/);
    expect(r.stdout).toMatch(/model mnist_mlp .*batch 16/);
    expect(r.stdout).toMatch(/module: .*mpsc_[0-9a-f]{16}\.node \((built|cached)\)/);
    expect(r.stdout).toMatch(/train_step\s+16\s+\d+\s/);
    expect(r.stdout).toMatch(/persistent buffers: 12 /); // 4 parameters + exp_avg and exp_avg_sq of each
    expect(r.stdout).toMatch(/planned memory: arena .* \+ persistent .* \+ input batch .* = /);
    const mod = r.stdout.match(/module: (\S+)/)![1];
    expect(fs.existsSync(mod)).toBe(true);
  }, 300_000);

  it('--no-compile only writes the sources', () => {
    const dir = path.join(out, 'nc');
    const r = mpsc('build', 'specs/lenet.model', '-o', dir, '--no-compile');
    expect(r.code, r.stderr).toBe(0);
    expect(fs.existsSync(path.join(dir, 'cpu', 'src', 'model.cc'))).toBe(true);
    expect(r.stdout).not.toMatch(/module:/);
  });

  it('rejects a bad target or batch with exit 1 and a message', () => {
    const a = mpsc('build', 'specs/mnist_mlp.model', '-o', out, '--target', 'gpu', '--no-compile');
    expect(a.code).toBe(1);
    expect(a.stderr).toMatch(/unknown --target 'gpu'/);
    const b = mpsc('build', 'specs/mnist_mlp.model', '-o', out, '--batch', '0', '--no-compile');
    expect(b.code).toBe(1);
    expect(b.stderr).toMatch(/--batch must be a positive integer/);
    const c = mpsc('build', 'specs/nope.model', '--no-compile');
    expect(c.code).toBe(1);
  });
});
