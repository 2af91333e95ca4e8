import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const ROOT = path.dirname(fileURLToPath(import.meta.url));
/** seconds per test file, measured (test/durations.json; scripts/test_durations.mjs rewrites it from a JSON report) */
const DURATIONS: Record<string, number> = JSON.parse(fs.readFileSync(path.join(ROOT, 'test/durations.json'), 'utf8')).seconds;
/** a file not measured yet counts as a middling one */
const UNKNOWN_S = 10;

/**
 * Longest file first, by the committed durations: a fresh clone has no vitest cache, and the default
 * order (largest source first) can start a 3-minute file last and leave one worker idle meanwhile.
 * Only the order changes; every file still runs in its own child process.
 */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const est = (f: TestSpecification) => DURATIONS[path.relative(ROOT, f.moduleId).split(path.sep).join('/')] ?? UNKNOWN_S;
    return [...files].sort((a, b) => est(b) - est(a) || a.moduleId.localeCompare(b.moduleId));
  }
}

export default defineConfig({
  test: {
    // cmake-js calls process.chdir, and native modules cannot be unloaded: run test files in child processes
    pool: 'forks',
    // vitest's default is one worker less than the CPUs: a single worker on the 2-core CI machine, where
    // most files wait on g++, the emulators or child processes; two keep both cores busy
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
    sequence: { sequencer: LongestFirst },
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
