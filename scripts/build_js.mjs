#!/usr/bin/env node
// Transpiles mpsc's TypeScript to JavaScript under dist/ (same tree layout, assets copied
// beside it: templates, C++ runtime sources, the Metal bridge), so `mpsc` starts without a
// TypeScript loader. Run by `npm install` / `npm ci` (the `prepare` script) and `npm run build`.
// bin/mpsc.js uses dist/ only while it is newer than every source file (see sourcesNewerThan
// in bin/mpsc.js); otherwise it runs the sources through tsx, so an edit never runs stale code.
import { build, transform } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SOURCE_DIRS = ['cli', 'compiler', 'runtime', 'data'];
const dist = path.join(root, 'dist');
const tmp = path.join(root, `dist.tmp-${process.pid}`);

function* walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) yield* walk(p);
    else if (e.isFile()) yield p;
  }
}

// chevrotain's ESM build loads hundreds of lodash-es modules (~300 ms per start): bundle it once
const VENDORED = ['chevrotain'];
let ts = 0, assets = 0;
fs.rmSync(tmp, { recursive: true, force: true });
for (const name of VENDORED) {
  await build({ entryPoints: [name], bundle: true, format: 'esm', platform: 'node', target: 'node20', outfile: path.join(tmp, 'vendor', `${name}.js`), logLevel: 'warning' });
}
const vendorImports = (code, rel) =>
  code.replace(/from\s*(["'])([^"']+)\1/g, (m, q, spec) => {
    if (!VENDORED.includes(spec)) return m;
    let to = path.relative(path.dirname(rel), path.join('vendor', `${spec}.js`)).split(path.sep).join('/');
    if (!to.startsWith('.')) to = './' + to;
    return `from ${q}${to}${q}`;
  });
for (const d of SOURCE_DIRS) {
  for (const file of walk(path.join(root, d))) {
    const rel = path.relative(root, file);
    const out = path.join(tmp, rel);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    if (file.endsWith('.ts') && !file.endsWith('.d.ts')) {
      const r = await transform(fs.readFileSync(file, 'utf8'), { loader: 'ts', format: 'esm', target: 'node20', sourcefile: rel });
      fs.writeFileSync(out.replace(/\.ts$/, '.js'), vendorImports(r.code, rel));
      ts++;
    } else {
      fs.copyFileSync(file, out);
      assets++;
    }
  }
}
const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
fs.writeFileSync(path.join(tmp, 'package.json'), JSON.stringify({ name: 'mpsc-dist', private: true, type: 'module', version: pkg.version }, null, 2) + '\n');
// swap in atomically enough for a developer tool: remove the old tree, rename the new one
fs.rmSync(dist, { recursive: true, force: true });
fs.renameSync(tmp, dist);
fs.writeFileSync(path.join(dist, '.built'), new Date().toISOString() + '\n');
process.stdout.write(`mpsc: transpiled ${ts} TypeScript files and copied ${assets} assets into dist/\n`);
