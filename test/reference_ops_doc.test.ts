/** docs/ops.md is generated from ops.ts and must be regenerated when the catalogue changes. */
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { OPS } from '../compiler/ir/ops.js';
import { renderOpsDoc } from '../compiler/ir/print_ops_doc.js';

it('docs/ops.md matches ops.ts (regenerate: npx tsx compiler/ir/print_ops_doc.ts > docs/ops.md)', () => {
  const doc = renderOpsDoc();
  for (const name of Object.keys(OPS)) expect(doc).toContain(`### \`${name}\``);
  expect(readFileSync(new URL('../docs/ops.md', import.meta.url), 'utf8')).toBe(doc);
});
