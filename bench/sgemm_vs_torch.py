#!/usr/bin/env python3
"""sgemm_vs_torch: mpsc's sgemm (bench/sgemm_floor.cpp) against torch.mm shape by shape, same transposes, same
thread counts: the per-shape view behind compare.py's single "sgemm rate" (the best torch.mm square).

  python3 bench/sgemm_vs_torch.py [--threads 1,2] [--rounds 1] [--pin] [--variant NAME:FLAGS ...] [FILTER]
  (a python that imports torch)

sgemm_floor.cpp is built once (g++ -O2 -march=native, $CXX to override); then for every shape, thread count and
round, mpsc and torch are measured right after each other (the order swapped every round), so a machine whose
speed drifts moves both alike. One line per shape and thread count: the median over rounds of torch.mm's and
mpsc's GFLOP/s (each itself a median of 7 samples of >= ~20 ms) and mpsc / torch.
--pin: each measurement at T threads runs under `taskset` on the first T physical cores (one logical CPU per core
from `lscpu -p=CPU,CORE,SOCKET`, as bench/cpu_sweep_pinned.sh picks them), torch in a child python, so neither
side's threads can land on hyperthread siblings of each other.
--variant NAME:FLAGS (repeatable): one more build of sgemm_floor.cpp with extra compiler FLAGS (space-separated,
e.g. `fma:-DMPSC_FAST_AMX=0` or `grid:-DMPSC_FAST_AMX_GRID=1`), measured right after the default build at every
shape and thread count: one more column each (GFLOP/s and its ratio to torch.mm)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_rate(ta, tb, M, N, K, threads):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a = torch.rand(K, M, generator=g).t() if ta else torch.rand(M, K, generator=g)
    b = torch.rand(N, K, generator=g).t() if tb else torch.rand(K, N, generator=g)
    c = torch.empty(M, N)
    flop = 2.0 * M * N * K
    inner = max(1, int(30e9 * 0.03 / flop * threads))
    for _ in range(3):
        torch.mm(a, b, out=c)
    rates = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b, out=c)
        rates.append(flop * inner / (time.perf_counter() - t) / 1e9)
    return sorted(rates)[len(rates) // 2]


def physical_cpus():
    """one logical CPU per physical core, in (socket, core) order"""
    out = subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET"], capture_output=True, text=True, check=True).stdout
    seen, cpus = set(), []
    rows = [tuple(int(x) for x in l.split(",")) for l in out.splitlines() if l and not l.startswith("#")]
    for cpu, core, sock in sorted(rows, key=lambda r: (r[2], r[1], r[0])):
        if (sock, core) not in seen:
            seen.add((sock, core))
            cpus.append(cpu)
    return cpus


def pin_prefix(cpus, threads):
    if cpus is None:
        return []
    if len(cpus) < threads:
        raise SystemExit(f"sgemm_vs_torch: --pin needs {threads} physical cores, lscpu lists {len(cpus)}")
    return ["taskset", "-c", ",".join(str(c) for c in cpus[:threads])]


def torch_rate_pinned(cpus, s, threads):
    if cpus is None:
        return torch_rate(bool(s["ta"]), bool(s["tb"]), s["M"], s["N"], s["K"], threads)
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import sgemm_vs_torch as m; "
            f"print(m.torch_rate({bool(s['ta'])}, {bool(s['tb'])}, {s['M']}, {s['N']}, {s['K']}, {threads}))")
    out = subprocess.run(pin_prefix(cpus, threads) + [sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def mpsc_rate(exe, name, threads, cpus=None):
    out = subprocess.run(pin_prefix(cpus, threads) + [exe, "--json", "--no-peak", "--no-conv", "--threads",
                                                      str(threads), name],
                         capture_output=True, text=True, check=True)
    rows = [r for r in json.loads(out.stdout.strip().splitlines()[-1])["sgemm"] if r["name"] == name]
    return rows[0]["gflops"]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:FLAGS")
    ap.add_argument("filter", nargs="?", default="")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    cpus = physical_cpus() if a.pin else None
    variants = [("mpsc", [])]
    for v in a.variant:
        name, _, flags = v.partition(":")
        if not name or name in [n for n, _ in variants]:
            raise SystemExit(f"sgemm_vs_torch: --variant {v!r}: give each variant a new NAME, as NAME:FLAGS")
        variants.append((name, flags.split()))
    with tempfile.TemporaryDirectory() as tmp:
        exes = {}
        for name, flags in variants:
            exes[name] = os.path.join(tmp, f"sgemm_floor_{name}")
            subprocess.run([os.environ.get("CXX", "g++"), "-O2", "-march=native", "-std=c++17", "-pthread"] + flags +
                           ["-o", exes[name], os.path.join(HERE, "sgemm_floor.cpp")], check=True)
        exe = exes["mpsc"]
        shapes = [s for s in json.loads(subprocess.run([exe, "--list"], capture_output=True, text=True,
                                                       check=True).stdout) if a.filter in s["name"]]
        if cpus is not None:
            print(f"pinned: T threads on the first T of CPUs {','.join(str(c) for c in cpus)} (one per physical core)")
        head = "".join(f" {n:>9s} {'/torch':>7s}" for n, _ in variants)
        print(f"{'shape':42s} thr   torch.mm{head}   (GFLOP/s, medians; torch {torch.__version__})")
        for s in shapes:
            for t in threads:
                tr, mr = [], {n: [] for n, _ in variants}

                def measure_mpsc():
                    for n, _ in variants:
                        mr[n].append(mpsc_rate(exes[n], s["name"], t, cpus))

                for r in range(a.rounds):
                    # mpsc first in even rounds, torch first in odd ones
                    if r % 2 == 0:
                        measure_mpsc()
                    tr.append(torch_rate_pinned(cpus, s, t))
                    if r % 2 == 1:
                        measure_mpsc()
                tm = median(tr)
                cols = "".join(f" {median(mr[n]):9.1f} {median(mr[n]) / tm:7.2f}" for n, _ in variants)
                print(f"{s['name']:42s} {t:3d} {tm:10.1f}{cols}", flush=True)


if __name__ == "__main__":
    main()
