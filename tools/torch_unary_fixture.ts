/**
 * Writes test/fixtures/torch_unary_fns.json: PyTorch's float64 values of every element-wise
 * function of compiler/ir/scalar_fns.ts (forward and gradient with dy = 1) at the points
 * test/unary_cases.ts picks (kinks included), for each attribute variant. The PyTorch call of
 * each fn is the table's `torch` text, evaluated with x and the attrs bound.
 *   TORCH_PYTHON=/path/to/python npx tsx tools/torch_unary_fixture.ts
 * test/reference_scalar_fns.test.ts compares the reference with it and fails for a fn it lacks.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { UNARY_FNS, UNARY_FNS_TABLE } from '../compiler/ir/scalar_fns.js';
import { attrVariants, samplePoints } from '../test/unary_cases.js';

const PY = `
import json, sys, torch
cases = json.load(sys.stdin)
out = []
for c in cases:
    x = torch.tensor(c['x'], dtype=torch.float64, requires_grad=True)
    y = eval(c['torch'], {'torch': torch, 'x': x, **c['attrs']})
    y.backward(torch.ones_like(y))
    out.append({**c, 'y': y.detach().tolist(), 'dx': x.grad.tolist()})
json.dump({'torch_version': torch.__version__, 'cases': out}, sys.stdout)
`;

const cases = UNARY_FNS.flatMap((fn) =>
  attrVariants(fn).map((attrs) => {
    const p = samplePoints(fn, attrs);
    return { fn, attrs, torch: UNARY_FNS_TABLE[fn].torch, x: [...p.exact, ...p.smooth] };
  }),
);
const py = process.env.TORCH_PYTHON ?? 'python3';
const res = execFileSync(py, ['-c', PY], { input: JSON.stringify(cases), maxBuffer: 64 << 20 }).toString();
const file = new URL('../test/fixtures/torch_unary_fns.json', import.meta.url);
writeFileSync(file, JSON.stringify({ generated_by: 'tools/torch_unary_fixture.ts', ...JSON.parse(res) }, null, 1) + '\n');
console.log(`wrote ${file.pathname}: ${cases.length} cases`);
