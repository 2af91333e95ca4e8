/**
 * layout: where every value of a program lives for the Metal backend.
 *  - persistent values (param/state/optstate/gradacc): the model's persistent table, by name,
 *    shared by all programs (sorted by name, 64-byte aligned offsets, block padded to 16 KiB)
 *  - inputs: their own buffers, in Program.inputs order
 *  - everything else: the arena, at the memory plan's offsets (program.plan); without a plan,
 *    each value gets its own slot (no reuse).
 */
import { hostDType, isPersistent, numel, valueBytes, type Program, type ProgramSet, type Value } from '../ir/graph.js';

export interface PersistentEntry { name: string; dtype: 'f32' | 'i32'; kind: string; shape: number[]; bytes: number; offset: number }

export interface PersistentTable { tensors: PersistentEntry[]; bytes: number }

const align = (n: number, a: number) => Math.ceil(n / a) * a;

export function programsOf(ps: ProgramSet): Program[] {
  return [ps.train_step, ps.apply_update, ps.eval, ps.eval_tail].filter((p): p is Program => !!p);
}

export function persistentTable(programs: Program[]): PersistentTable {
  const byName = new Map<string, Value>();
  for (const p of programs)
    for (const v of p.graph.values)
      if (isPersistent(v)) {
        const prev = byName.get(v.name);
        if (prev && (prev.shape.join(',') !== v.shape.join(',') || prev.dtype !== v.dtype))
          throw new Error(`internal: persistent value '${v.name}' has different shapes in two programs`);
        byName.set(v.name, v);
      }
  const names = [...byName.keys()].sort();
  let off = 0;
  const tensors = names.map((name) => {
    const v = byName.get(name)!;
    const e: PersistentEntry = { name, dtype: hostDType(v), kind: v.kind, shape: v.shape, bytes: valueBytes(v), offset: off };
    off = align(off + e.bytes, 64);
    return e;
  });
  return { tensors, bytes: Math.max(16384, align(off, 16384)) };
}

export interface ValueHome { region: 'arena' | 'persistent' | 'input'; offset: number; bytes: number; index: number }

export interface ProgramLayout { arenaBytes: number; homes: (ValueHome | undefined)[] }

export function programLayout(p: Program, table: PersistentTable): ProgramLayout {
  const tIndex = new Map(table.tensors.map((t, i) => [t.name, i]));
  const homes: (ValueHome | undefined)[] = [];
  let naive = 0;
  let arenaBytes = p.plan?.arenaBytes ?? 0;
  for (const v of p.graph.values) {
    const bytes = numel(v.shape) * 4;
    if (isPersistent(v)) {
      const i = tIndex.get(v.name)!;
      homes.push({ region: 'persistent', offset: table.tensors[i].offset, bytes, index: i });
    } else if (v.kind === 'input') {
      const i = p.inputs.indexOf(v.id);
      homes.push(i < 0 ? undefined : { region: 'input', offset: 0, bytes, index: i });
    } else if (p.plan) {
      const off = p.plan.offsets[v.id];
      homes.push(off === undefined || off < 0 ? undefined : { region: 'arena', offset: off, bytes, index: -1 });
    } else {
      homes.push({ region: 'arena', offset: naive, bytes, index: -1 });
      naive = align(naive + bytes, 64);
      arenaBytes = naive;
    }
  }
  return { arenaBytes, homes };
}
