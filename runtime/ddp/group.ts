/**
 * group: one rank's side of data-parallel training (issue 18). A worker process that the launcher
 * (launcher.ts) started finds its place in the environment torchrun uses (RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR, MASTER_PORT, plus MPSC_DDP_WORKER=1) and connects to the launcher's store.
 *
 * Consumes: that environment. Produces: a ProcessGroup with the collectives the trainer needs, each
 * a promise every rank must call in the same order: allreduce (f32 average of gradients, f64 sum /
 * max / average of losses and flags), broadcast (rank 0's bytes: the NCCL unique id), barrier.
 * Relies on: the store combines contributions in rank order and sends every rank the same result
 * (wire.ts reduceInRankOrder), so all ranks hold bitwise identical values. When another rank dies
 * the store sends ABORT, and when the launcher goes away the connection closes: the pending and every
 * later collective then fail with a UserError naming the cause (exit 1, nothing waits forever).
 */
import * as net from 'node:net';
import { UserError } from '../../compiler/errors.js';
import { FRAME, FrameReader, REDUCE_OP, encodeFrame, reducePayload, reduceValues, type Frame, type FrameType, type ReduceOp } from './wire.js';

/** the environment a worker runs in (set by launcher.ts) */
export const WORKER_ENV = 'MPSC_DDP_WORKER';

export interface ProcessGroup {
  readonly rank: number;
  readonly world: number;
  readonly localRank: number;
  /** how the collectives run: 'host' (through the store) or a device library's name once joined (NCCL) */
  allreduce(values: Float32Array, op: 'avg'): Promise<Float32Array>;
  allreduce(values: Float64Array, op: 'sum' | 'max' | 'avg'): Promise<Float64Array>;
  /** rank 0 passes the bytes, the others null; every rank gets rank 0's bytes */
  broadcast(bytes: Uint8Array | null): Promise<Uint8Array>;
  barrier(): Promise<void>;
  close(): void;
}

/** this process's place in a group, when the launcher started it; null for an ordinary run */
export function workerEnv(env: NodeJS.ProcessEnv = process.env): { rank: number; world: number; localRank: number; addr: string; port: number } | null {
  if (env[WORKER_ENV] !== '1') return null;
  const num = (k: string) => {
    const v = Number(env[k]);
    if (env[k] === undefined || !Number.isInteger(v) || v < 0) throw new Error(`internal: data-parallel worker without a valid ${k} (${env[k]})`);
    return v;
  };
  const r = { rank: num('RANK'), world: num('WORLD_SIZE'), localRank: num('LOCAL_RANK'), addr: env.MASTER_ADDR ?? '127.0.0.1', port: num('MASTER_PORT') };
  if (r.rank >= r.world) throw new Error(`internal: RANK ${r.rank} >= WORLD_SIZE ${r.world}`);
  return r;
}

/** connect to the launcher's store and say which rank this is */
export async function joinGroup(w: { rank: number; world: number; localRank: number; addr: string; port: number }): Promise<ProcessGroup> {
  const sock = await new Promise<net.Socket>((resolve, reject) => {
    const s = net.connect({ host: w.addr, port: w.port }, () => resolve(s));
    s.once('error', (e) => reject(new UserError(`error: data-parallel rank ${w.rank}: cannot reach the launcher at ${w.addr}:${w.port} (${e.message})`)));
  });
  sock.setNoDelay(true);
  let seq = 0;
  let failure: Error | null = null;
  const pending = new Map<number, { resolve: (f: Frame) => void; reject: (e: Error) => void }>();
  const fail = (e: Error) => {
    if (failure) return;
    failure = e;
    for (const p of pending.values()) p.reject(e);
    pending.clear();
  };
  const reader = new FrameReader();
  sock.on('data', (chunk) => {
    for (const f of reader.push(chunk)) {
      if (f.type === FRAME.ABORT) {
        fail(new UserError(`error: data-parallel rank ${w.rank} stopped: ${new TextDecoder().decode(f.payload)}`));
        continue;
      }
      const p = pending.get(f.seq);
      pending.delete(f.seq);
      p?.resolve(f);
    }
  });
  let closing = false;
  sock.on('close', () => {
    if (!closing) fail(new UserError(`error: data-parallel rank ${w.rank}: the connection to the launcher closed (the launcher or another rank stopped)`));
  });
  sock.on('error', () => {}); // 'close' follows and reports it
  const call = (type: FrameType, payload: Uint8Array): Promise<Frame> => {
    if (failure) return Promise.reject(failure);
    const s = ++seq;
    return new Promise<Frame>((resolve, reject) => {
      pending.set(s, { resolve, reject });
      sock.write(encodeFrame(type, s, payload));
    });
  };
  const hello = new Uint8Array(4);
  new DataView(hello.buffer).setUint32(0, w.rank, true);
  sock.write(encodeFrame(FRAME.HELLO, 0, hello));
  const ops: Record<string, ReduceOp> = { avg: REDUCE_OP.AVG_F64, sum: REDUCE_OP.SUM_F64, max: REDUCE_OP.MAX_F64 };
  async function allreduce(values: Float32Array, op: 'avg'): Promise<Float32Array>;
  async function allreduce(values: Float64Array, op: 'sum' | 'max' | 'avg'): Promise<Float64Array>;
  async function allreduce(values: Float32Array | Float64Array, op: 'sum' | 'max' | 'avg'): Promise<Float32Array | Float64Array> {
    const code = values instanceof Float32Array ? REDUCE_OP.AVG_F32 : ops[op];
    const f = await call(FRAME.REDUCE, reducePayload(code, values));
    return reduceValues(f.payload).values;
  }
  return {
    rank: w.rank,
    world: w.world,
    localRank: w.localRank,
    allreduce,
    async broadcast(bytes: Uint8Array | null): Promise<Uint8Array> {
      return (await call(FRAME.BCAST, bytes ?? new Uint8Array(0))).payload;
    },
    async barrier(): Promise<void> {
      await allreduce(new Float64Array(1), 'sum');
    },
    close(): void {
      closing = true;
      sock.end();
    },
  };
}
