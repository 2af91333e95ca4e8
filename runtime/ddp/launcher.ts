/**
 * launcher: `mpsc train SPEC --gpus N` / `--ranks N` (issue 18). The process the user started becomes
 * the launcher: it hosts the store (a local TCP server: rendezvous, the host collectives of wire.ts),
 * starts one worker process per rank with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; CUDA_VISIBLE_DEVICES = the rank's GPU; NCCL_NVLS_ENABLE=0
 * unless set: NVLink multicast off) re-running the same command line, and watches them.
 *
 * Consumes: the worker command line and the group's size (and the GPUs for --gpus). Produces: the exit
 * code of the run: 0 when every rank finished, 130 when they were interrupted (143 by SIGTERM), else the first failing
 * rank's (1 for a rank killed by a signal), after printing which rank died and why.
 * Watchdog: when a rank exits non-zero or dies, the launcher sends ABORT to the others (a rank waiting
 * in a host collective stops at once with a UserError), then SIGTERM after 1 s and SIGKILL after 5 s
 * (a rank blocked inside NCCL cannot read the ABORT), so nothing hangs. SIGINT is forwarded to every
 * rank (they agree on the step to stop at, and rank 0 writes the checkpoint); the workers run in their
 * own process group so a terminal's Ctrl-C reaches them only through the launcher, once. The launcher's
 * first SIGTERM is forwarded as SIGINT too (a graceful stop, exit 143); a second SIGTERM, or SIGHUP, stops
 * every rank as a failure does (exit 143 / 129). The ranks themselves keep SIGTERM's default (the
 * watchdog's SIGTERM ends a rank at once). A rank still running 30 s after rank 0 finished is stopped as stuck.
 * Output: rank 0's stdout and stderr are the run's (it alone writes the run folder and the console
 * lines); the other ranks' stderr lines are forwarded with a `[rank r]` prefix.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as net from 'node:net';
import { UserError } from '../../compiler/errors.js';
import { WORKER_ENV } from './group.js';
import { FRAME, FrameReader, encodeFrame, reduceInRankOrder, reducePayload, reduceValues } from './wire.js';

export interface LaunchOptions {
  world: number;
  /** the program and arguments each worker runs (the same mpsc command line) */
  command: string;
  args: string[];
  /** --gpus: the device id (CUDA_VISIBLE_DEVICES entry) of each local rank */
  gpus?: string[];
  /** extra environment for every worker */
  env?: Record<string, string>;
  /** where the launcher's own lines go (default stderr) */
  log?: (line: string) => void;
}

/**
 * The GPUs a process of this machine sees, as CUDA_VISIBLE_DEVICES entries: that variable's list when
 * set, else one index per GPU nvidia-smi lists (what cudaGetDeviceCount counts); [] without a driver.
 */
export function visibleGpus(env: NodeJS.ProcessEnv = process.env, listed: () => number = nvidiaSmiGpus): string[] {
  const cvd = env.CUDA_VISIBLE_DEVICES;
  if (cvd !== undefined) {
    // as the CUDA runtime reads it: entries up to the first invalid one; "" or "-1" hides every GPU
    const ids = cvd.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
    const valid: string[] = [];
    for (const id of ids) {
      if (id === '-1' || !/^(\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+)$/.test(id)) break;
      valid.push(id);
    }
    return listed() > 0 ? valid : [];
  }
  return Array.from({ length: listed() }, (_, i) => String(i));
}

/** how many GPUs `nvidia-smi -L` lists (0 without a driver) */
export function nvidiaSmiGpus(): number {
  const r = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return 0;
  return r.stdout.split('\n').filter((l) => /^GPU \d+/.test(l)).length;
}

/** --gpus N | all against the visible GPUs: the device ids of the ranks, or a UserError */
export function pickGpus(request: string, visible: string[]): string[] {
  const n = request === 'all' ? visible.length : Number(request);
  if (request !== 'all' && (!/^\d+$/.test(request) || !Number.isSafeInteger(n) || n < 1)) {
    throw new UserError(`error: --gpus must be a positive integer or 'all' (got '${request}')`);
  }
  if (visible.length === 0) {
    throw new UserError(`error: --gpus ${request}: this machine shows no CUDA GPU (nvidia-smi lists none${process.env.CUDA_VISIBLE_DEVICES !== undefined ? `, or CUDA_VISIBLE_DEVICES='${process.env.CUDA_VISIBLE_DEVICES}' hides them` : ''})\n  help: train on the CPU with --device cpu (--ranks N for data-parallel ranks)`);
  }
  if (n > visible.length) {
    throw new UserError(`error: --gpus ${request}: only ${visible.length} GPU${visible.length === 1 ? ' is' : 's are'} visible (${visible.join(', ')})\n  help: use --gpus ${visible.length} (or --gpus all)`);
  }
  return visible.slice(0, n);
}

/** Start the store and the workers; resolves with the run's exit code once every worker has exited. */
export async function launch(o: LaunchOptions): Promise<number> {
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const N = o.world;
  const sockets: (net.Socket | null)[] = new Array(N).fill(null);
  const rounds = new Map<number, { type: number; parts: (Uint8Array | null)[]; count: number }>();
  let failed: { code: number; reason: string } | null = null;
  const children: ChildProcess[] = [];
  const exited: boolean[] = new Array(N).fill(false);
  const timers: NodeJS.Timeout[] = [];

  const stopAll = (reason: string, code: number) => {
    if (failed) return;
    failed = { code, reason };
    log(`mpsc: ${reason}; stopping the other rank${N > 2 ? 's' : ''}`);
    const msg = new TextEncoder().encode(reason);
    for (const s of sockets) if (s && !s.destroyed) s.write(encodeFrame(FRAME.ABORT, 0, msg));
    const signal = (sig: NodeJS.Signals) => children.forEach((c, r) => { if (!exited[r] && c.pid) try { process.kill(c.pid, sig); } catch { /* already gone */ } });
    timers.push(setTimeout(() => signal('SIGTERM'), 1000), setTimeout(() => signal('SIGKILL'), 5000));
  };

  const server = net.createServer((sock) => {
    sock.setNoDelay(true);
    let rank = -1;
    const reader = new FrameReader();
    sock.on('data', (chunk) => {
      for (const f of reader.push(chunk)) {
        if (f.type === FRAME.HELLO) {
          rank = new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(0, true);
          if (rank >= N || sockets[rank]) return stopAll(`internal: a worker said it is rank ${rank} (world ${N})`, 2);
          sockets[rank] = sock;
          continue;
        }
        if (rank < 0) return stopAll('internal: a worker sent a collective before saying its rank', 2);
        let round = rounds.get(f.seq);
        if (!round) rounds.set(f.seq, (round = { type: f.type, parts: new Array(N).fill(null), count: 0 }));
        if (round.type !== f.type || round.parts[rank]) return stopAll(`internal: the ranks disagree on collective #${f.seq}`, 2);
        round.parts[rank] = f.payload;
        if (++round.count < N) continue;
        rounds.delete(f.seq);
        let reply: Uint8Array;
        if (f.type === FRAME.BCAST) reply = round.parts[0]!;
        else {
          const parts = round.parts.map((p) => reduceValues(p!));
          if (parts.some((p) => p.op !== parts[0].op || p.values.length !== parts[0].values.length)) return stopAll(`internal: the ranks disagree on all-reduce #${f.seq}`, 2);
          reply = reducePayload(parts[0].op, reduceInRankOrder(parts[0].op, parts.map((p) => p.values)));
        }
        const out = encodeFrame(f.type as 2 | 3, f.seq, reply);
        for (const s of sockets) s?.write(out);
      }
    });
    sock.on('error', () => {}); // a dying rank's connection: its process exit reports it
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
  });

  const onSigint = () => children.forEach((c, r) => { if (!exited[r] && c.pid) try { process.kill(c.pid, 'SIGINT'); } catch { /* gone */ } });
  process.on('SIGINT', onSigint);
  // a job scheduler's SIGTERM: the first stops the ranks as Ctrl-C does (one agreed step, rank 0's
  // checkpoint; exit 143), a second one ends them at once; a closed terminal (SIGHUP) ends them at once
  let terminated = false;
  const onTerm = (sig: NodeJS.Signals) => {
    if (sig === 'SIGTERM' && !terminated) {
      terminated = true;
      return onSigint();
    }
    stopAll(`the launcher got ${sig}`, sig === 'SIGTERM' ? 143 : 129);
  };
  process.on('SIGTERM', onTerm);
  process.on('SIGHUP', onTerm);
  const codes: number[] = new Array(N).fill(0);
  try {
    await new Promise<void>((resolveAll) => {
      let left = N;
      for (let r = 0; r < N; r++) {
        const env: NodeJS.ProcessEnv = {
          ...process.env,
          ...o.env,
          [WORKER_ENV]: '1',
          RANK: String(r),
          WORLD_SIZE: String(N),
          LOCAL_RANK: String(r),
          LOCAL_WORLD_SIZE: String(N),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          NCCL_NVLS_ENABLE: process.env.NCCL_NVLS_ENABLE ?? '0',
        };
        if (o.gpus) env.CUDA_VISIBLE_DEVICES = o.gpus[r];
        const child = spawn(o.command, o.args, { env, detached: true, stdio: ['ignore', r === 0 ? 'inherit' : 'ignore', r === 0 ? 'inherit' : 'pipe'] });
        children.push(child);
        if (r > 0 && child.stderr) {
          let rest = '';
          child.stderr.setEncoding('utf8');
          child.stderr.on('data', (d: string) => {
            const lines = (rest + d).split('\n');
            rest = lines.pop()!;
            for (const l of lines) process.stderr.write(`[rank ${r}] ${l}\n`);
          });
          child.stderr.on('end', () => { if (rest) process.stderr.write(`[rank ${r}] ${rest}\n`); });
        }
        child.on('error', (e) => stopAll(`rank ${r} could not start (${e.message})`, 1));
        child.on('exit', (code, signal) => {
          exited[r] = true;
          codes[r] = code ?? 1;
          if (signal) stopAll(`rank ${r} died (killed by ${signal})`, 1);
          // rank 0 finished: the others have nothing left but closing; one still running after 30 s is stuck
          else if (r === 0 && code === 0 && left > 1) timers.push(setTimeout(() => stopAll('rank 0 finished but another rank did not end within 30 s', 1), 30_000));
          // 130: interrupted (SIGINT reaches every rank; they stop at one agreed step), not a failure
          else if (code !== 0 && code !== 130) stopAll(`rank ${r} exited with code ${code}${code === 1 ? ' (its error is above)' : ''}`, code ?? 1);
          if (--left === 0) resolveAll();
        });
      }
    });
  } finally {
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onTerm);
    process.off('SIGHUP', onTerm);
    for (const t of timers) clearTimeout(t);
    for (const s of sockets) s?.destroy();
    server.close();
  }
  const f = failed as { code: number; reason: string } | null;
  return f ? f.code : codes.includes(130) ? (terminated ? 143 : 130) : 0;
}
