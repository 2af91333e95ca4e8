/**
 * runtime/cpp/fast (sgemm.h, conv.h) against naive double-precision loops: compiles
 * test/native/fast_gemm_driver.cpp once, runs it, and checks every case it reports
 * (relative error < 1e-4, and nparts = 2, 3 bitwise equal to nparts = 1).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

interface Case {
  kind: string;
  name: string;
  err: number;
  same: boolean;
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
let dir = '';
let cases: Case[] = [];
let declared = -1;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'mpsc-fast-gemm-'));
  const exe = join(dir, 'fast_gemm_driver');
  execFileSync(
    'nice',
    ['g++', '-O2', '-march=native', '-std=c++17', '-pthread', '-Wall', '-Werror', '-o', exe,
      join(root, 'test/native/fast_gemm_driver.cpp')],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const out = execFileSync(exe, { encoding: 'utf8', maxBuffer: 16 << 20 });
  for (const line of out.split('\n')) {
    const m = /^CASE (\S+) (\S+) err=(\S+) same=([01])$/.exec(line);
    if (m) cases.push({ kind: m[1], name: m[2], err: Number(m[3]), same: m[4] === '1' });
    const d = /^DONE (\d+)$/.exec(line);
    if (d) declared = Number(d[1]);
  }
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const bad = (kind: string | RegExp) =>
  cases
    .filter((c) => (typeof kind === 'string' ? c.kind === kind : kind.test(c.kind)))
    .filter((c) => !(c.err < 1e-4) || !c.same)
    .map((c) => `${c.kind} ${c.name} err=${c.err} same=${c.same}`);

describe('fast sgemm / conv core (runtime/cpp/fast)', () => {
  it('the driver ran to the end and reported every case', () => {
    expect(declared).toBeGreaterThan(0);
    expect(cases.length).toBe(declared);
  });

  it('sgemm: all transposes, odd sizes, alpha/beta, epilogues, 1..3 parts', () => {
    const g = cases.filter((c) => c.kind === 'sgemm');
    expect(g.length).toBeGreaterThanOrEqual(4 * 11 + 4 * 7 + 2);
    for (const t of ['NN', 'NT', 'TN', 'TT']) expect(g.some((c) => c.name.startsWith(`${t}_1x1x1`))).toBe(true);
    expect(bad('sgemm')).toEqual([]);
  });

  it('conv2d forward (plain and fused bias+relu)', () => {
    expect(cases.filter((c) => c.kind.startsWith('conv_fwd')).length).toBe(2 * 19);
    expect(bad(/^conv_fwd/)).toEqual([]);
  });

  it('conv2d grad-input', () => {
    expect(cases.filter((c) => c.kind === 'conv_grad_input').length).toBe(19);
    expect(bad('conv_grad_input')).toEqual([]);
  });

  it('conv2d grad-weight and grad-bias', () => {
    expect(cases.filter((c) => c.kind === 'conv_grad_weight').length).toBe(19);
    expect(bad('conv_grad_weight')).toEqual([]);
    expect(bad('conv_grad_bias')).toEqual([]);
  });

  it('backward passes with dy fused into the packing (relu-grad provider) match the plain passes bit for bit', () => {
    expect(cases.filter((c) => c.kind === 'conv_grad_input_fused').length).toBe(6);
    expect(cases.filter((c) => c.kind === 'conv_grad_weight_fused').length).toBe(6);
    expect(bad(/_fused$/)).toEqual([]);
  });

  it('covers stride 2, dilation 2, groups 2, depthwise, 1 channel, 1x1 and chunked im2col', () => {
    for (const label of ['stride2_', 'dilation2_', 'groups2_', 'depthwise_', 'one_channel_', 'pointwise_', 'chunked_'])
      expect(cases.some((c) => c.kind === 'conv_fwd' && c.name.startsWith(label))).toBe(true);
  });
});
