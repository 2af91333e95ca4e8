/**
 * wire: the frames the data-parallel launcher (launcher.ts, the store) and its ranks (group.ts)
 * exchange over one local TCP connection per rank (MASTER_ADDR:MASTER_PORT, as torchrun names them).
 *
 * Consumes / produces: length-prefixed binary frames, [u32 LE length of the rest][u8 type][u32 LE seq]
 * [payload], and a FrameReader that reassembles them from socket chunks.
 * Frame types: HELLO (rank -> store: u32 rank), REDUCE (a collective all-reduce: u8 op, then the
 * rank's values; the reply carries the result), BCAST (rank 0's bytes to every rank; the others send
 * none), ABORT (store -> rank: a UTF-8 message, e.g. that another rank died).
 * Relies on: every rank issues the same collectives in the same order (seq numbers them), which the
 * trainer guarantees (each rank runs the same loop; decisions are agreed through REDUCE).
 */

export const FRAME = { HELLO: 1, REDUCE: 2, BCAST: 3, ABORT: 4 } as const;
export type FrameType = (typeof FRAME)[keyof typeof FRAME];

/** REDUCE ops: f32 average (gradients: summed in float64 in rank order, / N), f64 sum, f64 max, f64 average */
export const REDUCE_OP = { AVG_F32: 0, SUM_F64: 1, MAX_F64: 2, AVG_F64: 3 } as const;
export type ReduceOp = (typeof REDUCE_OP)[keyof typeof REDUCE_OP];

export interface Frame {
  type: FrameType;
  seq: number;
  payload: Uint8Array;
}

export function encodeFrame(type: FrameType, seq: number, payload: Uint8Array): Buffer {
  const b = Buffer.allocUnsafe(9 + payload.byteLength);
  b.writeUInt32LE(5 + payload.byteLength, 0);
  b.writeUInt8(type, 4);
  b.writeUInt32LE(seq >>> 0, 5);
  b.set(payload, 9);
  return b;
}

/** Reassembles frames from a byte stream (chunks are joined once per frame: large gradients stay linear). */
export class FrameReader {
  private chunks: Buffer[] = [];
  private total = 0;

  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.total += chunk.length;
    const out: Frame[] = [];
    for (;;) {
      if (this.total < 4) break;
      if (this.chunks[0].length < 4) this.join();
      const len = this.chunks[0].readUInt32LE(0);
      if (this.total < 4 + len) break;
      if (this.chunks[0].length < 4 + len) this.join();
      const head = this.chunks[0];
      // a copy: the payload outlives the chunk
      out.push({ type: head.readUInt8(4) as FrameType, seq: head.readUInt32LE(5), payload: Uint8Array.from(head.subarray(9, 4 + len)) });
      const rest = head.subarray(4 + len);
      this.total -= 4 + len;
      if (rest.length) this.chunks[0] = rest;
      else this.chunks.shift();
    }
    return out;
  }

  private join(): void {
    this.chunks = [Buffer.concat(this.chunks, this.total)];
  }
}

/** a REDUCE payload: the op byte, then the values (8-byte aligned copy for the typed views) */
export function reducePayload(op: ReduceOp, values: Float32Array | Float64Array): Uint8Array {
  const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const p = new Uint8Array(1 + bytes.byteLength);
  p[0] = op;
  p.set(bytes, 1);
  return p;
}

/** the values of a REDUCE payload */
export function reduceValues(p: Uint8Array): { op: ReduceOp; values: Float32Array | Float64Array } {
  const op = p[0] as ReduceOp;
  const body = p.slice(1); // a fresh, aligned buffer
  const values = op === REDUCE_OP.AVG_F32 ? new Float32Array(body.buffer, 0, body.byteLength / 4) : new Float64Array(body.buffer, 0, body.byteLength / 8);
  return { op, values };
}

/**
 * The reduction every rank receives: contributions combined in rank order (float64 sums, so the result
 * is one deterministic value computed once and sent to all ranks: bitwise identical everywhere).
 */
export function reduceInRankOrder(op: ReduceOp, parts: (Float32Array | Float64Array)[]): Float32Array | Float64Array {
  const n = parts[0].length;
  const acc = new Float64Array(n);
  if (op === REDUCE_OP.MAX_F64) acc.fill(-Infinity);
  for (const p of parts) {
    if (op === REDUCE_OP.MAX_F64) for (let i = 0; i < n; i++) acc[i] = Number.isNaN(p[i]) || Number.isNaN(acc[i]) ? NaN : Math.max(acc[i], p[i]);
    else for (let i = 0; i < n; i++) acc[i] += p[i];
  }
  if (op === REDUCE_OP.AVG_F32 || op === REDUCE_OP.AVG_F64) for (let i = 0; i < n; i++) acc[i] /= parts.length;
  return op === REDUCE_OP.AVG_F32 ? Float32Array.from(acc) : acc;
}
