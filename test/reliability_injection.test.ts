/**
 * No code injection (issue 7): nothing a `.model` file says reaches generated C++ or MSL as
 * code. Names with quotes, backslashes, comment terminators, newlines or `#include` are
 * rejected by the grammar (identifiers are [A-Za-z_][A-Za-z0-9_]*) with a located error; names
 * the grammar allows but C++/MSL reserve (int, class, kernel, device, ...) and very long names
 * compile and mean what the spec says; a model name taken from a hostile *file name* and data
 * paths with odd characters never appear raw in generated source.
 */
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import { generateMetalProject } from '../compiler/codegen-metal/index.js';
import { metalEmuProjectFiles } from '../runtime/metal-emu/session.js';
import { runtimeSources } from '../runtime/native/build.js';
import { codeOnly } from './fixtures/reliability/c_lexer.js';

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-inject-'));
afterAll(() => fs.rmSync(TMP, { recursive: true, force: true }));

const TAIL = `loss cross_entropy(logits, label)
metrics accuracy(logits, label)
optimizer sgd(lr: 0.1, momentum: 0.9)
train { data: synthetic(train_size: 64, test_size: 10), epochs: 1, batch: 8 }
`;
const ok = (net: string, head = 'model m\ninput x: f32[N, 6]\ninput label: i32[N]\n') => `${head}network {\n  ${net}\n}\n${TAIL}`;

function rejection(src: string, file = 'hostile.model'): string {
  try {
    checkSource(src, file);
  } catch (e) {
    if (!(e instanceof UserError)) throw e;
    return e.message;
  }
  throw new Error('the spec was accepted');
}

const HOSTILE = ['fc"x', 'fc\\x', 'fc*/x', 'fc\n#include <stdlib.h>\nx', '"); system("rm -rf ~"); ("', 'fc/*', 'a.b', 'fc-1', '層', 'fc$x', "fc'x", 'fc`id`'];

describe('hostile names are rejected by the grammar, with a located error', () => {
  const places: [string, (n: string) => string][] = [
    ['model name', (n) => ok('logits = x -> linear(3)').replace('model m', `model ${n}`)],
    ['layer as-name', (n) => ok(`logits = x -> linear(3) as ${n}`)],
    ['input name', (n) => ok('logits = x -> linear(3)', `model m\ninput ${n}: f32[N, 6]\ninput x: f32[N, 6]\ninput label: i32[N]\n`)],
    ['block name', (n) => `model m\ninput x: f32[N, 6]\ninput label: i32[N]\nblock ${n}(c: int) {\n  in y\n  out y -> linear(c)\n}\nnetwork {\n  logits = x -> linear(3)\n}\n${TAIL}`],
    ['value name', (n) => ok(`${n} = x -> relu\n  logits = x -> linear(3)`)],
  ];
  for (const [where, make] of places) {
    it(`as a ${where}`, () => {
      for (const name of HOSTILE) {
        const msg = rejection(make(name));
        expect(msg.split('\n')[0], `${where} ${JSON.stringify(name)}`).toMatch(/^hostile\.model:\d+:\d+: error: \S/);
      }
    });
  }
});

/** every generated source file of both backends for a model (C++ CPU model, metal-emu model + MSL, bridge tables) */
function generatedSources(model: CheckedModel, tag: string): { cpu: Record<string, string>; emu: Record<string, string>; project: Record<string, string> } {
  const ps = buildPrograms(model, { batch: 8, evalTail: 2 });
  const cpu = generateCpuModel(ps).files;
  const emu = metalEmuProjectFiles(ps).files;
  const outDir = path.join(TMP, `project-${tag}`);
  const { files } = generateMetalProject(ps, outDir);
  const project: Record<string, string> = {};
  for (const f of files) project[path.relative(outDir, f)] = fs.readFileSync(f, 'utf8');
  return { cpu, emu, project };
}

const isSource = (f: string) => /\.(cc|cpp|hpp|h|inc|metal|mm)$/.test(f);

async function syntaxCheck(files: Record<string, string>, main: string, tag: string, extraIncludes: string[]): Promise<void> {
  const dir = path.join(TMP, `src-${tag}`);
  fs.mkdirSync(dir, { recursive: true });
  for (const [rel, text] of Object.entries({ ...runtimeSources(), ...files })) {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.writeFileSync(path.join(dir, rel), text);
  }
  await run('nice', ['g++', '-std=c++17', '-fsyntax-only', '-Wno-attributes', `-I${dir}`, ...extraIncludes.map((i) => `-I${i}`), path.join(dir, main)], { maxBuffer: 1 << 24 });
}

const EMU_INC = [path.join(ROOT, 'runtime/metal-emu'), path.join(ROOT, 'runtime/metal-emu/include'), path.join(ROOT, 'runtime/cpp')];

describe('names C++ and MSL reserve, and very long names, compile and keep their meaning', () => {
  const long = 'L' + 'x'.repeat(4095);
  const src = `model int
input class: f32[N, 6]
input delete: i32[N]
block kernel(device: int) {
  in thread
  out thread -> linear(device) as constant
}
network {
  main = class -> kernel(8) as std -> relu as __asm__ -> linear(5) as ${long}
  logits = main -> linear(3) as return
}
loss cross_entropy(logits, delete)
metrics accuracy(logits, delete)
optimizer adam(lr: 0.01)
train { data: synthetic(train_size: 64, test_size: 10), epochs: 1, batch: 8 }
`;
  const model = checkSource(src, 'keywords.model');
  const gen = generatedSources(model, 'kw');

  it('the spec names reach the model as given (parameter paths, inputs, model name)', () => {
    expect(model.name).toBe('int');
    expect(model.inputs.map((i) => i.name)).toEqual(['class', 'delete']);
    expect(model.params.map((p) => p.path)).toEqual(['std.constant.weight', 'std.constant.bias', `${long}.weight`, `${long}.bias`, 'return.weight', 'return.bias']);
  });

  it('the generated C++ names them only inside string literals (the descriptor table), and compiles', async () => {
    const code = codeOnly(gen.cpu['model.cc']);
    expect(code).not.toContain(long);
    expect(code).not.toMatch(/\b__asm__\b/);
    expect(gen.cpu['model.cc']).toContain(`"${long}.weight"`);
    expect(gen.cpu['model.cc']).toContain('"std.constant.weight"');
    await syntaxCheck(gen.cpu, 'model.cc', 'kw-cpu', []);
  }, 300_000);

  it('the generated MSL and metal-emu model compile (g++ over the emulator headers)', async () => {
    for (const [f, text] of Object.entries(gen.emu)) if (isSource(f)) expect(codeOnly(text), f).not.toContain(long);
    await syntaxCheck(gen.emu, 'model_metal_emu.cc', 'kw-emu', EMU_INC);
  }, 300_000);
});

describe('distinctive spec names never appear outside literals and comments', () => {
  const marks = ['zqmodelmark', 'zqinputmark', 'zqlabelmark', 'zqlayermark', 'zqblockmark', 'zqvaluemark', 'zqparammark'];
  const src = `model zqmodelmark
input zqinputmark: f32[N, 2, 4, 4]
input zqlabelmark: i32[N]
block zqblockmark(zqparammark: int) {
  in y
  out y -> conv2d(zqparammark, 3, padding: 1) -> batchnorm -> relu -> dropout(0.25)
}
network {
  zqvaluemark = zqinputmark -> zqblockmark(4) as zqlayermark -> maxpool(2) -> flatten
  logits = zqvaluemark -> linear(3) -> log_softmax
}
loss nll(logits, zqlabelmark)
metrics accuracy(logits, zqlabelmark)
optimizer adamw(lr: 0.01)
train { data: csv(train: "zq\\"weird*/ #include <x>\\\\ path.csv"), epochs: 1, batch: 8 }
`;
  const model = checkSource(src, path.join(TMP, 'marks.model'));
  const gen = generatedSources(model, 'marks');

  it('the data path stays data: it is in the DataSource, in no generated file', () => {
    expect(model.train.data.kind).toBe('csv');
    expect((model.train.data as { train: string }).train).toContain('zq"weird*/ #include <x>\\ path.csv');
    for (const [f, text] of Object.entries({ ...gen.cpu, ...gen.emu, ...gen.project })) expect(text, f).not.toContain('weird');
  });

  it('C++, MSL, metal-emu and the bridge tables hold the names only in literals/comments', () => {
    const all = { ...gen.cpu, ...gen.emu, ...gen.project };
    let sources = 0;
    for (const [f, text] of Object.entries(all)) {
      if (!isSource(f)) continue;
      sources++;
      const code = codeOnly(text);
      for (const m of marks) expect(code.includes(m), `${f} uses '${m}' as code`).toBe(false);
    }
    expect(sources).toBeGreaterThanOrEqual(4);
    // and the names did reach the generated descriptor tables (as literals)
    expect(gen.cpu['model.cc']).toContain('"zqlayermark.conv2d0.weight"');
  });
});

describe('a model named by a hostile file name (no model line)', () => {
  // a file name cannot hold '/', so no '*/' here; comment terminators are covered by the grammar tests above
  const evil = 'ev"il\\ * #include <x>\n"); system("rm -rf ~"); #\u2028é\\';
  const dir = path.join(TMP, 'evil');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${evil}.model`);
  fs.writeFileSync(file, ok('logits = x -> linear(3) as fc').replace('model m\n', ''));
  const model = checkFile(file);
  const gen = generatedSources(model, 'evil');

  it('takes the name from the file', () => {
    expect(model.name).toBe(evil);
  });

  it('no generated file holds the raw name, and no code outside literals/comments calls system()', () => {
    for (const [f, text] of Object.entries({ ...gen.cpu, ...gen.emu, ...gen.project })) {
      expect(text.includes(evil), f).toBe(false);
      if (isSource(f)) expect(codeOnly(text), f).not.toMatch(/system\s*\(/);
    }
  });

  it('the C++ and metal-emu sources still compile', async () => {
    await Promise.all([syntaxCheck(gen.cpu, 'model.cc', 'evil-cpu', []), syntaxCheck(gen.emu, 'model_metal_emu.cc', 'evil-emu', EMU_INC)]);
  }, 300_000);

  it('built and loaded, the module reports exactly that name and the spec tensors (the literal means what the spec says)', async () => {
    const { createCpuSession } = await import('../runtime/native/native_session.js');
    const { buildAddon, loadAddon } = await import('../runtime/native/build.js');
    const ps = buildPrograms(model, { batch: 8, evalTail: 2 });
    const cacheDir = path.join(TMP, 'cache');
    const built = await buildAddon({ files: generateCpuModel(ps).files, cxxflags: '-O0', cacheDir });
    const desc = loadAddon<{ describe(): { model: string; tensors: { name: string }[] } }>(built.modulePath).describe();
    expect(desc.model).toBe(evil);
    expect(desc.tensors.map((t) => t.name).sort()).toEqual(['fc.bias', 'fc.bias.momentum_buffer', 'fc.weight', 'fc.weight.momentum_buffer']);
    const session = await createCpuSession(ps, { cxxflags: '-O0', cacheDir });
    try {
      const out = session.run('train_step', [new Float32Array(48).fill(0.5), new Int32Array(8).fill(1)], { lr: 0.1, t: 1, seed: 0, counter: 0 });
      expect(Number.isFinite(out[0])).toBe(true);
    } finally {
      session.close();
    }
  }, 600_000);
});

describe('codeOnly (the scanner these checks rely on)', () => {
  it('keeps code, drops comments and literals of every kind', () => {
    const src = 'int zqa = 1; // zqb\nconst char* s = "zqc\\"zqd"; /* zqe\n */ char c = \'"\'; auto r = R"X(zqf)")X"; f(zqg); u8"zqh";\n#define X // zqi \\\n zqj\nzqk';
    const code = codeOnly(src);
    for (const kept of ['zqa', 'zqg', 'zqk']) expect(code).toContain(kept);
    for (const dropped of ['zqb', 'zqc', 'zqd', 'zqe', 'zqf', 'zqh', 'zqi', 'zqj']) expect(code).not.toContain(dropped);
  });
});
