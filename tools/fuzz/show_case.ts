/**
 * Replays fuzz cases with timings: `npx tsx tools/fuzz/show_case.ts [--seed S] N...` prints each
 * case's mutations, seed spec and input preview, then what checkSource and buildPrograms did and
 * how long each took (wall ms). Used to turn a harness failure into a reproducer.
 */
import { checkSource } from '../../compiler/check/index.js';
import { buildPrograms } from '../../compiler/ir/programs.js';
import { makeCase } from './mutate.js';
import { loadSeeds, preview } from './oracle.js';

const seeds = loadSeeds();
const args = process.argv.slice(2);
const si = args.indexOf('--seed');
const runSeed = si >= 0 ? Number(args.splice(si, 2)[1]) : 1;
for (const i of args.map(Number)) {
  const c = makeCase(seeds.texts, runSeed, i);
  const text = Buffer.from(c.bytes).toString('utf8');
  console.log(`case ${i} [${c.mutations.join('+')}] on ${seeds.files[c.seed]}, ${text.length} chars: ${preview(c.bytes, 300)}`);
  let t = performance.now();
  try {
    const m = checkSource(text, seeds.files[c.seed]);
    console.log(`  checkSource: accepted in ${(performance.now() - t).toFixed(0)} ms (${m.layers.length} layers, ${m.graph.nodes.length} nodes)`);
    t = performance.now();
    const batch = Math.min(m.train.batch, 64);
    buildPrograms(m, { batch, evalTail: batch > 1 ? batch - 1 : undefined });
    console.log(`  buildPrograms: ${(performance.now() - t).toFixed(0)} ms`);
  } catch (e) {
    console.log(`  threw after ${(performance.now() - t).toFixed(0)} ms: ${(e as Error).constructor.name}: ${String((e as Error).message).slice(0, 300)}`);
  }
}
