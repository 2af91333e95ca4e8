/**
 * The TypeScript/native boundary (issue 7): a native CPU session refuses every bad batch and
 * bad tensor write with a JS Error before native code touches the data (wrong input count,
 * short/long arrays, wrong typed-array types, labels / embedding ids outside their range, bad
 * scalars, unknown names, use after free), and still runs a valid step afterwards. The same
 * probe runs under AddressSanitizer + UBSan in .ci/sanitize.sh.
 */
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ROOT } from './fixtures/reliability/proc.js';

const run = promisify(execFile);

describe('bad batches never reach native code', () => {
  it('33 bad calls refused, then a valid step runs', async () => {
    const own = process.env.MPSC_CACHE_DIR ? null : fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-boundary-'));
    const cache = own ?? process.env.MPSC_CACHE_DIR!;
    const { stdout } = await run(process.execPath, ['--import', 'tsx', path.join(ROOT, 'test/fixtures/reliability/boundary_probe.ts'), cache], { cwd: ROOT, maxBuffer: 1 << 24 });
    if (own) fs.rmSync(own, { recursive: true, force: true });
    const res = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(res.failures).toEqual([]);
    expect(res.cases).toBeGreaterThanOrEqual(33);
    expect(res.refused).toBe(res.cases);
  }, 600_000);
});
