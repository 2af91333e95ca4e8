/**
 * lanes: which stream ("lane") each node of a program's CUDA graph is captured on, and which earlier nodes
 * it must wait for, so that independent nodes run side by side inside the one graph per step (a linear's
 * weight gradient beside its input gradient, attention's dK/dV beside dQ): at the small transformer's sizes
 * a cuBLASLt GEMM fills a few dozen of the H200's 132 SMs, so two of them at once take little longer than one.
 * Consumes a CudaPlan's program (plan.ts: every node's arguments as byte ranges of the one device allocation,
 * with their access); produces a LaneSchedule, plain data that host.ts turns into stream-capture code
 * (events recorded and waited on between capturing streams become the graph's edges; nothing is launched).
 *
 * The rule: node j must follow node i < j when one of them writes bytes the other reads or writes (the plan's
 * memory reuse included: a later node writing a buffer an earlier one read is ordered after it). Each node's
 * ranges: its kernels' arguments (every variant: a cuBLASLt call's operands, bias and its before / after /
 * unfused kernels; not its generated fallback, which only runs where host.ts captures on one stream), and, where
 * the program shares one scratch slice between its lanes (laneScratch false), the whole scratch region when any of
 * its kernels takes it. The scratch region holds one slice per lane (plan.ts scratchLane): a kernel takes its own
 * lane's slice (host.ts), so split-K and chunked-reduction partial sums on different lanes never meet and order
 * nothing; only a program with 3xTF32 calls (their split operands planned at fixed offsets of slice 0) keeps one
 * slice for all its kernels, whose users then stay in order. (Before 6 Dec one slice served all: every layernorm
 * gradient's partials waited for the weight gradient beside it, bench/NOTES.md v22.) A cuBLASLt call's workspace is its lane's own
 * (plan.ltWorkspace holds one per lane), so it orders nothing; the step scalars are read-only inside a step.
 * Greedy list scheduling on rough node costs (nodeCost) with vector clocks: node k goes on the lane where it could
 * start first (its lane's last node and its dependencies finished); it waits on the latest conflicting node of every other lane that its lane's clock does not already cover.
 * At the end every lane joins lane 0 (stream capture requires it; the output gather runs after). A program whose
 * estimated gain is under MIN_LANE_GAIN_US, or whose largest cuBLASLt call is over LANE_MAX_MACS multiply-adds, stays one chain.
 * laneProblems re-checks a schedule against the rule for every pair of nodes (the build runs it).
 * MPSC_CUDA_LANES (build time, 1..4, default 3; 1: one chain). Measured (6 Dec, H100, bench/NOTES.md v22): gpt_tiny 0.753 ms
 * at two lanes with one shared scratch slice -> 0.732 with a slice per lane -> 0.719 at three -> 0.706 with the memory plan's
 * reuse gap (MPSC_CUDA_REUSE_GAP=2); four lanes 0.722, one 0.847. Before (5 Dec, v13c): gpt_tiny 0.786 ->
 * 0.707 ms at two lanes on the H200 (0.803 -> 0.722 on an H100, 0.733 at three), bitwise the same trainings; programs of
 * large GEMMs stay one chain (LANE_MAX_MACS).
 * (The first measurements, v13 / v13b, had compared one build with itself: the switch was not part of the build key.)
 */
import { envFlag, envInts } from '../env_switch.js';
import type { CudaPlan, GraphNodePlan, KernelArgPlan, KernelNodePlan, ProgramPlan } from './plan.js';

/** lanes of the CUDA graphs (MPSC_CUDA_LANES at build time, default 3; 1: one chain) */
export function cudaLanes(): number {
  return envInts('MPSC_CUDA_LANES', 1, 1, 4, [3], 'streams each CUDA graph is captured on; 1: a single chain')[0];
}

/**
 * MPSC_CUDA_REUSE_GAP (build time, 0..64): on more than one lane, the memory plan reuses a dead buffer only for a
 * value written more than this many IR nodes after its last reader (ir/memory_plan.ts reuseGap), so that a node
 * does not wait for its neighbour on another lane only because it writes where that one read
 */
export function reuseGap(): number {
  return envInts('MPSC_CUDA_REUSE_GAP', 1, 0, 64, [2], 'IR nodes between a buffer\'s last reader and its next writer, on lanes')[0];
}

/**
 * byte ranges [lo, hi) a node reads (`r`) and writes (`w`), each sorted by lo; `slice`: the IR node whose partial
 * sums the node keeps in its lane's scratch slice (laneScratch), which every graph node of that IR node must share
 */
export interface NodeAccess { r: [number, number][]; w: [number, number][]; slice?: number }

/**
 * where the scratch users of one IR node (a split-K GEMM and its reduction, a layernorm gradient and its finish) are
 * ordered among themselves when each lane has its own slice: one byte per IR node past any device address
 */
const SLICE_ORDER_BASE = 2 ** 48;

export interface LaneSchedule {
  lanes: number;
  /** lane of node k */
  lane: number[];
  /** node k first waits for these earlier nodes (on other lanes) */
  waits: number[][];
  /** node k records its event (some later node, or the final join, waits for it) */
  recorded: boolean[];
  /** the last node of each lane > 0 that lane 0 waits for at the end (-1: the lane holds no node, or lane 0 already follows it) */
  joins: number[];
  /** the rough costs' sum (one chain) and the lanes' estimated makespan, microseconds (nodeCost) */
  serialUs: number;
  spanUs: number;
  /** the program's kernels take their own lane's slice of the scratch region (laneScratch; planLanes sets it) */
  ownScratch?: boolean;
  /**
   * node k is on the estimated critical path (criticalNodes): captured on its lane's high-priority stream, so its
   * kernels' blocks go first when the other lanes' kernels hold the SMs (MPSC_CUDA_LANE_PRIORITY; absent: off)
   */
  critical?: boolean[];
}

/**
 * MPSC_CUDA_LANE_PRIORITY (build time, default 0): the graph's nodes on the estimated critical path (criticalNodes)
 * captured on a high-priority stream of their lane and the graph instantiated with the nodes' priorities
 * (cudaGraphInstantiateFlagUseNodePriority: a kernel node takes its capturing stream's priority), the other nodes at
 * the default (lowest) priority
 */
export function lanePriority(): boolean {
  return envFlag('MPSC_CUDA_LANE_PRIORITY', false);
}

/**
 * the nodes without slack on the dependency graph's longest path (edges: conflicts, weights: cost): top level +
 * bottom level = the longest path, within 0.5 us. On several lanes the backward's chain moves between lanes (a
 * weight gradient takes the lane its input gradient's predecessor was on), so priority is per node, not per lane.
 */
export function criticalNodes(acc: NodeAccess[], cost: number[]): boolean[] {
  const n = acc.length;
  const succ: number[][] = acc.map(() => []);
  const top = new Array<number>(n).fill(0);
  for (let k = 0; k < n; k++)
    for (let i = 0; i < k; i++)
      if (conflicts(acc[i], acc[k])) {
        succ[i].push(k);
        top[k] = Math.max(top[k], top[i] + cost[i]);
      }
  const bottom = new Array<number>(n).fill(0);
  for (let k = n - 1; k >= 0; k--) bottom[k] = cost[k] + Math.max(0, ...succ[k].map((j) => bottom[j]));
  const span = Math.max(0, ...bottom);
  return top.map((t, k) => span - t - bottom[k] < 0.5);
}

/**
 * The least estimated gain (one chain's rough time minus the lanes' makespan, nodeCost microseconds) for which a
 * program is captured on several lanes; below it, one chain: a graph with branches launched slower on the H200 (the
 * MNIST MLP step +22 us with one weight gradient on a second lane, bench/NOTES.md v13).
 */
export const MIN_LANE_GAIN_US = 40;

/**
 * The most multiply-adds a program's largest cuBLASLt call may have for the program to take lanes: larger GEMMs
 * fill the GPU by themselves, and two at once only contend. Measured (bench/NOTES.md v13c): gpt_tiny (largest call
 * 2^27) 0.786 -> 0.707 ms on the H200 at two lanes; GPT-2 small bf16 (2^39) 36.9 -> 37.6 ms on the H200; gpt_char
 * (2^34.8) 25.06 -> 24.86 ms on an H100, within 1%, so it is left out with GPT-2 rather than a bound drawn between them
 * on one measurement.
 */
export const LANE_MAX_MACS = 2 ** 31;

/** the multiply-adds of a program's largest cuBLASLt call (0 without one) */
export function largestCallMacs(p: ProgramPlan): number {
  return Math.max(0, ...p.nodes.map((n) => (n.kind === 'cublaslt' ? n.gemm.m * n.gemm.n * n.gemm.k * n.gemm.batch : 0)));
}

/**
 * the kernels a node launches on its lane: a cuBLASLt call's before / after / unfused kernels, not its fallback
 * (the fallback runs only where a call has no algorithm or the build no cuBLASLt: host.ts then captures every
 * graph on one stream, `b->serial`, so its split-K scratch never meets another lane's)
 */
function kernelsOf(n: GraphNodePlan): KernelNodePlan[] {
  return n.kind === 'kernel' ? [n] : [...n.before, ...n.after, ...n.unfused];
}

const sorted = (xs: [number, number][]) => xs.filter(([lo, hi]) => hi > lo).sort((a, b) => a[0] - b[0] || a[1] - b[1]);

/**
 * whether program p's kernels take their own lane's slice of the scratch region (see the header): on more than one
 * lane (`lanes`, at most the plan's: one slice each), unless a 3xTF32 call of p reads its split operands from fixed
 * offsets of the region; MPSC_CUDA_LANE_SCRATCH=0
 * (build time, A/B) shares slice 0 as before 6 Dec
 */
export function laneScratch(plan: CudaPlan, p: ProgramPlan, lanes: number): boolean {
  return lanes > 1 && lanes <= plan.lanes && envFlag('MPSC_CUDA_LANE_SCRATCH', true) && !p.nodes.some((n) => n.kind === 'cublaslt' && n.gemm.tf32x3 !== undefined);
}

/** the byte ranges node n touches (see the header; `ownScratch`: laneScratch of its program) */
export function nodeAccess(plan: CudaPlan, n: GraphNodePlan, ownScratch = false): NodeAccess {
  const r: [number, number][] = [], w: [number, number][] = [];
  let slice: number | undefined;
  const add = (a: KernelArgPlan, access = a.access) => {
    const x: [number, number] = [a.offset, a.offset + a.bytes];
    if (access !== 'w') r.push(x);
    if (access !== 'r') w.push(x);
  };
  for (const k of kernelsOf(n)) {
    k.args.forEach((a) => add(a));
    if (k.scratch && !ownScratch) w.push([plan.scratch.offset, plan.scratch.offset + plan.scratch.bytes]);
    // its lane's slice: ordered after (and on the lane of) the IR node's earlier users of it, nothing else
    else if (k.scratch) {
      slice = k.node;
      w.push([SLICE_ORDER_BASE + k.node, SLICE_ORDER_BASE + k.node + 1]);
    }
  }
  if (n.kind === 'cublaslt') {
    add(n.a, 'r');
    add(n.b, 'r');
    add(n.d, 'rw');
    if (n.bias) add(n.bias, 'rw');
  }
  return { r: sorted(r), w: sorted(w), ...(slice !== undefined ? { slice } : {}) };
}

function overlaps(a: [number, number][], b: [number, number][]): boolean {
  let i = 0, j = 0;
  while (i < a.length && j < b.length) {
    if (a[i][1] <= b[j][0]) i++;
    else if (b[j][1] <= a[i][0]) j++;
    else return true;
  }
  return false;
}

/** whether two nodes must stay in order: one writes what the other reads or writes */
export function conflicts(x: NodeAccess, y: NodeAccess): boolean {
  return overlaps(x.w, y.w) || overlaps(x.w, y.r) || overlaps(x.r, y.w);
}

/**
 * A rough time of node n in microseconds, only to choose lanes (list scheduling): a cuBLASLt call 6 us plus its
 * multiply-adds at 20 TFLOP/s, a kernel 3 us plus the bytes of its arguments at 3 TB/s.
 */
export function nodeCost(n: GraphNodePlan): number {
  if (n.kind === 'cublaslt') return 6 + (2 * n.gemm.m * n.gemm.n * n.gemm.k * n.gemm.batch) / 20e6 + kernelsOf(n).reduce((t, k) => t + nodeCost(k), 0);
  return 3 + n.args.reduce((t, a) => t + a.bytes, 0) / 3e6;
}

/**
 * The lanes of one program's nodes (accesses: nodeAccess of each node, in graph order; cost: nodeCost of each,
 * default 1): list scheduling on the rough costs. Node k goes on the lane where it could start first: the lane's
 * last node's estimated finish or k's dependencies' latest, whichever is later (ties: the lane whose last node
 * k depends on, then the lower lane).
 */
export function scheduleLanes(acc: NodeAccess[], lanes: number, cost: number[] = acc.map(() => 1)): LaneSchedule {
  const n = acc.length;
  const lane = new Array<number>(n).fill(0);
  const waits: number[][] = acc.map(() => []);
  const recorded = new Array<boolean>(n).fill(false);
  const byLane: number[][] = Array.from({ length: lanes }, () => []);
  // clock[l][m]: the highest node of lane m known finished before lane l's next node starts (-1: none)
  const clock: number[][] = Array.from({ length: lanes }, () => new Array<number>(lanes).fill(-1));
  // vc[k]: node k's clock (what is finished before it ends, itself included)
  const vc: number[][] = [];
  const tail = (l: number) => (byLane[l].length ? byLane[l][byLane[l].length - 1] : -1);
  const finish: number[] = [];
  // the lane of each IR node's scratch slice (its first user's)
  const sliceLane = new Map<number, number>();
  for (let k = 0; k < n; k++) {
    // the latest node of each lane that k conflicts with (-1: none)
    const latest = byLane.map((nodes) => {
      for (let i = nodes.length - 1; i >= 0; i--) if (conflicts(acc[nodes[i]], acc[k])) return nodes[i];
      return -1;
    });
    const ready = Math.max(0, ...latest.map((d) => (d >= 0 ? finish[d] : 0)));
    // a scratch slice's users stay on the lane of the IR node's first one (its partial sums are in that lane's slice)
    const slice = acc[k].slice, pin = slice === undefined ? -1 : (sliceLane.get(slice) ?? -1);
    let c = 0, best = Infinity, bestOwn = false;
    for (let l = 0; l < lanes; l++) {
      if (pin >= 0 && l !== pin) continue;
      const start = Math.max(ready, tail(l) >= 0 ? finish[tail(l)] : 0);
      const own = latest[l] >= 0 && latest[l] === tail(l);
      if (start < best - 1e-9 || (start <= best + 1e-9 && own && !bestOwn)) { c = l; best = start; bestOwn = own; }
    }
    finish[k] = best + cost[k];
    const clk = [...clock[c]];
    // waits, the most recent first (its clock may cover the others)
    const order = latest.map((d, l) => ({ d, l })).filter(({ d, l }) => l !== c && d >= 0).sort((a, b) => b.d - a.d);
    for (const { d, l } of order) {
      if (d <= clk[l]) continue;
      waits[k].push(d);
      recorded[d] = true;
      vc[d].forEach((x, m) => { if (x > clk[m]) clk[m] = x; });
    }
    clk[c] = k;
    vc[k] = clk;
    clock[c] = [...clk];
    lane[k] = c;
    if (slice !== undefined && pin < 0) sliceLane.set(slice, c);
    byLane[c].push(k);
  }
  const joins = new Array<number>(lanes).fill(-1);
  for (let l = 1; l < lanes; l++) {
    const t = tail(l);
    if (t > clock[0][l]) {
      joins[l] = t;
      recorded[t] = true;
      vc[t].forEach((x, m) => { if (x > clock[0][m]) clock[0][m] = x; });
    }
  }
  return { lanes, lane, waits, recorded, joins, serialUs: cost.reduce((a, b) => a + b, 0), spanUs: Math.max(0, ...finish) };
}

/**
 * Problems of a schedule (empty when sound): a pair of conflicting nodes that may run at the same time (the
 * later one neither on the earlier one's lane nor after it through waits), a wait on a later node or on one
 * that records no event, a lane out of range, or a lane's last node that lane 0 does not follow at the end.
 */
export function laneProblems(acc: NodeAccess[], s: LaneSchedule, what = 'program'): string[] {
  const bad: string[] = [];
  const n = acc.length, L = s.lanes;
  const vc: number[][] = [];
  const clock: number[][] = Array.from({ length: L }, () => new Array<number>(L).fill(-1));
  for (let k = 0; k < n; k++) {
    const c = s.lane[k];
    if (!(c >= 0 && c < L)) { bad.push(`${what}: node ${k} on lane ${c} of ${L}`); return bad; }
    const clk = [...clock[c]];
    for (const d of s.waits[k]) {
      if (!(d >= 0 && d < k)) { bad.push(`${what}: node ${k} waits for node ${d}, not an earlier node`); continue; }
      if (!s.recorded[d]) bad.push(`${what}: node ${k} waits for node ${d}, which records no event`);
      vc[d].forEach((x, m) => { if (x > clk[m]) clk[m] = x; });
    }
    clk[c] = k;
    vc[k] = clk;
    clock[c] = [...clk];
    for (let i = 0; i < k; i++) {
      if (clk[s.lane[i]] < i && conflicts(acc[i], acc[k])) bad.push(`${what}: nodes ${i} (lane ${s.lane[i]}) and ${k} (lane ${c}) touch the same bytes and are not ordered`);
      if (acc[k].slice !== undefined && acc[i].slice === acc[k].slice && s.lane[i] !== c) bad.push(`${what}: nodes ${i} (lane ${s.lane[i]}) and ${k} (lane ${c}) share IR node ${acc[k].slice}'s scratch partial sums on different lanes`);
    }
  }
  const end = [...clock[0]];
  for (let l = 1; l < L; l++) {
    const t = s.joins[l];
    if (t >= 0) {
      if (!s.recorded[t]) bad.push(`${what}: the final join waits for node ${t}, which records no event`);
      vc[t].forEach((x, m) => { if (x > end[m]) end[m] = x; });
    }
  }
  for (let l = 1; l < L; l++) {
    let last = -1;
    s.lane.forEach((x, k) => { if (x === l) last = k; });
    if (last > end[l]) bad.push(`${what}: lane ${l}'s last node ${last} is not joined into lane 0 at the end`);
  }
  return bad;
}

/** one chain: every node on lane 0, in plan order (sound by construction) */
function oneChain(cost: number[]): LaneSchedule {
  const us = cost.reduce((a, b) => a + b, 0);
  return { lanes: 1, lane: cost.map(() => 0), waits: cost.map(() => []), recorded: cost.map(() => false), joins: [-1], serialUs: us, spanUs: us };
}

/** the schedule of every program of a plan, checked (an unsound schedule is a compiler bug: it throws) */
export function planLanes(plan: CudaPlan, lanes: number): LaneSchedule[] {
  return plan.programs.map((p: ProgramPlan) => {
    const cost = p.nodes.map(nodeCost);
    if (lanes === 1 || largestCallMacs(p) > LANE_MAX_MACS) return oneChain(cost);
    const own = laneScratch(plan, p, lanes);
    const acc = p.nodes.map((n) => nodeAccess(plan, n, own));
    const s = scheduleLanes(acc, lanes, cost);
    if (s.serialUs - s.spanUs < MIN_LANE_GAIN_US) return oneChain(cost);
    const bad = laneProblems(acc, s, p.name);
    if (bad.length) throw new Error(`internal: unsound CUDA graph lanes:\n  ${bad.slice(0, 5).join('\n  ')}`);
    return { ...s, ownScratch: own, ...(lanePriority() ? { critical: criticalNodes(acc, cost) } : {}) };
  });
}
