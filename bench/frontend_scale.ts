/**
 * Front-end scale benchmark: generates a spec with 5,000 layers (a long MLP chain plus
 * blocks instantiated through repeat) and times checkSource on it. Target: well under 1 s.
 * Run: npx tsx bench/frontend_scale.ts
 */
import { checkSource } from '../compiler/check/index.js';

function generate(layers: number): string {
  const lines = ['model scale', 'input x: f32[N, 64]', 'input label: i32[N]', 'block unit(c: int) {', '  in x', '  out x -> linear(c) -> relu', '}', 'network {'];
  // half the layers as explicit statements, half from repeat + blocks (2 layers per instance)
  const explicit = layers / 2;
  for (let i = 0; i < explicit / 2; i++) lines.push(`  h${i} = ${i === 0 ? 'x' : `h${i - 1}`} -> linear(64) -> relu`);
  lines.push(`  h = h${explicit / 2 - 1}`);
  lines.push(`  repeat ${layers / 4} { h = unit(h, 64) }`);
  lines.push('  logits = h -> linear(10)', '}', 'loss cross_entropy(logits, label)', 'optimizer adam(lr: 1e-3)', 'train { data: synthetic(), batch: 32 }');
  return lines.join('\n') + '\n';
}

const text = generate(5000);
checkSource(text, 'warmup.model'); // first run builds the parser (self-analysis) once per process
// wall time, and CPU time of this process (robust when other work shares the cores)
const runs: number[] = [];
const cpu: number[] = [];
let layerCount = 0;
for (let i = 0; i < 5; i++) {
  const t = performance.now();
  const c = process.cpuUsage();
  const m = checkSource(text, 'scale.model');
  const d = process.cpuUsage(c);
  runs.push(performance.now() - t);
  cpu.push((d.user + d.system) / 1000);
  layerCount = m.layers.length;
}
runs.sort((a, b) => a - b);
cpu.sort((a, b) => a - b);
const median = runs[2];
console.log(
  `frontend_scale: ${layerCount} layers, ${text.length} bytes, checkSource median ${median.toFixed(1)} ms wall ` +
    `(min ${runs[0].toFixed(1)}, max ${runs[4].toFixed(1)}), median ${cpu[2].toFixed(1)} ms CPU`,
);
if (cpu[2] > 1000) {
  console.error('frontend_scale: slower than 1 s');
  process.exitCode = 1;
}
