/**
 * replica: what the training loop (runtime/trainer.ts) does differently as one rank of a data-parallel
 * group (issue 18), written once for every device.
 *
 * Consumes: the rank's ProcessGroup (group.ts), its Session and the global batches the batcher fills.
 * Produces:
 *  - shardBatch: rank r's rows [r*B/N, (r+1)*B/N) of every input of a global batch (views, no copy):
 *    the same global batches as one process, split by rank, so `batch` stays the global batch;
 *  - rankSeed: the dropout key of rank r (rank 0 keeps the run seed; the others get distinct streams,
 *    so replicas do not drop the same positions of their shards);
 *  - joinDeviceCollective: a session with its own collective (cuda: NCCL) makes the communicator
 *    (rank 0's unique id broadcast through the store, ncclCommInitRank on every rank);
 *  - allreduceGradients: the gradient accumulators averaged over the ranks before apply_update: on
 *    the device's collective (one NCCL group of in-place ncclAvg all-reduces, enqueued after the
 *    step, no host wait), else through the host (each rank's accumulators read, averaged by the store
 *    in rank order in float64, written back: bitwise identical on every rank).
 * Relies on: gradients of a mean loss over B/N rows averaged over N ranks = the gradient of the mean
 * over B rows (every loss of the catalogue is a mean over the batch); programs built with
 * `splitUpdate` (train_step accumulates, apply_update updates).
 */
import { UserError } from '../../compiler/errors.js';
import type { Batch, Session } from '../session.js';
import type { ProcessGroup } from './group.js';

/** rank r's shard of a global batch: the leading dimension split into N equal parts */
export function shardBatch(batch: Batch, globalBatch: number, rank: number, world: number): Batch {
  if (world === 1) return batch;
  const b = globalBatch / world;
  return batch.map((a) => {
    const per = a.length / globalBatch;
    return a.subarray(rank * b * per, (rank + 1) * b * per);
  });
}

/** the dropout key of a rank (rank 0: the run seed) */
export function rankSeed(seed: number, rank: number): number {
  return rank === 0 ? seed : (seed ^ Math.imul(rank, 0x9e3779b9)) >>> 0;
}

/** the global batch split over the ranks, or a UserError saying how to fix it */
export function localBatch(globalBatch: number, world: number, flag: string): number {
  if (globalBatch % world !== 0) {
    const up = Math.ceil(globalBatch / world) * world;
    throw new UserError(
      `error: batch ${globalBatch} cannot be split over ${flag} ${world}: each rank takes batch / ${world} samples of every global batch\n` +
        `  help: use a batch that is a multiple of ${world} (--batch ${up}, or --batch ${Math.max(world, up - world)})`,
    );
  }
  return globalBatch / world;
}

/** the device's collective joined (true), or false when the session has none (the host all-reduces) */
export async function joinDeviceCollective(session: Session, group: ProcessGroup): Promise<boolean> {
  const c = session.collective;
  if (!c) return false;
  let id: Uint8Array | null = null;
  let why = '';
  if (group.rank === 0) {
    try {
      id = c.uniqueId();
    } catch (e) {
      why = (e as Error).message.replace(/^mpsc: collectiveId failed: /, '');
    }
  }
  // rank 0 sends the id, or an empty one when it has none (then every rank stops with the reason)
  const shared = await group.broadcast(id ?? new Uint8Array(0));
  if (shared.length === 0) {
    throw new UserError(`error: data-parallel training on ${session.device}: ${group.rank === 0 ? why : 'rank 0 could not create the ' + c.name + ' communicator (its error is above)'}`);
  }
  try {
    c.init(group.world, group.rank, shared);
  } catch (e) {
    throw new UserError(`error: data-parallel rank ${group.rank}: ${(e as Error).message.replace(/^mpsc: collectiveInit failed: /, '')}`);
  }
  return true;
}

/** average every gradient accumulator over the ranks (in place, before apply_update) */
export async function allreduceGradients(session: Session, group: ProcessGroup, onDevice: boolean, accs: { name: string; n: number }[]): Promise<void> {
  if (onDevice) {
    session.collective!.allreduceGrads();
    return;
  }
  if (group.world === 1) return; // the average of one rank is its own gradients
  const total = accs.reduce((s, a) => s + a.n, 0);
  const flat = new Float32Array(total);
  let off = 0;
  for (const a of accs) {
    flat.set(session.read(a.name), off);
    off += a.n;
  }
  const avg = await group.allreduce(flat, 'avg');
  off = 0;
  for (const a of accs) {
    session.write(a.name, avg.subarray(off, off + a.n));
    off += a.n;
  }
}
