// Front-end rough edges of issue 16, item 5: a non-ASCII name gives one error with a hint (no cascade);
// an empty file says so once; `mpsc check` warns about a data file that does not exist; an unknown layer
// lists the closest layers; an mse shape mismatch has a hint; `--json` prints errors as JSON objects.
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkSourceWithWarnings } from '../compiler/check/index.js';
import { DiagnosticsError } from '../compiler/diagnostics.js';

const dir = mkdtempSync(join(tmpdir(), 'mpsc-fe16-'));

function mpsc(...args: string[]) {
  return spawnSync(process.execPath, ['bin/mpsc.js', ...args], { encoding: 'utf8', timeout: 60_000 });
}

function spec(body: { inputs?: string; network: string; loss?: string; data?: string }): string {
  return `model t
${body.inputs ?? 'input x: f32[N, 4]\ninput label: i32[N]'}
network {
  ${body.network}
}
loss ${body.loss ?? 'cross_entropy(logits, label)'}
optimizer sgd(lr: 0.1)
train { data: ${body.data ?? 'synthetic()'} }
`;
}

/** the diagnostics of a spec that does not check */
function errorsOf(text: string, file = 'spec.model') {
  try {
    checkSourceWithWarnings(text, join(dir, file));
  } catch (e) {
    expect(e).toBeInstanceOf(DiagnosticsError);
    return (e as DiagnosticsError).diagnostics;
  }
  throw new Error('expected the spec not to check');
}

describe('non-ASCII names', () => {
  it('one error per distinct name, spanning it, with an ASCII spelling as the hint, and no cascade', () => {
    const d = errorsOf(spec({ inputs: 'input größe: f32[N, 4]\ninput label: i32[N]', network: 'logits = größe -> linear(3)' }));
    expect(d).toHaveLength(1);
    expect(d[0].message).toBe("name 'größe' has a non-ASCII character 'ö' (and 1 more use of it)");
    expect(d[0].loc).toMatchObject({ line: 2, col: 7, endLine: 2, endCol: 11 });
    expect(d[0].hint).toBe("names are ASCII letters, digits and _: rename it, e.g. 'grosse'");
  });
  it('non-ASCII text in comments and strings is fine', () => {
    const r = checkSourceWithWarnings(`# Größe: ünïcödé\n${spec({ network: 'logits = x -> linear(3) # → ok' })}`, join(dir, 'ok.model'));
    expect(r.model.name).toBe('t');
  });
  it('a stray arrow character names its code point and says how to write it', () => {
    const d = errorsOf(spec({ network: 'logits = x → linear(3)' }));
    expect(d[0].message).toBe('unexpected character "→" (U+2192)');
    expect(d[0].hint).toBe("write the arrow as '->'");
  });
});

describe('empty files', () => {
  it('an empty file gives exactly one error saying it is empty', () => {
    for (const text of ['', '\n\n  \n']) {
      const d = errorsOf(text);
      expect(d.map((x) => x.message)).toEqual(['the file is empty']);
      expect(d[0].hint).toContain('specs/mnist_mlp.model');
    }
  });
  it('a file of comments says it has only comments', () => {
    expect(errorsOf('# todo\n# later\n').map((x) => x.message)).toEqual(['the file has only comments']);
  });
});

describe('missing data files', () => {
  it('mpsc check warns (exit 0) when a csv / safetensors file or an mnist folder does not exist', () => {
    const f = join(dir, 'csv.model');
    writeFileSync(f, spec({ inputs: 'input x: f32[N, 4]\ninput label: i32[N]', network: 'logits = x -> linear(3)', data: 'csv("nope_train.csv", test: "nope_test.csv")' }));
    const r = mpsc('check', f);
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(`${f}:9:15: warning: csv() train ${join(dir, 'nope_train.csv')} does not exist`);
    expect(r.stderr).toContain(`warning: csv() test ${join(dir, 'nope_test.csv')} does not exist`);
    const j = mpsc('check', f, '--json');
    const out = JSON.parse(j.stdout);
    expect(out.ok).toBe(true);
    expect(out.diagnostics.map((x: { severity: string; line: number }) => [x.severity, x.line])).toEqual([["warning", 9], ["warning", 9]]);
    const m = join(dir, 'mnist.model');
    writeFileSync(m, spec({ inputs: 'input image: f32[N, 1, 28, 28]\ninput label: i32[N]', network: 'logits = image -> flatten -> linear(10)', data: 'mnist("no_such_dir")' }));
    expect(mpsc('check', m).stderr).toContain(`warning: mnist() dir ${join(dir, 'no_such_dir')} does not exist`);
  });
  it('an existing data file gives no warning', () => {
    writeFileSync(join(dir, 'there.csv'), 'a,b,c,d,label\n1,2,3,4,0\n');
    const r = checkSourceWithWarnings(spec({ network: 'logits = x -> linear(3)', data: 'csv("there.csv")' }), join(dir, 'there.model'));
    expect(r.warnings).toEqual([]);
  });
});

describe('unknown layers', () => {
  it('a near miss gets "did you mean"; otherwise the closest layers are listed', () => {
    expect(errorsOf(spec({ network: 'logits = x -> linera(3)' }))[0].hint).toBe("did you mean 'linear'?");
    const d = errorsOf(spec({ network: 'logits = x -> convolution(3)' }))[0];
    expect(d.message).toBe("unknown layer 'convolution'");
    expect(d.hint).toMatch(/^closest layers: conv2d, [a-z_0-9]+, [a-z_0-9]+, [a-z_0-9]+ \(all layers: docs\/language\.md\)$/);
  });
});

describe('mse shape mismatch', () => {
  const mse = (target: string, net: string) => errorsOf(spec({ inputs: `input x: f32[N, 4]\ninput y: ${target}`, network: net, loss: 'mse(p, y)' }))[0];
  it('a trailing 1 on the prediction: declare the target with it', () => {
    const d = mse('f32[N]', 'p = x -> linear(1)');
    expect(d.message).toBe("mse 'loss' expects pred and target of the same shape (f32), got f32[N, 1] and f32[N]");
    expect(d.hint).toBe('pred has a trailing dimension of 1: declare the target input as f32[N, 1]');
  });
  it('other widths: make the last layer produce the target shape', () => {
    expect(mse('f32[N, 2]', 'p = x -> linear(3)').hint).toBe("the loss compares element by element: make the network's last layer produce the target's shape (e.g. linear(2) for f32[N, 2]), or declare the target input with the pred's shape");
  });
  it('an i32 target: both must be f32', () => {
    expect(mse('i32[N, 3]', 'p = x -> linear(3)').hint).toContain('declare the target input as f32');
  });
});

describe('--json diagnostics', () => {
  it('mpsc check --json prints {ok: false, diagnostics} with every field on stdout, exit 1', () => {
    const f = join(dir, 'bad.model');
    writeFileSync(f, spec({ network: 'logits = x -> linera(3)' }));
    const r = mpsc('check', f, '--json');
    expect(r.status).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({
      ok: false,
      diagnostics: [{ file: f, line: 5, col: 17, endLine: 5, endCol: 22, severity: 'error', message: "unknown layer 'linera'", hint: "did you mean 'linear'?" }],
    });
    expect(r.stderr).toContain(`${f}:5:17: error: unknown layer 'linera'`); // the text stays on stderr
  });
  it('several errors come sorted by position', () => {
    const f = join(dir, 'bad2.model');
    writeFileSync(f, spec({ network: 'logits = x -> linera(3)\n  q = x -> rleu', data: 'synthetic(trian_size: 3)' }));
    const out = JSON.parse(mpsc('check', f, '--json').stdout);
    expect(out.diagnostics.map((d: { line: number }) => d.line)).toEqual([5, 6, 10]);
  });
  it('errors without a position (a missing file, other commands) are JSON too', () => {
    const r = mpsc('check', join(dir, 'nope.model'), '--json');
    expect(r.status).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({ ok: false, diagnostics: [{ file: join(dir, 'nope.model'), line: null, col: null, endLine: null, endCol: null, severity: 'error', message: 'no such file', hint: null }] });
    const e = mpsc('export', 'specs/mnist_mlp.model', '--weights', join(dir, 'none.safetensors'), '--format', 'onnx', '-o', join(dir, 'x.onnx'), '--json');
    expect(e.status).toBe(1);
    expect(JSON.parse(e.stdout).diagnostics[0]).toMatchObject({ file: join(dir, 'none.safetensors'), severity: 'error', message: 'checkpoint file not found' });
  });
});
