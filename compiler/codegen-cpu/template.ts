/**
 * Handlebars setup for the CPU code generator: every template is compiled once (at module
 * load) with `{ noEscape: true, strict: true }` and rendered with plain view-model objects.
 */
import Handlebars from 'handlebars';

export type Template = (vm: object) => string;

export function tpl(source: string): Template {
  const t = Handlebars.compile(source, { noEscape: true, strict: true });
  return (vm: object) => t(vm);
}
