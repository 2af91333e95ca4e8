/**
 * emit_native: the train step of any .model spec as a Node-free native benchmark, the way
 * `bench/gpt_tiny.ts --emit` writes the GPT's: generated model.cc, the runtime sources and
 * bench/native_step_driver.cc in DIR, with build.sh and run.sh (THREADS [STEPS WARMUP [PROGRAM]]; PROGRAM train_step or eval).
 *   npx tsx bench/emit_native.ts SPEC DIR
 * then `sh DIR/build.sh && sh DIR/run.sh 1 300 30`; `MPSC_PROFILE=all MPSC_PROFILE_CLOCK=cpu sh DIR/run.sh 1 ...`
 * lists every kernel by the thread CPU clock (bench/NOTES.md phase 5 and 6 use this for A/B runs).
 * Consumes the spec file; relies on compiler/check and gpt_tiny.ts's emit.
 */
import { checkFile } from '../compiler/check/index.js';
import { emit } from './gpt_tiny.js';

const [spec, dir] = process.argv.slice(2);
if (!spec || !dir) {
  console.error('usage: npx tsx bench/emit_native.ts SPEC DIR');
  process.exit(2);
}
emit(checkFile(spec), dir);
console.log(`wrote ${dir}: sh ${dir}/build.sh && sh ${dir}/run.sh THREADS [STEPS WARMUP]`);
