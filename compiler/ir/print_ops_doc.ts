/**
 * Renders the op catalogue (ops.ts) as Markdown: docs/ops.md.
 *   npx tsx compiler/ir/print_ops_doc.ts > docs/ops.md
 * test/reference_ops_doc.test.ts checks that docs/ops.md is current.
 */
import { pathToFileURL } from 'node:url';
import { OPS, OP_NAMES, type OpCategory, type OpDef } from './ops.js';
import { type ScalarLang, UNARY_FNS, UNARY_FNS_TABLE, renderScalar } from './scalar_fns.js';

const INTRO = `# IR op catalogue

Generated from \`compiler/ir/ops.ts\` by \`npx tsx compiler/ir/print_ops_doc.ts > docs/ops.md\`; edit ops.ts, not this page.
\`compiler/reference\` (the float64 interpreter) is the executable form of this text: every backend is tested against it.

## Conventions

- Layout is row-major (C order). Images are NCHW. Linear weights are \`[out, in]\`, conv weights \`[out, in/groups, kh, kw]\` (PyTorch).
- All tensors are f32 except class labels and token ids (i32). Scalars have shape \`[]\` (one element).
- A node reads its inputs and writes fresh outputs; only the inputs listed under *mutates* (persistent values:
  parameters, running stats, optimizer state, gradient accumulators) are written in place.
- Optional inputs (marked \`?\`) are passed as value id \`-1\` when absent.
- \`x_shape\` / \`w_shape\` attrs repeat a shape a backward op needs but cannot see in its inputs.
- Losses are mean-reduced (PyTorch's default). Loss-gradient ops include the \`1/N\` of the mean and take no \`dy\`.
- Reductions accumulate in at least f32 on backends, f64 in the reference.
- *scalars* are per-run values from \`StepScalars\` (graph.ts): \`lr\`, \`t\` (1-based step), \`seed\`, \`counter\` (dropout RNG).
`;

const SECTIONS: [string, OpCategory[]][] = [
  ['Forward', ['forward']],
  ['Losses and metrics', ['loss', 'metric']],
  ['Backward', ['backward']],
  ['Gradient plumbing and optimizers', ['optimizer']],
];

function renderOp(name: string, d: OpDef): string {
  const lines = [`### \`${name}\``, '', d.doc, ''];
  lines.push(`- inputs: ${d.inputs.map((i) => `\`${i}\``).join(', ') || '(none)'}`);
  lines.push(`- outputs: ${d.outputs.map((o) => `\`${o}\``).join(', ') || '(none)'}`);
  if (d.mutates?.length) lines.push(`- mutates: ${d.mutates.map((i) => `\`${d.inputs[i].replace('?', '')}\``).join(', ')}`);
  const attrs = Object.entries(d.attrs);
  if (attrs.length) lines.push(`- attrs: ${attrs.map(([k, v]) => (v ? `\`${k}\` (${v})` : `\`${k}\``)).join(', ')}`);
  if (d.scalars?.length) lines.push(`- scalars: ${d.scalars.map((s) => `\`${s}\``).join(', ')}`);
  const traits = [d.elementwise ? 'element-wise' : '', d.vjp ? 'has a gradient rule' : '', d.evalMode ? `in eval: ${d.evalMode === 'identity' ? 'removed (identity)' : `becomes \`${d.evalMode.op}\``}` : ''];
  if (traits.some(Boolean)) lines.push(`- ${traits.filter(Boolean).join('; ')}`);
  return lines.join('\n');
}

/** scalar expressions as plain math text (attributes by name, literals in shortest float64 form) */
const TEXT_LANG: ScalarLang = { lit: (v) => String(v), call: (fn, args) => `${fn}(${args.join(', ')})`, select: (c, a, b) => `${c} ? ${a} : ${b}` };

function renderUnaryFns(): string {
  const rows = UNARY_FNS.map((fn) => {
    const d = UNARY_FNS_TABLE[fn];
    const attrs = d.attrs as Record<string, number>;
    const names = Object.fromEntries(Object.keys(attrs).map((n) => [n, n]));
    const attrText = Object.entries(attrs).map(([n, v]) => `${n}=${v}`).join(', ');
    const cell = (t: string) => t.replace(/\|/g, '\\|');
    return `| \`${fn}\` | ${attrText} | \`${cell(renderScalar(d.fwd, TEXT_LANG, { x: 'x' }, names))}\` | \`${cell(renderScalar(d.grad, TEXT_LANG, { x: 'x', g: 'g' }, names))}\` | ${cell(d.doc)} | \`${d.torch}\` |`;
  });
  return [
    '## Element-wise functions (`unary {fn}` / `unary_grad {fn}`)',
    '',
    'Generated from `compiler/ir/scalar_fns.ts`, the one place these formulas are written: the reference evaluates them in',
    'float64, the backends render them to their languages. `g` is the incoming gradient dy; `a ? b : c` selects.',
    '',
    '| fn | attrs (default) | y = f(x) | dx | notes | PyTorch |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
}

export function renderOpsDoc(): string {
  const parts = [INTRO];
  for (const [title, cats] of SECTIONS) {
    const names = OP_NAMES.filter((n) => cats.includes(OPS[n].category));
    parts.push(`## ${title}\n\n${names.map((n) => renderOp(n, OPS[n])).join('\n\n')}\n`);
  }
  parts.push(renderUnaryFns());
  return parts.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) process.stdout.write(renderOpsDoc());
