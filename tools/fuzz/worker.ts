/**
 * Fuzz worker (a child process of bench/fuzz_specs.ts): generates and runs cases [from, to) of a
 * run, announcing each case before running it so the parent's watchdog can name a case that hangs
 * or kills the process.
 * Messages in: { runSeed, from, to, programs }. Messages out: { ready } once loaded; per case { start: i },
 * { stage } as it enters checkSource / buildPrograms, { result }; finally { done: true }.
 */
import { makeCase } from './mutate.js';
import { loadSeeds, runCase } from './oracle.js';

const seeds = loadSeeds();
process.send!({ ready: true });

process.on('message', (m: { runSeed: number; from: number; to: number; programs: boolean }) => {
  for (let i = m.from; i < m.to; i++) {
    process.send!({ start: i });
    const c = makeCase(seeds.texts, m.runSeed, i);
    const r = runCase(c, seeds.files[c.seed], { programs: m.programs, onStage: (stage) => process.send!({ stage, seedFile: seeds.files[c.seed], mutations: c.mutations }) });
    process.send!({ result: { ...r, bytes: r.outcome === 'failure' ? Buffer.from(c.bytes).toString('base64') : undefined } });
  }
  process.send!({ done: true });
});
