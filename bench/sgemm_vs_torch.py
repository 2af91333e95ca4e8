#!/usr/bin/env python3
"""sgemm_vs_torch: mpsc's sgemm (bench/sgemm_floor.sh) against torch.mm shape by shape, same transposes, same
thread counts, run one after the other on this machine: the per-shape view behind compare.py's single
"sgemm rate" (the best torch.mm square).

  python3 bench/sgemm_vs_torch.py [--threads 1,2] [FILTER]      (a python that imports torch)

Prints one line per shape and thread count: torch.mm and mpsc GFLOP/s (median of 7 samples of >= ~20 ms each,
the same sampling as sgemm_floor.cpp) and mpsc / torch. Consumes sgemm_floor.sh's --json (ta, tb per shape)."""
import argparse
import json
import os
import subprocess
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("filter", nargs="?", default="")
    a = ap.parse_args()
    cmd = ["sh", os.path.join(HERE, "sgemm_floor.sh"), "--json", "--no-peak", "--no-conv", "--threads", a.threads]
    out = subprocess.run(cmd + ([a.filter] if a.filter else []), capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout.strip().splitlines()[-1])["sgemm"]
    print(f"{'shape':42s} thr   torch.mm      mpsc  mpsc/torch   (GFLOP/s, median of 7; torch {torch.__version__})")
    for r in rows:
        t = torch_rate(bool(r["ta"]), bool(r["tb"]), r["M"], r["N"], r["K"], r["threads"])
        print(f"{r['name']:42s} {r['threads']:3d} {t:10.1f} {r['gflops']:9.1f} {r['gflops'] / t:11.2f}")


if __name__ == "__main__":
    main()
