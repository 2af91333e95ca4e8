"""Helper of bench/ab_checkouts.sh: interleaved `mpsc bench --json` of two checkouts (stdlib only)."""
import argparse
import functools
import json
import os
import statistics
import subprocess
import sys

DEFAULT = ["mnist_mlp_b256_adam", "mnist_cnn_b64_sgdm", "seed_cnn_b32_64px_adam"]


@functools.lru_cache(maxsize=None)
def has_device_option(root):
    """checkouts from before the CUDA backend have no `bench --device` (and always run on the CPU)"""
    out = subprocess.run(["node", os.path.join(root, "bin", "mpsc.js"), "bench", "--help"], cwd=root, capture_output=True, text=True)
    return "--device" in out.stdout


def bench(root, spec, threads, steps):
    cmd = ["node", os.path.join(root, "bin", "mpsc.js"), "bench", spec, "--threads", str(threads), "--json"]
    # the CPU backend on both sides: `auto` would pick a GPU where there is one
    if has_device_option(root):
        cmd += ["--device", "cpu"]
    if steps:
        cmd += ["--steps", str(steps)]
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ab_checkouts: {' '.join(cmd)} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    if d.get("device", "cpu") != "cpu":
        raise SystemExit(f"ab_checkouts: {root} ran on {d.get('device')}, not the CPU")
    return d["train"]["median_ms"], d["eval"]["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("workloads", nargs="*")
    o = ap.parse_intermixed_args()
    names = o.workloads or DEFAULT
    rows = {n: {"A": [], "B": []} for n in names}
    for r in range(o.rounds):
        for n in names:
            spec = os.path.join(o.b, "bench", f"{n}.model")
            for side, root in (("A", o.a), ("B", o.b)):
                t, f = bench(root, spec, o.threads, o.steps)
                rows[n][side].append((t, f))
                print(f"round {r + 1} {n} {side}: train {t:.3f} ms, forward {f:.3f} ms", flush=True)
    print(f"\nA = {o.a}\nB = {o.b}\nthreads {o.threads}, rounds {o.rounds}, medians over rounds")
    print(f"{'workload':<26} {'A train':>9} {'B train':>9} {'B/A':>6} {'A fwd':>9} {'B fwd':>9} {'B/A':>6}")
    for n in names:
        a, b = rows[n]["A"], rows[n]["B"]
        at, bt = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
        af, bf = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
        print(f"{n:<26} {at:9.3f} {bt:9.3f} {bt / at:6.3f} {af:9.3f} {bf:9.3f} {bf / af:6.3f}")


if __name__ == "__main__":
    sys.exit(main())
