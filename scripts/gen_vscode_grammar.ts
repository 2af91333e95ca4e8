// Writes editors/vscode/syntaxes/mpsc-model.tmLanguage.json from the compiler's tables
// (editors/vscode/grammar.ts). Run: npx tsx scripts/gen_vscode_grammar.ts
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildGrammar } from '../editors/vscode/grammar.js';

const out = fileURLToPath(new URL('../editors/vscode/syntaxes/mpsc-model.tmLanguage.json', import.meta.url));
writeFileSync(out, JSON.stringify(buildGrammar(), null, 2) + '\n');
process.stdout.write(`wrote ${out}\n`);
