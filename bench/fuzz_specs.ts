/**
 * The spec fuzzer: `npx tsx bench/fuzz_specs.ts --cases 10000 --seed 1 [--no-programs] [--out DIR]`.
 *
 * Runs mutated example specs (tools/fuzz/mutate.ts) through the front end in a child process
 * (tools/fuzz/worker.ts) under a watchdog: a case that runs longer than --hang-ms (default 30 s wall)
 * or kills the process is recorded as a failure and the worker is restarted after it. Every case
 * must end accepted or rejected with `path:line:col: error:` diagnostics within 2 s
 * (tools/fuzz/oracle.ts). Prints the counts and every failure with its case number and mutations;
 * with --out, writes each failing input to DIR/case-<n>.model. Exit 1 when any case failed.
 * Reproduce one case: `--cases 1 --from N`.
 */
import { fork, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadSeeds, type CaseResult } from '../tools/fuzz/oracle.js';

const USAGE = `usage: npx tsx bench/fuzz_specs.ts [--cases N] [--from I] [--seed S] [--hang-ms MS] [--no-programs] [--out DIR]
  --cases N      how many mutated specs to run (default 10000; ~16 ms each on an idle core)
  --from I       the first case number (reproduce one case: --cases 1 --from I)
  --seed S       the run's seed (default 1): the same seed and case number give the same input
  --hang-ms MS   a case running longer than this (wall) is a failure (default 30000)
  --no-programs  stop after the front end (skip buildPrograms on accepted specs)
  --out DIR      write each failing input to DIR/case-<n>.model
Seeds: test/fixtures/reliability/seeds/*.model. Exit 1 when any case failed.`;
const VALUED = ['--cases', '--from', '--seed', '--hang-ms', '--out'];
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(USAGE);
  process.exit(0);
}
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (VALUED.includes(a)) {
    const v = process.argv[++i];
    if (v === undefined || (a !== '--out' && !/^\d+$/.test(v))) {
      console.error(`error: ${a} needs a non-negative integer${a === '--out' ? ' (here: a folder)' : ''}, got ${v === undefined ? 'nothing' : `'${v}'`}\n${USAGE}`);
      process.exit(1);
    }
  } else if (a !== '--no-programs') {
    console.error(`error: unknown argument '${a}'\n${USAGE}`);
    process.exit(1);
  }
}

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : dflt;
}
const cases = Number(arg('--cases', '10000'));
const from = Number(arg('--from', '0'));
const runSeed = Number(arg('--seed', '1'));
const hangMs = Number(arg('--hang-ms', '30000'));
const outDir = arg('--out', '');
const programs = !process.argv.includes('--no-programs');
const workerPath = path.join(path.dirname(fileURLToPath(import.meta.url)), '../tools/fuzz/worker.ts');

type Failure = CaseResult & { bytes?: string };
const counts = { cases: 0, accepted: 0, rejected: 0, failures: 0 };
const failures: Failure[] = [];
const byMutation = new Map<string, { n: number; failed: number }>();
let slowest = { ms: 0, index: -1 };
let slowestPrograms = { ms: 0, index: -1 };

function record(r: Failure): void {
  counts.cases++;
  counts[r.outcome === 'failure' ? 'failures' : r.outcome]++;
  if (r.outcome === 'failure') failures.push(r);
  if (r.ms > slowest.ms) slowest = { ms: r.ms, index: r.index };
  if (r.programsMs > slowestPrograms.ms) slowestPrograms = { ms: r.programsMs, index: r.index };
  for (const m of new Set(r.mutations)) {
    const e = byMutation.get(m) ?? { n: 0, failed: 0 };
    e.n++;
    if (r.outcome === 'failure') e.failed++;
    byMutation.set(m, e);
  }
}

/** runs cases [a, b) in one worker; resolves with the index to continue from (b when done) */
function runRange(a: number, b: number): Promise<number> {
  return new Promise((resolve) => {
    const child: ChildProcess = fork(workerPath, [], { execArgv: ['--import', 'tsx', '--max-old-space-size=3072'], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    let current = a;
    let stage = 'start-up';
    let caseInfo = { seedFile: '?', mutations: ['?'] };
    let stderr = '';
    let timer: NodeJS.Timeout | null = null;
    let finished = false;
    const arm = () => {
      if (timer) clearTimeout(timer);
      timer = setTimeout(() => fail(`hang: no result after ${hangMs} ms (worker killed)`), hangMs);
    };
    const fail = (why: string) => {
      if (finished) return;
      finished = true;
      if (timer) clearTimeout(timer);
      child.kill('SIGKILL');
      record({ index: current, outcome: 'failure', ms: hangMs, programsMs: 0, detail: `${why} (stage: ${stage})`, mutations: caseInfo.mutations, seedFile: caseInfo.seedFile });
      resolve(current + 1);
    };
    child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-2000)));
    child.on('message', (m: { ready?: boolean; start?: number; stage?: string; seedFile?: string; mutations?: string[]; result?: Failure; done?: boolean }) => {
      if (m.ready) {
        child.send({ runSeed, from: a, to: b, programs });
      } else if (m.start !== undefined) {
        current = m.start;
        stage = 'generating the case';
        caseInfo = { seedFile: '?', mutations: ['?'] };
        arm();
      } else if (m.stage !== undefined) {
        stage = m.stage;
        caseInfo = { seedFile: m.seedFile!, mutations: m.mutations! };
      } else if (m.result) record(m.result);
      else if (m.done) {
        finished = true;
        if (timer) clearTimeout(timer);
        child.kill();
        resolve(b);
      }
    });
    child.on('exit', (code, sig) => fail(`the worker died (exit ${code}, signal ${sig}) during this case: ${stderr.trim().split('\n').slice(-3).join(' | ')}`));
    // the watchdog is armed per case, once the worker has loaded (start-up on a loaded machine can be slow)
  });
}

const seeds = loadSeeds();
const t0 = Date.now();
let next = from;
const end = from + cases;
while (next < end) next = await runRange(next, end);
const secs = (Date.now() - t0) / 1000;

console.log(`seeds (${seeds.files.length}): ${seeds.files.join(', ')}`);
console.log(`run seed ${runSeed}, cases ${from}..${end - 1}, programs stage ${programs ? 'on' : 'off'}, ${secs.toFixed(1)} s`);
console.log(`cases ${counts.cases}  accepted ${counts.accepted}  rejected ${counts.rejected}  failures ${counts.failures}`);
console.log(`slowest front end: case #${slowest.index}, ${slowest.ms.toFixed(0)} ms CPU; slowest buildPrograms of an accepted spec: case #${slowestPrograms.index}, ${slowestPrograms.ms.toFixed(0)} ms CPU`);
console.log('by mutation (cases / failures):');
for (const [m, e] of [...byMutation.entries()].sort((x, y) => y[1].n - x[1].n)) console.log(`  ${m.padEnd(20)} ${String(e.n).padStart(6)} / ${e.failed}`);
if (outDir) fs.mkdirSync(outDir, { recursive: true });
for (const f of failures) {
  console.log(`FAIL #${f.index} [${f.mutations.join('+')}] on ${f.seedFile}: ${f.detail}`);
  if (outDir && f.bytes) fs.writeFileSync(path.join(outDir, `case-${f.index}.model`), Buffer.from(f.bytes, 'base64'));
}
process.exitCode = counts.failures > 0 ? 1 : 0;
