/**
 * cuda_env_ab: one model's train step under several build environments (generator switches such as
 * MPSC_CUDA_CE_UNROLL, MPSC_CUDA_FUSE_OFF, ...), A/B in ONE process: every variant's session opened side by side,
 * the initial parameters computed once, then interleaved rounds (runtime/bench.ts benchVariants). A device call
 * pays one process start, one parameter init and one build per variant, instead of all three per timed run (the
 * first version, a run per variant and round, spent ~45 s of device time per GPT-2 run).
 *   node --import tsx bench/cuda_env_ab.ts (SPEC | --workload gpt_tiny_b32_t64|gpt_char_b64_t256) [--precision bf16]
 *     [--device cuda] [--rounds 3] [--steps 30] [--warmup 5] NAME[:VAR=value;VAR=value] ...
 * Values may hold commas (MPSC_CUDA_FLASH_MINBLOCKS=4,0,3). A variant with MPSC_CUDA_PROFILE=1 (a run-time switch,
 * not part of the build key) launches its kernels one by one and prints their times when its session closes: its own
 * round times then mean nothing. Prints each round's figures as they come, then per variant the median over the
 * rounds and its ratio to the first variant; exits 1 when the arguments are wrong.
 */
import { checkFile } from '../compiler/check/index.js';
import type { CheckedModel } from '../compiler/model.js';
import { PRECISIONS, type Precision } from '../compiler/ir/precision.js';
import { benchVariants, type BenchVariant } from '../runtime/bench.js';
import { gptModel } from './gpt_tiny.js';

/** NAME or NAME:VAR=value;VAR=value */
export function parseVariant(v: string): BenchVariant {
  const at = v.indexOf(':');
  const name = at < 0 ? v : v.slice(0, at), rest = at < 0 ? '' : v.slice(at + 1);
  if (!/^[\w.+-]+$/.test(name)) throw new Error(`cuda_env_ab: variant name '${name}' (from '${v}'): letters, digits, '_', '.', '+', '-' only`);
  const env: Record<string, string> = {};
  for (const item of rest.split(';').filter(Boolean)) {
    const eq = item.indexOf('=');
    if (eq < 1 || !item.startsWith('MPSC_')) throw new Error(`cuda_env_ab: '${item}' in variant '${v}' is not MPSC_VAR=value`);
    env[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return { name, env };
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const flags = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith('--')) flags.set(args[i], args[++i] ?? '');
    else rest.push(args[i]);
  }
  const workload = flags.get('--workload');
  const spec = workload ? undefined : rest[0];
  const names = workload ? rest : rest.slice(1);
  if ((!workload && !spec) || names.length === 0) throw new Error('usage: cuda_env_ab.ts (SPEC | --workload W) [--precision P] [--device cuda] [--rounds 3] [--steps 30] [--warmup 5] NAME[:VAR=value;...] ...');
  const precision = flags.get('--precision');
  if (precision !== undefined && !(PRECISIONS as readonly string[]).includes(precision)) throw new Error(`--precision must be one of ${PRECISIONS.join(', ')}`);
  const base: CheckedModel = workload ? gptModel(workload) : checkFile(spec!);
  const model: CheckedModel = precision ? { ...base, train: { ...base.train, precision: precision as Precision } } : base;
  const variants = names.map(parseVariant);
  const rounds = Number(flags.get('--rounds') ?? 3), steps = Number(flags.get('--steps') ?? 30), warmup = Number(flags.get('--warmup') ?? 5);
  const t0 = performance.now();
  const res = await benchVariants(model, variants, { device: flags.get('--device') ?? 'cuda', rounds, steps, warmup, onProgress: (m) => console.error(m) });
  const what = workload ?? spec;
  console.log(`${what}${precision ? ` (${precision})` : ''}: median ms per train step over ${rounds} rounds of ${steps} steps, ratio to ${res[0].name} (${((performance.now() - t0) / 1000).toFixed(0)} s in all)`);
  for (const r of res) {
    const env = Object.entries(r.env).map(([k, v]) => `${k}=${v}`).join(' ') || 'defaults';
    console.log(`${r.name.padEnd(16)} ${r.median_ms.toFixed(3).padStart(9)}  x${(r.median_ms / res[0].median_ms).toFixed(3)}  [${r.rounds.map((x) => x.toFixed(3)).join(' ')}]  open ${r.open_s.toFixed(1)} s  ${env}`);
  }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
