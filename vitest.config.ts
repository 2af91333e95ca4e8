import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // cmake-js calls process.chdir, and native modules cannot be unloaded: run test files in child processes
    pool: 'forks',
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
