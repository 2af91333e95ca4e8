/**
 * persistent_table: the model ABI's table of persistent tensors (runtime/cpp/mpsc_model.h
 * `tensors`), one rule for every backend (codegen-cpu/emit_program.ts, codegen-metal/layout.ts).
 *
 * Consumes: the Programs of one model (graph.ts programsOf order).
 * Produces: one entry per persistent name (param / state / optstate / gradacc), sorted by name,
 *           each at a 64-byte aligned offset of one block whose size is padded to 16 KiB (at
 *           least 16 KiB), with its dtype, kind, shape, element count and bytes.
 * Relies on: programs share persistent values by name; a name has one shape, dtype and kind in
 *           every program (a mismatch is a bug in mpsc: an internal error).
 */
import { type DType, type Program, type Value, type ValueKind, isPersistent, numel, valueBytes } from './graph.js';

export const TENSOR_ALIGN = 64;
export const BLOCK_ALIGN = 16384;

export interface PersistentEntry {
  name: string;
  dtype: DType;
  kind: ValueKind;
  shape: number[];
  numel: number;
  bytes: number;
  /** byte offset in the persistent block */
  offset: number;
}

export interface PersistentTable {
  tensors: PersistentEntry[];
  /** size of the persistent block */
  bytes: number;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

export function persistentTable(programs: readonly Program[]): PersistentTable {
  const byName = new Map<string, Value>();
  for (const p of programs) {
    for (const v of p.graph.values) {
      if (!isPersistent(v)) continue;
      const prev = byName.get(v.name);
      if (!prev) byName.set(v.name, v);
      else if (prev.shape.join(',') !== v.shape.join(',') || prev.dtype !== v.dtype || prev.kind !== v.kind) {
        throw new Error(`internal: persistent tensor '${v.name}' is ${prev.kind} ${prev.dtype}[${prev.shape}] in one program and ${v.kind} ${v.dtype}[${v.shape}] in program ${p.name}`);
      }
    }
  }
  let off = 0;
  const tensors = [...byName.keys()].sort().map((name) => {
    const v = byName.get(name)!;
    const e: PersistentEntry = { name, dtype: v.dtype, kind: v.kind, shape: [...v.shape], numel: numel(v.shape), bytes: valueBytes(v), offset: off };
    off = alignUp(off + e.bytes, TENSOR_ALIGN);
    return e;
  });
  return { tensors, bytes: alignUp(Math.max(off, 1), BLOCK_ALIGN) };
}
