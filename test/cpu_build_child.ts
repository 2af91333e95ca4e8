/** Child process of test/cpu_build.test.ts: builds the tiny model into the given cache, loads it, prints JSON. */
import { buildAddon, loadAddon } from '../runtime/native/build.js';
import { generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import type { NativeAddon } from '../runtime/native/native_session.js';
import { tinyProgramSet } from './cpu_helpers.js';

const [cacheDir, tag] = process.argv.slice(2);
const gen = generateCpuModel(tinyProgramSet(4, tag));
const built = await buildAddon({ files: gen.files, cacheDir, jobs: 1 });
const addon = loadAddon<NativeAddon>(built.modulePath);
const h = addon.create(1);
addon.free(h);
process.stdout.write(JSON.stringify({ modulePath: built.modulePath, cached: built.cached, model: addon.describe().model }) + '\n');
