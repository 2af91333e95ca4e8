import { describe, it, expect } from 'vitest';
import { readFileSync } from 'node:fs';
import { checkSource, checkSourceWithWarnings } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import { didYouMean, editDistance, formatDiagnostic } from '../compiler/diagnostics.js';
import { INVALID } from './fixtures/frontend/invalid_cases.js';

function errorOf(src: string, file = 't.model'): string {
  try {
    checkSource(src, file);
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return (e as Error).message;
  }
  throw new Error('expected the spec to be rejected');
}

describe('invalid specs: exact position and message', () => {
  it('has at least 30 cases', () => {
    expect(INVALID.length).toBeGreaterThanOrEqual(30);
  });
  for (const c of INVALID) {
    it(c.name, () => {
      const msg = errorOf(c.src);
      const lines = msg.split('\n');
      expect(lines[0]).toBe(c.error);
      if (c.hint !== undefined) expect(lines.find((l) => l.trim().startsWith('hint:'))?.trim()).toBe(`hint: ${c.hint}`);
    });
  }
});

const GOOD_TAIL = `loss cross_entropy(logits, label)
optimizer sgd(lr: 0.1)
train { data: mnist(), batch: 8 }
`;

describe('diagnostic format', () => {
  it('prints the source line and a caret under the span', () => {
    const src = `model t\ninput image: f32[N, 1, 28, 28]\ninput label: i32[N]\nnetwork {\n  logits = image -> softmax(axis: 5) as sm\n}\n${GOOD_TAIL}`;
    const msg = errorOf(src, 'lenet.model');
    expect(msg).toBe(
      [
        "lenet.model:5:21: error: softmax 'sm': axis 5 is out of range for f32[N, 1, 28, 28]",
        '    logits = image -> softmax(axis: 5) as sm',
        '                      ^^^^^^^^^^^^^^^^^^^^^^',
      ].join('\n'),
    );
  });

  it('reports several errors in one run, in source order, with a count', () => {
    const src = `model t\ninput image: f32[N, 1, 28, 28]\ninput label: i32[N]\nnetwork {\n  h = image -> relux\n  logits = image -> flatten -> linear(10, bais: true)\n}\nloss cross_entropy(logits, label)\noptimizer sgd(lr: -1)\ntrain { data: mnist(), batch: 8 }\n`;
    const msg = errorOf(src);
    const heads = msg.split('\n').filter((l) => l.startsWith('t.model:'));
    expect(heads).toEqual([
      "t.model:5:16: error: unknown layer 'relux'",
      "t.model:6:43: error: linear 'linear0' has no argument 'bais'",
      "t.model:9:19: error: argument 'lr' of optimizer sgd must be > 0, got -1",
    ]);
    expect(msg.endsWith('3 errors')).toBe(true);
  });

  it('reports a shape error and a settings error in the same run', () => {
    const src = `model t\ninput image: f32[N, 1, 28, 28]\ninput label: i32[N]\nnetwork {\n  logits = image -> linear(10) as fc1\n}\nloss cross_entropy(logits, label)\noptimizer sgd(lr: 0.1, nesterv: true)\ntrain { data: mnist(), batch: 8 }\n`;
    const heads = errorOf(src).split('\n').filter((l) => l.startsWith('t.model:'));
    expect(heads).toEqual([
      "t.model:7:6: error: cross_entropy 'loss' expects label i32[N, 1, 28] (the logits shape without its class dim), got i32[N]",
      "t.model:8:24: error: optimizer sgd has no argument 'nesterv'",
    ]);
  });

  it('reports one syntax error per section and keeps going', () => {
    const msg = errorOf('model a b\nnetwork { h = ( }\nloss x(\n');
    expect(msg.split('\n').filter((l) => l.startsWith('t.model:'))).toEqual([
      "t.model:1:9: error: unexpected 'b'",
      "t.model:2:17: error: expected an expression but found '}'",
      "t.model:3:8: error: expected ')' but found the end of the section",
    ]);
  });

  it('a failed input declaration does not cascade into undefined-name errors', () => {
    const msg = errorOf(`model t\ninput image: f64[N, 784]\ninput label: i32[N]\nnetwork {\n  logits = image -> linear(10)\n}\n${GOOD_TAIL}`);
    expect(msg.split('\n').filter((l) => l.startsWith('t.model:'))).toEqual(["t.model:2:14: error: unknown dtype 'f64'"]);
  });

  it('prints at most 50 diagnostics and counts the rest', () => {
    const msg = errorOf('model t\n' + '@ '.repeat(70));
    expect(msg.split('\n').filter((l) => l.startsWith('t.model:')).length).toBe(50);
    expect(msg.endsWith('... and 20 more\n70 errors')).toBe(true);
  });

  it('formats a hint-less diagnostic without a hint line', () => {
    const text = formatDiagnostic({ severity: 'error', loc: { file: 'f', line: 2, col: 3, endLine: 2, endCol: 4 }, message: 'm' }, 'a\nbcde\n');
    expect(text).toBe('f:2:3: error: m\n  bcde\n    ^^');
  });
});

describe('warnings', () => {
  it('a value that is computed but never used is a warning, not an error', () => {
    const src = `model t\ninput image: f32[N, 784]\ninput label: i32[N]\nnetwork {\n  spare = image -> relu\n  logits = image -> linear(10)\n}\n${GOOD_TAIL}`;
    const r = checkSourceWithWarnings(src, 't.model');
    expect(r.warnings).toEqual([
      "t.model:5:3: warning: value 'spare' is never used\n    spare = image -> relu\n    ^^^^^\n  hint: use it in the loss or a metric, or remove it (its layers still run)",
    ]);
    expect(r.model.layers.map((l) => l.path)).toEqual(['relu0', 'linear0']);
  });
});

describe('did you mean', () => {
  it('counts transpositions as one edit', () => {
    expect(editDistance('bais', 'bias')).toBe(1);
    expect(editDistance('kitten', 'sitting')).toBe(3);
  });
  it('suggests only close words', () => {
    expect(didYouMean('maxpol', ['maxpool', 'avgpool', 'linear'])).toBe('maxpool');
    expect(didYouMean('zzz', ['maxpool', 'linear'])).toBeNull();
  });
});

describe('robustness: bad input only ever raises UserError', () => {
  const samples: string[] = [
    '',
    '\u0000\u0001\u0002',
    'network { '.repeat(2000),
    '('.repeat(100000),
    'network { h = ' + '-'.repeat(50000) + '1 }',
    // a run of '-' before a non-number (fuzz case 2312 of seed 7: a stack overflow, 'internal error')
    'train { data: synthetic(train_size: ' + '-'.repeat(19328) + '"a") }',
    'optimizer sgd(lr: ' + '-'.repeat(30001) + '(0.1))',
    'input image: f32[N, 4]\ninput label: i32[N]\nnetwork { h = ' + '-'.repeat(30000) + 'image }',
    'network { h = ' + Array.from({ length: 20000 }, () => '1').join(' + ') + ' }',
    'input x: f32[N, 99999, 99999, 99999]\nnetwork { y = x -> relu }',
    'block a() { in x\n out x -> a }\nnetwork { y = image -> a }',
    'network { repeat 999999999 { h = h } }',
    'input image: f32[N, 4]\ninput label: i32[N]\nnetwork { repeat 100000 { repeat 100000 { } } }',
    'input image: f32[N, 4]\ninput label: i32[N]\nnetwork { h = image\n repeat 100000 { repeat 100000 { h = h -> relu } } }',
  ];
  for (const s of samples) {
    it(`rejects ${JSON.stringify(s.slice(0, 30))}${s.length > 30 ? '...' : ''}`, () => {
      expect(() => checkSource(s, 'f.model')).toThrow(UserError);
    });
  }
  it('a long run of minus signs keeps its meaning: an even run cancels, an odd one negates', () => {
    const spec = (minus: string) => readFileSync('specs/mnist_mlp.model', 'utf8').replace(/optimizer .*\n/, `optimizer sgd(lr: ${minus}(0.1))\n`);
    expect(checkSource(spec('-'.repeat(4000)), 'f.model').optimizer.lr).toBe(0.1);
    expect(() => checkSource(spec('-'.repeat(4001)), 'f.model')).toThrow(/lr.*must be > 0, got -0\.1/);
  });
  it('survives random bytes', () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const alphabet = 'model input network block loss train -> ( ) [ ] { } , : = + - * / 1 2.5 "s" x N f32 i32 relu linear as repeat in out \n';
    const words = alphabet.split(' ');
    for (let i = 0; i < 300; i++) {
      const n = Math.floor(rnd() * 60);
      const text = Array.from({ length: n }, () => words[Math.floor(rnd() * words.length)]).join(' ');
      try {
        checkSource(text, 'r.model');
      } catch (e) {
        if (!(e instanceof UserError)) throw new Error(`non-UserError for ${JSON.stringify(text)}: ${(e as Error).stack}`);
      }
    }
  });
});
