/**
 * layout: where every value of a program lives for the Metal backend.
 *  - persistent values (param/state/optstate/gradacc): the model's persistent table, by name,
 *    shared by all programs (compiler/ir/persistent_table.ts, the same rule as the CPU backend's)
 *  - inputs: their own buffers, in Program.inputs order
 *  - everything else: the arena, at the memory plan's offsets (program.plan); without a plan,
 *    each value gets its own slot (no reuse).
 */
import { isPersistent, valueBytes, type Program } from '../ir/graph.js';
import type { PersistentTable } from '../ir/persistent_table.js';

// the model ABI's persistent table: one rule for every backend (compiler/ir/persistent_table.ts)
export { persistentTable, type PersistentEntry, type PersistentTable } from '../ir/persistent_table.js';

const align = (n: number, a: number) => Math.ceil(n / a) * a;

export interface ValueHome { region: 'arena' | 'persistent' | 'input'; offset: number; bytes: number; index: number }

export interface ProgramLayout { arenaBytes: number; homes: (ValueHome | undefined)[] }

export function programLayout(p: Program, table: PersistentTable): ProgramLayout {
  const tIndex = new Map(table.tensors.map((t, i) => [t.name, i]));
  const homes: (ValueHome | undefined)[] = [];
  let naive = 0;
  let arenaBytes = p.plan?.arenaBytes ?? 0;
  for (const v of p.graph.values) {
    const bytes = valueBytes(v); // 2 bytes per element of a 16-bit value
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
