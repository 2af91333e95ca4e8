/**
 * env_switch: the build-time switches read from the environment (MPSC_CONV_*, MPSC_CUDA_*, MPSC_CPU_FUSE, ...),
 * parsed in one place so that every switch accepts the same shapes of value and rejects a typo the same way: a
 * UserError naming the variable, the values it takes and the value it got (the CLI prints it and exits 1), never a
 * silent fall-back to the default.
 * Consumes process.env (or an explicit value, for tests and callers that pass one); produces the parsed choice.
 * An unset or empty variable means the default.
 */
import { UserError } from './errors.js';

/** the variable's raw value, undefined when unset or empty */
function raw(name: string, value: string | undefined): string | undefined {
  const v = value === undefined ? process.env[name] : value;
  return v === undefined || v === '' ? undefined : v;
}

const quoted = (xs: readonly string[]) => xs.map((x) => `'${x}'`).join(', ');

/** one of `allowed`, or `fallback` when unset: e.g. envChoice('MPSC_CONV_ROUND', ['rn', 'rna', 'add'], 'rn') */
export function envChoice<T extends string>(name: string, allowed: readonly T[], fallback: T, value?: string): T {
  const v = raw(name, value);
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) throw new UserError(`error: ${name} must be one of ${quoted(allowed)}, got '${v}'`);
  return v as T;
}

/** a 0 / 1 switch: true for '1', false for '0', `fallback` when unset */
export function envFlag(name: string, fallback: boolean, value?: string): boolean {
  return envChoice(name, ['0', '1'], fallback ? '1' : '0', value) === '1';
}

/**
 * A comma list of members of `allowed` (each at most once), `none` for the empty list, `fallback` when unset:
 * e.g. envList('MPSC_CUDA_FLASH_LDSM', ['fwd', 'kv', 'q'], ['fwd', 'kv']).
 */
export function envList<T extends string>(name: string, allowed: readonly T[], fallback: readonly T[], value?: string): T[] {
  const v = raw(name, value);
  if (v === undefined) return [...fallback];
  if (v === 'none') return [];
  const items = v.split(',').map((x) => x.trim());
  const bad = items.find((x, i) => !(allowed as readonly string[]).includes(x) || items.indexOf(x) !== i);
  if (bad !== undefined) throw new UserError(`error: ${name}=${v}: expected a comma list of ${quoted(allowed)} (each once), or 'none'; '${bad}' is ${(allowed as readonly string[]).includes(bad) ? 'repeated' : 'not one of them'}`);
  return items as T[];
}

/** `count` comma-separated integers in [min, max], `fallback` when unset (`what` says what they are, for the error) */
export function envInts(name: string, count: number, min: number, max: number, fallback: readonly number[], what: string, value?: string): number[] {
  const v = raw(name, value);
  if (v === undefined) return [...fallback];
  const xs = v.split(',').map((x) => Number(x.trim()));
  if (xs.length !== count || !xs.every((x) => Number.isInteger(x) && x >= min && x <= max))
    throw new UserError(`error: ${name}=${v}: expected ${count === 1 ? 'an integer' : `${count} comma-separated integers`} ${min}..${max} (${what})`);
  return xs;
}

/** the set ones of these switches as `\0NAME=value` fragments, in the given order: a build key's part (cpuInputsKey, cudaInputsKey) */
export function setSwitches(names: readonly string[]): string {
  return names.filter((k) => process.env[k]).map((k) => `\0${k}=${process.env[k]}`).join('');
}
