/**
 * mk::gelu_fwd / mk::gelu_grad (compiler/codegen-cpu/cpp/mpsc_kernels.hpp) on both of their paths: the AVX-512
 * intrinsics (this machine's -march=native, when it has AVX-512) and the GCC / Clang vector-extension path every
 * other build takes (-march=native -mno-avx512f here). test/native/gelu_paths_driver.cpp prints each element's
 * bits; each is checked against the float64 reference (compiler/reference: the table's gelu and its gradient),
 * element by element (gelu within 2.5e-7 max(1, |x|), gelu' within 4e-7 |dy|, NaN where the reference is NaN), and
 * the results must not depend on how the run is split (runs of 1, 7, 13, 37 floats, and in place).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runOp } from '../compiler/reference/fixtures.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
let dir = '';
beforeAll(() => { dir = mkdtempSync(join(tmpdir(), 'mpsc-gelu-')); });
afterAll(() => { if (dir) rmSync(dir, { recursive: true, force: true }); });

const f32 = (hex: string) => new Float32Array(new Uint32Array([parseInt(hex, 16)]).buffer)[0];

function run(tag: string, flags: string[]): { path: string; split: boolean; x: number[]; dy: number[]; y: number[]; g: number[] } {
  const exe = join(dir, `gelu_${tag}`);
  execFileSync('nice', ['g++', '-O2', '-march=native', ...flags, '-fno-math-errno', '-std=c++17', '-Wall', '-Werror',
    `-I${join(root, 'compiler/codegen-cpu/cpp')}`, `-I${join(root, 'runtime/cpp')}`, '-o', exe, join(root, 'test/native/gelu_paths_driver.cpp')],
  { stdio: ['ignore', 'pipe', 'pipe'] });
  const out = execFileSync(exe, { encoding: 'utf8', maxBuffer: 16 << 20 }).trim().split('\n');
  const r = { path: out[0].split(' ')[1], split: out[1] === 'SPLIT 1', x: [] as number[], dy: [] as number[], y: [] as number[], g: [] as number[] };
  for (const line of out.slice(2)) {
    const [x, dy, y, g] = line.split(' ').map(f32);
    r.x.push(x); r.dy.push(dy); r.y.push(y); r.g.push(g);
  }
  return r;
}

describe('gelu run functions on both paths vs the float64 reference', () => {
  // x86: the native build (AVX-512 where the machine has it) and one without AVX-512; elsewhere the native build is the vector path
  const builds: [string, string[]][] = process.arch === 'x64' ? [['native', []], ['vector', ['-mno-avx512f']]] : [['native', []]];
  for (const [tag, flags] of builds) {
    it(`${tag} build`, () => {
      const r = run(tag, flags);
      if (tag === 'vector') expect(r.path).toBe('vector');
      expect(r.split, 'the same bits for every split of the run and in place').toBe(true);
      const n = r.x.length, shape = [n];
      const [y] = runOp('unary', [{ shape, data: Float64Array.from(r.x), dtype: 'f32' }], [shape], { fn: 'gelu' });
      const [g] = runOp('unary_grad', [{ shape, data: Float64Array.from(r.dy), dtype: 'f32' }, { shape, data: Float64Array.from(r.x), dtype: 'f32' }], [shape], { fn: 'gelu' });
      const bad: string[] = [];
      for (let i = 0; i < n; i++) {
        const x = r.x[i];
        const okY = Number.isNaN(y[i]) ? Number.isNaN(r.y[i]) : Math.abs(r.y[i] - y[i]) <= 2.5e-7 * Math.max(1, Math.abs(x));
        const okG = Number.isNaN(g[i]) ? Number.isNaN(r.g[i]) : Math.abs(r.g[i] - g[i]) <= 4e-7 * Math.abs(r.dy[i]) + 1e-30;
        if (!okY || !okG) bad.push(`x=${x}: gelu ${r.y[i]} vs ${y[i]}, grad ${r.g[i]} vs ${g[i]}`);
      }
      expect(bad.slice(0, 5)).toEqual([]);
    }, 120_000);
  }
});
