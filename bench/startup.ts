/**
 * bench/startup.ts: wall time of `mpsc train` to its first step, with a warm build cache and
 * with a cold one (a fresh MPSC_CACHE_DIR), and where the time goes.
 *
 *   npx tsx bench/startup.ts [SPEC=specs/lenet.model] [--runs 3] [--threads 2]
 *
 * Runs `node bin/mpsc.js train SPEC --steps 1 --log-every 1 --device cpu` as a child process and
 * timestamps its stderr lines as they arrive: the first line (process start + tsx + check),
 * the cache / build line, the `training:` line (data loaded, session open) and `step 1/1`
 * (the first step done). Targets (issue 6): warm < 0.5 s, cold LeNet build < 15 s (2 cores).
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const flag = (name: string, d: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : d;
};
const spec = args.find((a, i) => !a.startsWith('--') && (i === 0 || !args[i - 1].startsWith('--'))) ?? 'specs/lenet.model';
const runs = Number(flag('--runs', '3'));
const threads = flag('--threads', '2');

interface Run {
  total_s: number;
  marks: { at_s: number; line: string }[];
  first_step_s: number | null;
}

function runTrain(cacheDir: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const ckpt = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-startup-ckpt-'));
    const t0 = performance.now();
    const child = spawn(
      process.execPath,
      [path.join(ROOT, 'bin', 'mpsc.js'), 'train', spec, '--steps', '1', '--log-every', '1', '--device', 'cpu', '--threads', threads, '--checkpoint-dir', ckpt],
      { cwd: ROOT, env: { ...process.env, MPSC_CACHE_DIR: cacheDir, CI: '1' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const marks: Run['marks'] = [];
    let buf = '';
    let firstStep: number | null = null;
    child.stderr.on('data', (d: Buffer) => {
      const at = (performance.now() - t0) / 1000;
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        marks.push({ at_s: at, line: line.slice(0, 110) });
        if (firstStep === null && /^step 1\//.test(line)) firstStep = at;
      }
    });
    child.on('error', reject);
    child.on('close', (code) => {
      fs.rmSync(ckpt, { recursive: true, force: true });
      if (code !== 0) reject(new Error(`mpsc train exited with ${code}: ${marks.map((m) => m.line).join('\n')}`));
      else resolve({ total_s: (performance.now() - t0) / 1000, marks, first_step_s: firstStep });
    });
  });
}

function show(title: string, r: Run): void {
  console.log(`${title}: first step at ${r.first_step_s?.toFixed(3) ?? 'n/a'} s, process exit at ${r.total_s.toFixed(3)} s`);
  for (const m of r.marks) console.log(`  ${m.at_s.toFixed(3).padStart(8)} s  ${m.line}`);
}

const cold = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-startup-cache-'));
try {
  const c = await runTrain(cold);
  show(`cold build (fresh MPSC_CACHE_DIR, ${os.cpus().length} cores)`, c);
  const warm: Run[] = [];
  for (let i = 0; i < runs; i++) warm.push(await runTrain(cold));
  const firsts = warm.map((r) => r.first_step_s ?? r.total_s).sort((a, b) => a - b);
  show('warm cache (last run)', warm[warm.length - 1]);
  console.log(`warm first step over ${runs} runs: median ${firsts[firsts.length >> 1].toFixed(3)} s, min ${firsts[0].toFixed(3)} s (target < 0.5 s)`);
  console.log(`cold first step: ${c.first_step_s?.toFixed(3) ?? 'n/a'} s (target < 15 s)`);
} finally {
  fs.rmSync(cold, { recursive: true, force: true });
}
