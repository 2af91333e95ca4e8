#!/usr/bin/env node
// Entry point. Runs the transpiled CLI in dist/ (made by scripts/build_js.mjs on npm install)
// when it is newer than every source file; otherwise registers the TypeScript loader (tsx)
// and runs the sources, so an edited checkout never runs stale code.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE_DIRS = ['cli', 'compiler', 'runtime', 'data'];

function newestSource(dir) {
  let newest = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestSource(p));
    else newest = Math.max(newest, fs.statSync(p).mtimeMs);
  }
  return newest;
}

function distIsFresh() {
  if (process.env.MPSC_FROM_SOURCE) return false;
  let built;
  try {
    built = fs.statSync(path.join(root, 'dist', '.built')).mtimeMs;
  } catch {
    return false;
  }
  return SOURCE_DIRS.every((d) => newestSource(path.join(root, d)) <= built);
}

let main;
if (distIsFresh()) {
  ({ main } = await import('../dist/cli/main.js'));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../cli/main.ts'));
}
process.exitCode = await main(process.argv.slice(2));
