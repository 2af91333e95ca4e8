import { makeCase } from './mutate.js';
import { loadSeeds, preview } from './oracle.js';
import { checkSource } from '../../compiler/check/index.js';
import { buildPrograms } from '../../compiler/ir/programs.js';
const seeds = loadSeeds();
for (const i of process.argv.slice(2).map(Number)) {
  const c = makeCase(seeds.texts, 1, i);
  const text = Buffer.from(c.bytes).toString('utf8');
  console.log(i, c.mutations, seeds.files[c.seed], text.length, preview(c.bytes, 300));
  let t = performance.now();
  try { const m = checkSource(text, seeds.files[c.seed]); console.log('check ok', (performance.now()-t).toFixed(0), 'layers', m.layers.length, 'nodes', m.graph.nodes.length);
    t = performance.now(); buildPrograms(m, {batch: Math.min(m.train.batch,64), evalTail: 3}); console.log('programs', (performance.now()-t).toFixed(0));
  } catch (e) { console.log('threw', (performance.now()-t).toFixed(0), String(e).slice(0,200)); }
}
