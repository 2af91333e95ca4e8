/**
 * The runtime's thread pool (runtime/cpp/mpsc_runtime.cc): compiles test/native/pool_driver.cpp with
 * the runtime and runs it. Every participant claims chunks, so a worker the OS has not scheduled yet
 * delays nothing; the driver checks under competing busy threads that every index of every job is
 * visited exactly once and that chunks keep their fixed boundaries (bitwise results for any schedule).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dir = mkdtempSync(join(tmpdir(), 'mpsc-pool-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('claims every chunk exactly once, at fixed boundaries, with 2, 3 and 8 threads under load', () => {
  const exe = join(dir, 'pool_driver');
  execFileSync('g++', ['-O2', '-std=c++17', '-pthread', '-Wall', '-Werror', `-I${join(root, 'runtime/cpp')}`, '-o', exe,
    join(root, 'test/native/pool_driver.cpp'), join(root, 'runtime/cpp/mpsc_runtime.cc')], { stdio: ['ignore', 'pipe', 'pipe'] });
  const out = execFileSync(exe, { encoding: 'utf8', timeout: 60_000 });
  expect(out.trim()).toBe('ok 1200');
}, 120_000);
