import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { layersWithRole } from '../compiler/check/layers.js';
import { OPTIMIZERS, SCHEDULES, DATA_SOURCES, TRAIN_KEYS } from '../compiler/check/settings.js';
import { INITS } from '../compiler/check/args.js';
import { checkSource } from '../compiler/check/index.js';
import { textProblem } from '../compiler/utf8.js';

function mpsc(...args: string[]) {
  return spawnSync(process.execPath, ['bin/mpsc.js', ...args], { encoding: 'utf8', timeout: 60_000 });
}

describe('mpsc check', () => {
  const specs = [...readdirSync('specs').filter((f) => f.endsWith('.model')).map((f) => `specs/${f}`), 'bench/mnist_mlp_b256_adam.model', 'bench/mnist_cnn_b64_sgdm.model', 'bench/seed_cnn_b32_64px_adam.model'];
  it('specs/ holds the required examples', () => {
    for (const f of ['mnist_mlp', 'lenet', 'resnet_small', 'seed_cnn']) expect(specs).toContain(`specs/${f}.model`);
  });
  for (const f of specs) {
    it(`${f} exits 0 with a summary`, () => {
      const r = mpsc('check', f);
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(r.stdout).toContain('parameters:');
    });
  }

  it('--json gives the summary as JSON', () => {
    const r = mpsc('check', 'specs/mnist_mlp.model', '--json');
    expect(r.status).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.layers.map((l: { path: string }) => l.path)).toEqual(['flatten0', 'fc1', 'relu0', 'fc2']);
    expect(s.totals.params).toBe(784 * 256 + 256 + 256 * 10 + 10);
    expect(s.totals.persistentBytes).toBe(s.totals.params * 4 * 4); // params + grads + adam's 2 moments
  });

  it('--ir prints the programs as a backend runs them: fused for --device (cpu by default)', () => {
    const cpu = mpsc('check', 'specs/lenet.model', '--ir', 'all');
    expect(cpu.status).toBe(0);
    expect(cpu.stdout).toMatch(/^# programs as the cpu backend runs them/);
    expect(cpu.stdout).toMatch(/conv2d\(%image, %conv2d0\.weight, %conv2d0\.bias\) \{[^}]*epilogue=relu\}/);
    expect(cpu.stdout).toMatch(/maxpool2d_grad\((%\d+), (%\d+), \2\) \{[^}]*relu_grad=true\}/);
    const metal = mpsc('check', 'specs/lenet.model', '--ir', 'eval', '--device', 'metal');
    expect(metal.stdout).toMatch(/epilogue=relu/);
    expect(metal.stdout).not.toMatch(/relu_grad/);
    const ref = mpsc('check', 'specs/lenet.model', '--ir', '--device', 'reference');
    expect(ref.stdout).not.toMatch(/epilogue|relu_grad|relu_in/);
    expect(ref.stdout).toMatch(/unary\(%\d+\) \{fn=relu\}/);
    const bad = mpsc('check', 'specs/lenet.model', '--ir', '--device', 'tpu');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/unknown --device 'tpu'[\s\S]*use one of cpu, cuda, metal, metal-emu, reference/);
    // the spec right after --ir is the spec, not --ir's program
    const after = mpsc('check', '--ir', 'specs/lenet.model');
    expect(after.status).toBe(0);
    expect(after.stdout).toMatch(/^# programs as the cpu backend runs them[\s\S]*program train_step/);
    const none = mpsc('check', '--ir');
    expect(none.status).toBe(1);
    expect(none.stderr).toMatch(/missing required argument 'spec'/);
  });

  it('an invalid spec exits 1 with file:line:col diagnostics; a missing file exits 1', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mpsc-fe-'));
    const f = join(dir, 'bad.model');
    writeFileSync(f, readFileSync('specs/lenet.model', 'utf8').replace('-> flatten ', ''));
    const r = mpsc('check', f);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${f}:13:6: error: cross_entropy 'loss' expects label i32[N, 64, 7]`);
    expect(r.stderr).toContain("hint: insert 'flatten' before the output layer");
    const m = mpsc('check', join(dir, 'nope.model'));
    expect(m.status).toBe(1);
    expect(m.stderr).toContain('no such file');
  });

  it('a binary file, a Latin-1 spec or a folder given as the spec: one line saying so, exit 1 (no dump of the bytes)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mpsc-fe-'));
    const bin = join(dir, 'w.safetensors');
    writeFileSync(bin, Buffer.from([0x40, 0, 0, 0, 0, 0, 0, 0, 0x7b, 0xff, 0xfe, 0x89]));
    const b = mpsc('check', bin);
    expect(b.status).toBe(1);
    expect(b.stderr).toContain(`${bin}:1:2: error: this is not a .model spec: a NUL byte (byte offset 1); a spec is UTF-8 text`);
    expect(b.stderr.split('\n').filter((l) => l.includes('error:'))).toHaveLength(1);
    const latin1 = join(dir, 'latin1.model');
    writeFileSync(latin1, Buffer.from(readFileSync('specs/lenet.model', 'utf8').replace('model lenet', 'model lenet\n# caf\xe9'), 'latin1'));
    const l = mpsc('check', latin1);
    expect(l.status).toBe(1);
    expect(l.stderr).toMatch(/latin1\.model:\d+:6: error: this is not a \.model spec: byte 0xE9 is not valid UTF-8 \(byte offset \d+\)[^]*converted to UTF-8/);
    const d = mpsc('check', dir);
    expect(d.status).toBe(1);
    expect(d.stderr).toContain(`${dir}: is a folder, not a .model file`);
  });
});

describe('textProblem (compiler/utf8.ts)', () => {
  it('agrees with a fatal TextDecoder on random and edge-case bytes, and names line and offset', () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff;
    const cases: Uint8Array[] = [
      Uint8Array.from([0xe0, 0x80, 0x80]), // overlong
      Uint8Array.from([0xed, 0xa0, 0x80]), // surrogate
      Uint8Array.from([0xf4, 0x90, 0x80, 0x80]), // above U+10FFFF
      Uint8Array.from([0xf0, 0x9f, 0x98]), // cut short
      Uint8Array.from([0xc0, 0xaf]),
      Buffer.from('héllo €𝄞 ok\n'),
    ];
    for (let n = 0; n < 3000; n++) {
      const len = 1 + (rnd() % 6);
      // bias towards lead and continuation bytes so that multi-byte forms are common
      cases.push(Uint8Array.from({ length: len }, () => { const r = rnd(); return r < 64 ? 0x61 : r < 128 ? 0x80 | (rnd() & 0x3f) : 0xc0 | (rnd() & 0x3f); }));
    }
    for (const b of cases) {
      let ok = true;
      try {
        new TextDecoder('utf-8', { fatal: true }).decode(b);
      } catch {
        ok = false;
      }
      expect(textProblem(b) === null, Buffer.from(b).toString('hex')).toBe(ok && !b.includes(0));
    }
    expect(textProblem(Buffer.from('ab\ncd\n\xff', 'latin1'))).toEqual({ offset: 6, line: 3, col: 1, what: 'byte 0xFF is not valid UTF-8' });
    expect(textProblem(Buffer.from('a\nb\0'))).toEqual({ offset: 3, line: 2, col: 2, what: 'a NUL byte' });
    expect(textProblem(Buffer.concat([Buffer.from('é€x'), Buffer.from([0xff])]))).toEqual({ offset: 6, line: 1, col: 4, what: 'byte 0xFF is not valid UTF-8' });
  });
});

describe('docs/language.md documents the tables', () => {
  const doc = readFileSync('docs/language.md', 'utf8');
  const names = [
    ...layersWithRole('layer').map((d) => d.name),
    ...layersWithRole('loss').map((d) => d.name),
    ...layersWithRole('metric').map((d) => d.name),
    ...Object.keys(OPTIMIZERS),
    ...Object.keys(SCHEDULES),
    ...Object.keys(DATA_SOURCES),
    ...TRAIN_KEYS.map((k) => k.name),
    ...Object.keys(INITS),
  ];
  it('the example at the top of the page checks', () => {
    const example = doc.split('```')[1];
    const m = checkSource(example, 'docs/example.model');
    expect(m.layers.map((l) => l.path)).toContain('stage2.maxpool0');
    expect(m.params.map((p) => p.path)).toContain('fc2.weight');
  });
  for (const n of names) it(`documents \`${n}\``, () => expect(doc).toContain(`| \`${n}\` |`));
  it('documents every argument of every layer', () => {
    for (const d of [...layersWithRole('layer'), ...layersWithRole('loss'), ...layersWithRole('metric')]) {
      const row = doc.split('\n').find((l) => l.startsWith(`| \`${d.name}\` |`))!;
      for (const a of d.args) if (a.name !== 'shape') expect(row, `${d.name}.${a.name}`).toContain(a.name);
    }
  });
});
