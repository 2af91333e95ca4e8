// Issue 16: `mpsc predict` on safetensors, CSV and image inputs, on the native CPU backend and
// metal-emu against the float64 reference; token ids out of an embedding's
// range caught when the data is loaded (every device); Ctrl-C during the first compile.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PNG } from 'pngjs';
import jpeg from 'jpeg-js';
import { asU8, decodeSafetensors, encodeSafetensors, tensorToF32 } from '../runtime/safetensors.js';
import { checkFile } from '../compiler/check/index.js';
import { parseSetArg } from '../compiler/check/overrides.js';
import { loadData, MNIST_MEAN, MNIST_STD } from '../data/load.js';
import { resizeArea } from '../data/images.js';

const ROOT = path.resolve(__dirname, '..');
const BIN = path.join(ROOT, 'bin', 'mpsc.js');
const TINY = path.join(ROOT, 'test', 'fixtures', 'train', 'tiny.model');
const MLP = path.join(ROOT, 'specs', 'mnist_mlp.model');
let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-pred-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function mpsc(args: string[], env: Record<string, string> = {}): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: dir, encoding: 'utf8', timeout: 120_000, env: { ...process.env, CI: '1', ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
function readF32(file: string): Map<string, { shape: number[]; data: Float32Array }> {
  const st = decodeSafetensors(asU8(fs.readFileSync(file)), file);
  return new Map([...st.tensors].filter(([, t]) => t.dtype === 'F32').map(([n, t]) => [n, { shape: t.shape, data: tensorToF32(t) }]));
}
function writePng(file: string, w: number, h: number, gray: (x: number, y: number) => number): void {
  const png = new PNG({ width: w, height: h });
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = (y * w + x) * 4;
      png.data[i] = png.data[i + 1] = png.data[i + 2] = gray(x, y);
      png.data[i + 3] = 255;
    }
  }
  fs.writeFileSync(file, PNG.sync.write(png));
}
function maxRelDiff(a: number[], b: number[]): number {
  expect(a.length).toBe(b.length);
  return Math.max(...a.map((x, i) => Math.abs(x - b[i]) / Math.max(1e-6, Math.abs(b[i]))));
}

describe('mpsc predict', () => {
  it('safetensors and CSV inputs (with or without the label column) give the network values; labels are not needed', () => {
    const t = mpsc(['train', TINY, '--device', 'reference', '--steps', '20', '--json']);
    expect(t.code).toBe(0);
    const run = JSON.parse(t.stdout).run_dir as string;
    const w = readF32(path.join(dir, run, 'model.safetensors'));
    const W = w.get('fc.weight')!.data;
    const b = w.get('fc.bias')!.data;
    const xs = Array.from({ length: 5 }, (_, i) => Array.from({ length: 6 }, (_, j) => Math.sin(i * 6 + j) * 2));
    const want = xs.map((x) => [0, 1, 2].map((c) => x.reduce((s, v, j) => s + Math.fround(v) * W[c * 6 + j], b[c])));
    fs.writeFileSync(path.join(dir, 'x.safetensors'), encodeSafetensors({ x: { shape: [5, 6], data: Float32Array.from(xs.flat()) } }));
    fs.writeFileSync(path.join(dir, 'x.csv'), 'a,b,c,d,e,f\n' + xs.map((r) => r.map((v) => Math.fround(v)).join(',')).join('\n') + '\n');
    fs.writeFileSync(path.join(dir, 'xl.csv'), xs.map((r) => [7, ...r.map((v) => Math.fround(v))].join(',')).join('\n') + '\n');
    for (const input of ['x.safetensors', 'x.csv', 'xl.csv']) {
      const r = mpsc(['predict', TINY, '--weights', 'latest', '--input', input, '--json', '--batch', '2', '--device', 'reference']);
      expect(r.stderr).not.toContain('error');
      expect(r.code).toBe(0);
      const out = JSON.parse(r.stdout);
      expect(Object.keys(out)).toEqual(['outputs']);
      expect(Object.keys(out.outputs)).toEqual(['logits']);
      expect(maxRelDiff(out.outputs.logits.flat(), want.flat())).toBeLessThan(1e-5);
    }
    // text: each sample's top class and its softmax probability
    const txt = mpsc(['predict', TINY, '--weights', run, '--input', 'x.safetensors', '--device', 'reference']);
    expect(txt.code).toBe(0);
    const rows = txt.stdout.trim().split('\n');
    expect(rows).toHaveLength(5);
    want.forEach((l, i) => {
      const top = l.indexOf(Math.max(...l));
      const p = 1 / l.reduce((s, v) => s + Math.exp(v - l[top]), 0);
      expect(rows[i]).toBe(`sample ${i}: class ${top} (p=${p.toFixed(4)})`);
    });
    // a missing input tensor names what the file has
    fs.writeFileSync(path.join(dir, 'y.safetensors'), encodeSafetensors({ y: { shape: [5, 6], data: new Float32Array(30) } }));
    const bad = mpsc(['predict', TINY, '--weights', 'latest', '--input', 'y.safetensors']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("no tensor 'x' for the spec's input 'x' (the file has: y)");
  });

  it('PNG/JPEG images: grayscale 28x28 with the MNIST normalisation, exactly as the data source feeds training', () => {
    // random weights for the MLP (predict does not care how they were made)
    let seed = 7;
    const rnd = (n: number, s: number) => Float32Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648 - 0.5) * s);
    fs.writeFileSync(
      path.join(dir, 'mlp.safetensors'),
      encodeSafetensors({
        'fc1.weight': { shape: [256, 784], data: rnd(256 * 784, 0.1) },
        'fc1.bias': { shape: [256], data: rnd(256, 0.1) },
        'fc2.weight': { shape: [10, 256], data: rnd(2560, 0.2) },
        'fc2.bias': { shape: [10], data: rnd(10, 0.1) },
      }),
    );
    // three test digits as the data source loads them without normalisation ([0, 1])
    const raw = loadData(checkFile(MLP, [parseSetArg('data.normalize=false')])).test!.tensors.get('image') as Float32Array;
    const px = [0, 1, 2].map((k) => Array.from(raw.subarray(k * 784, (k + 1) * 784), (v) => Math.round(v * 255)));
    px.forEach((p, k) => writePng(path.join(dir, `d${k}.png`), 28, 28, (x, y) => p[y * 28 + x]));
    // the same digit at 56x56 (each pixel 2x2) is resized back exactly; a JPEG decodes to the same shape
    writePng(path.join(dir, 'big.png'), 56, 56, (x, y) => px[0][Math.floor(y / 2) * 28 + Math.floor(x / 2)]);
    const rgba = Buffer.alloc(28 * 28 * 4);
    px[1].forEach((v, i) => rgba.set([v, v, v, 255], i * 4));
    fs.writeFileSync(path.join(dir, 'd1.jpg'), jpeg.encode({ data: rgba, width: 28, height: 28 }, 100).data);
    // what training sees: (pixel / 255 - mean) / std
    const norm = Float32Array.from(px.flat(), (v) => (v / 255 - MNIST_MEAN) / MNIST_STD);
    fs.writeFileSync(path.join(dir, 'd.safetensors'), encodeSafetensors({ image: { shape: [3, 1, 28, 28], data: norm } }));
    const viaTensor = mpsc(['predict', MLP, '--weights', 'mlp.safetensors', '--input', 'd.safetensors', '--json', '--device', 'reference']);
    expect(viaTensor.code).toBe(0);
    const want = JSON.parse(viaTensor.stdout).outputs.logits as number[][];
    const viaPng = mpsc(['predict', MLP, '--weights', 'mlp.safetensors', '--input', 'd0.png', 'd1.png', 'd2.png', 'big.png', 'd1.jpg', '--json', '--device', 'reference']);
    expect(viaPng.stderr).toBe('device: reference\n');
    const got = JSON.parse(viaPng.stdout).outputs.logits as number[][];
    expect(got).toHaveLength(5);
    expect(maxRelDiff(got.slice(0, 3).flat(), want.flat())).toBeLessThan(1e-5);
    expect(maxRelDiff(got[3], want[0])).toBeLessThan(1e-5);
    expect(maxRelDiff(got[4], want[1])).toBeLessThan(0.05); // JPEG at quality 100 is close, not exact
    const txt = mpsc(['predict', MLP, '--weights', 'mlp.safetensors', '--input', 'd0.png', 'big.png', '--device', 'reference']);
    expect(txt.stdout).toMatch(/^d0\.png: class \d \(p=0\.\d{4}\)\nbig\.png: class \d \(p=0\.\d{4}\)\n$/);
    // an image for a non-image model is a user error
    const wrong = mpsc(['predict', TINY, '--weights', 'latest', '--input', 'd0.png']);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('image files need an image input');
  });

  it('runs on the native CPU backend by default (and on metal-emu) with the values of the float64 reference (--device reference)', () => {
    // the MLP's random weights and digits of the previous test; 5 samples at --batch 2: the eval
    // program twice, then eval_tail for the last one
    const args = ['predict', MLP, '--weights', 'mlp.safetensors', '--input', 'd0.png', 'd1.png', 'd2.png', 'big.png', 'd1.jpg', '--json', '--batch', '2', '--threads', '1'];
    const ref = mpsc([...args, '--device', 'reference']);
    expect(ref.code, ref.stderr).toBe(0);
    const want = (JSON.parse(ref.stdout).outputs.logits as number[][]).flat();
    for (const device of ['auto', 'metal-emu']) {
      const r = mpsc([...args, '--device', device]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toContain(device === 'auto' ? 'device: cpu' : 'device: metal-emu');
      const got = (JSON.parse(r.stdout).outputs.logits as number[][]).flat();
      expect(got).toHaveLength(50);
      // float32 kernels against the float64 oracle, relative to the largest logit
      const scale = Math.max(...want.map(Math.abs));
      expect(Math.max(...got.map((g, i) => Math.abs(g - want[i]))) / scale, device).toBeLessThan(1e-5);
    }
  }, 300_000);

  it('area resize averages what each output pixel covers', () => {
    const src = Float64Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
    expect([...resizeArea(src, 4, 4, 2, 2)]).toEqual([3.5, 5.5, 11.5, 13.5]);
    expect([...resizeArea(Float64Array.from([0, 3, 6]), 3, 1, 2, 1)]).toEqual([1, 5]);
  });
});

describe('issue 16 bug 2: token ids outside an embedding', () => {
  it('are reported at load time with file, position, value and range (exit 1) on every device', () => {
    const spec = path.join(dir, 'emb.model');
    fs.writeFileSync(
      spec,
      `model emb
input tokens: i32[N, 12]
input label: i32[N]
network {
  logits = tokens -> embedding(40, 4) as emb -> flatten -> linear(3) as fc
}
loss cross_entropy(logits, label)
optimizer sgd(lr: 0.1)
train { data: safetensors(train: "tok.safetensors"), batch: 4 }
`,
    );
    const tok = new Int32Array(10 * 12).map((_, i) => i % 40);
    tok[3 * 12 + 11] = 49;
    fs.writeFileSync(path.join(dir, 'tok.safetensors'), encodeSafetensors({ tokens: { shape: [10, 12], data: tok }, label: { shape: [10], data: new Int32Array(10) } }));
    for (const device of ['reference', 'cpu', 'metal-emu']) {
      const r = mpsc(['train', spec, '--device', device, '--steps', '1']);
      expect(r.stderr).not.toContain('internal error');
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`${path.join(dir, 'tok.safetensors')}: error: sample 3, position 11 of input 'tokens': token id 49 is outside [0, 40), the vocabulary of embedding 'emb'`);
    }
  });
});

describe('issue 16 bug 3: Ctrl-C during the first compile', () => {
  it('prints one line and exits 130 (no checkpoint message, no internal error, no build log)', async () => {
    const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-sigint-cache-'));
    const spec = path.join(dir, 'fresh.model');
    // a spec no cache has seen: the CPU module must be compiled
    fs.writeFileSync(spec, fs.readFileSync(TINY, 'utf8').replace('model tiny', 'model fresh').replace('linear(3) as fc', `linear(3) as fc${Date.now() % 100000}`));
    const child = spawn(process.execPath, [BIN, 'train', spec, '--device', 'cpu', '--steps', '2'], { cwd: dir, env: { ...process.env, CI: '1', MPSC_CACHE_DIR: cache } });
    let stderr = '';
    let stdout = '';
    let sentAt = -1;
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      if (sentAt < 0 && stderr.includes('compiling')) {
        sentAt = stderr.length;
        setTimeout(() => child.kill('SIGINT'), 300);
      }
    });
    const code = await new Promise<number | null>((res) => child.on('close', (c) => res(c)));
    fs.rmSync(cache, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
    expect(sentAt).toBeGreaterThan(0);
    expect(code).toBe(130);
    const after = stderr.slice(sentAt).trim().split('\n').filter((l) => l.trim() !== '');
    expect(after).toEqual(['interrupted before training started (nothing was written)']);
    expect(stderr).not.toContain('internal error');
    expect(stderr).not.toContain('finishing the current step');
    expect(stdout).toBe('');
    expect(fs.existsSync(path.join(dir, 'runs', 'fresh'))).toBe(false);
  }, 60_000);
});
