/**
 * templates: the handlebars templates of the Metal backend's host-side text (the emulator's
 * model ABI, emu_model.hbs, and the bridge's plan tables, bridge_plan.hbs), compiled once at
 * load time with { noEscape: true, strict: true }. Views are plain objects. The kernels are
 * not templates: they are the GPU kernel language (compiler/kernels) in the MSL dialect.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Handlebars from 'handlebars';

const DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'templates');

const compiled: Record<string, HandlebarsTemplateDelegate> = {};
for (const f of fs.readdirSync(DIR)) {
  if (!f.endsWith('.hbs')) continue;
  compiled[f.slice(0, -4)] = Handlebars.compile(fs.readFileSync(path.join(DIR, f), 'utf8'), { noEscape: true, strict: true });
}

export function render(name: string, view: object): string {
  const t = compiled[name];
  if (!t) throw new Error(`internal: no Metal template '${name}'`);
  return t(view);
}
