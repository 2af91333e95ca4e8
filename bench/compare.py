"""Side-by-side timing of mpsc and PyTorch on the reference workloads (helper of bench/compare.sh).

For each round, runs PyTorch (train steps: ../shared/bench/torch_ref.py; eval forward: bench/torch_forward.py)
and then `node bin/mpsc.js bench bench/<workload>.model --threads T --json` for each workload, all with the same
thread count (OMP_NUM_THREADS=T for torch). Prints per workload: torch ms, mpsc ms, ratio mpsc/torch (median over
rounds; with several rounds also each round's own ratio), for the train step and for the forward pass. Stdlib only (runs under /usr/bin/python3).

mpsc bench --json: the train-step median is read from train.median_ms (also accepted: any numeric leaf whose
key path mentions "train" and "median"); the forward median from eval.median_ms (or a path with "eval"/"forward"
and "median"). If the bench command is missing or fails, the torch numbers are still printed and mpsc is shown
as "n/a" with the reason.

FLOP floor: the machine's sgemm rate is measured in the same run as the best of torch.mm (OpenBLAS) on
512^2 / 1024^2 / 2048^2 float32 matrices at the same thread count; each workload's floor is its train-step FLOP
count (flops.train_step from mpsc bench --json, the compiler's count) at that rate, and the table prints
mpsc ms / floor ms (target <= 2 on the two CNN workloads).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = ["mnist_mlp_b256_adam", "mnist_cnn_b64_sgdm", "seed_cnn_b32_64px_adam"]
TARGET = 0.7
FLOOR_TARGET = 2.0
CNN_WORKLOADS = ("mnist_cnn_b64_sgdm", "seed_cnn_b32_64px_adam")

SGEMM_SCRIPT = r"""
import json, time, torch
best = 0.0
for n in (512, 1024, 2048):
    a = torch.randn(n, n); b = torch.randn(n, n); c = torch.empty(n, n)
    for _ in range(3): torch.mm(a, b, out=c)
    reps = max(3, int(2e9 / (2 * n ** 3)))
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps): torch.mm(a, b, out=c)
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t) / 1e9)
print(json.dumps({"gflops": best, "threads": torch.get_num_threads()}))
"""


def torch_sgemm(threads, python):
    """best float32 GEMM rate of torch.mm (OpenBLAS on Debian) at `threads`, GFLOP/s"""
    try:
        out = subprocess.run([python, "-c", SGEMM_SCRIPT], capture_output=True, text=True, env=torch_env(threads))
        return json.loads(out.stdout.strip().splitlines()[-1])["gflops"]
    except (OSError, ValueError, IndexError, KeyError):
        return None


def torch_env(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    return env


def run_torch(script, args, threads, python):
    """name -> ms from lines 'name device ms ms/step'"""
    out = subprocess.run([python, script] + args, env=torch_env(threads), capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(f"[compare] {os.path.basename(script)} failed (exit {out.returncode}):\n{out.stderr[-2000:]}\n")
        return {}
    got = {}
    for line in out.stdout.splitlines():
        m = re.match(r"^(\S+)\s+\S+\s+([0-9.]+)\s+ms/step", line)
        if m:
            got[m.group(1)] = float(m.group(2))
    return got


def leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (str(k).lower(),))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, float(obj)


def pick(obj, section_words, exact):
    cur = obj
    for k in exact:
        cur = cur.get(k) if isinstance(cur, dict) else None
    if isinstance(cur, (int, float)) and not isinstance(cur, bool):
        return float(cur)
    for path, v in leaves(obj):
        joined = ".".join(path)
        if any(w in joined for w in section_words) and "median" in joined and "ms" in joined:
            return v
    return None


def run_mpsc(name, threads, steps, node):
    spec = os.path.join(HERE, f"{name}.model")
    cmd = [node, os.path.join(ROOT, "bin", "mpsc.js"), "bench", spec, "--threads", str(threads), "--json"]
    if steps:
        cmd += ["--steps", str(steps)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    except OSError as e:
        return None, None, f"cannot run node: {e}"
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["(no message)"]
        msg = next((l for l in lines if "error" in l.lower()), lines[0])
        return None, None, f"mpsc bench failed (exit {out.returncode}): {msg}"
    try:
        text = out.stdout.strip()
        obj = json.loads(text[text.index("{"):])
    except (ValueError, json.JSONDecodeError):
        return None, None, "mpsc bench --json printed no JSON object"
    train = pick(obj, ("train",), ("train", "median_ms"))
    fwd = pick(obj, ("eval", "forward"), ("eval", "median_ms"))
    flops = (obj.get("flops") or {}).get("train_step")
    FLOPS[name] = float(flops) if isinstance(flops, (int, float)) else None
    return train, fwd, None if train is not None else "no train median_ms in mpsc bench JSON"


FLOPS = {}


def fmt(x):
    return f"{'n/a':>9s}" if x is None else f"{x:9.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="repeat torch+mpsc this many times, report medians")
    ap.add_argument("--steps", type=int, default=0, help="passed to mpsc bench --steps (0: its default)")
    ap.add_argument("--python", default="/usr/bin/python3", help="python with torch (Debian's, not pyenv's)")
    ap.add_argument("--torch-ref", default=os.environ.get("TORCH_REF", os.path.join(ROOT, "..", "shared", "bench", "torch_ref.py")))
    ap.add_argument("--skip-torch-forward", action="store_true")
    ap.add_argument("--skip-floor", action="store_true", help="do not measure torch.mm's sgemm rate")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("workloads", nargs="*", default=WORKLOADS)
    a = ap.parse_args()

    if not os.path.exists(a.torch_ref):
        sys.exit(f"[compare] {a.torch_ref} not found (set --torch-ref or TORCH_REF)")
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if "openblas" not in blas:
        sys.stderr.write(f"[compare] warning: libblas.so.3 -> {blas}: Debian's torch then uses a reference BLAS "
                         "and is not a fair anchor (apt-get install libopenblas0-pthread)\n")
    node = shutil.which("node") or "node"
    res = {w: {"torch_train": [], "torch_fwd": [], "mpsc_train": [], "mpsc_fwd": [], "why": None} for w in a.workloads}
    for r in range(a.rounds):
        sys.stderr.write(f"[compare] round {r + 1}/{a.rounds}: torch train steps\n")
        tt = run_torch(a.torch_ref, ["cpu"], a.threads, a.python)
        tf = {}
        if not a.skip_torch_forward:
            sys.stderr.write(f"[compare] round {r + 1}/{a.rounds}: torch forward (no_grad)\n")
            tf = run_torch(os.path.join(HERE, "torch_forward.py"), ["cpu"] + a.workloads, a.threads, a.python)
        for w in a.workloads:
            sys.stderr.write(f"[compare] round {r + 1}/{a.rounds}: mpsc bench {w}\n")
            mt, mf, why = run_mpsc(w, a.threads, a.steps, node)
            e = res[w]
            if w in tt: e["torch_train"].append(tt[w])
            if w in tf: e["torch_fwd"].append(tf[w])
            if mt is not None: e["mpsc_train"].append(mt)
            if mf is not None: e["mpsc_fwd"].append(mf)
            if why: e["why"] = why

    rate = None
    if not a.skip_floor:
        sys.stderr.write("[compare] sgemm rate: torch.mm (OpenBLAS)\n")
        rate = torch_sgemm(a.threads, a.python)
    med = lambda xs: statistics.median(xs) if xs else None
    ratio = lambda m, t: m / t if m is not None and t else None
    rows = []
    for w in a.workloads:
        e = res[w]
        row = {"workload": w, "threads": a.threads,
               "torch_train_ms": med(e["torch_train"]), "mpsc_train_ms": med(e["mpsc_train"]),
               "torch_forward_ms": med(e["torch_fwd"]), "mpsc_forward_ms": med(e["mpsc_fwd"]), "mpsc_error": e["why"]}
        row["train_ratio"] = ratio(row["mpsc_train_ms"], row["torch_train_ms"])
        row["forward_ratio"] = ratio(row["mpsc_forward_ms"], row["torch_forward_ms"])
        # per-round ratios (torch and mpsc of one round ran minutes apart at most): their spread is the
        # honest error bar of the ratio on a machine whose speed drifts
        row["train_ratio_rounds"] = [m / t for m, t in zip(e["mpsc_train"], e["torch_train"]) if t]
        row["forward_ratio_rounds"] = [m / t for m, t in zip(e["mpsc_fwd"], e["torch_fwd"]) if t]
        row["train_flops"] = FLOPS.get(w)
        row["floor_ms"] = row["train_flops"] / (rate * 1e9) * 1e3 if rate and row["train_flops"] else None
        row["floor_ratio"] = ratio(row["mpsc_train_ms"], row["floor_ms"])
        rows.append(row)
    if a.json:
        print(json.dumps({"threads": a.threads, "rounds": a.rounds, "target_ratio": TARGET, "sgemm_gflops": rate,
                          "floor_target": FLOOR_TARGET, "workloads": rows}))
        return
    print(f"threads={a.threads} rounds={a.rounds} (ratio = mpsc/torch, target <= {TARGET})")
    print(f"{'workload':26s} {'pass':7s} {'torch ms':>9s} {'mpsc ms':>9s} {'ratio':>7s}  per-round ratios")
    for row in rows:
        for label, t, m, q, qr in (
                ("train", row["torch_train_ms"], row["mpsc_train_ms"], row["train_ratio"], row["train_ratio_rounds"]),
                ("forward", row["torch_forward_ms"], row["mpsc_forward_ms"], row["forward_ratio"], row["forward_ratio_rounds"])):
            if t is None and m is None:
                continue
            qs = "n/a" if q is None else f"{q:6.2f}{' ok' if q <= TARGET else ''}"
            rs = " ".join(f"{x:.2f}" for x in qr) if len(qr) > 1 else ""
            print(f"{row['workload']:26s} {label:7s} {fmt(t)} {fmt(m)} {qs:>7s}  {rs}")
        if row["mpsc_error"]:
            print(f"  mpsc: {row['mpsc_error']}")
    if rate:
        print(f"\nFLOP floor at the machine's sgemm rate: torch.mm (OpenBLAS), {a.threads} threads, {rate:.1f} GFLOP/s")
        print(f"{'workload':26s} {'GFLOP':>7s} {'floor ms':>9s} {'mpsc ms':>9s} {'x floor':>8s}")
        for row in rows:
            if row["floor_ms"] is None:
                continue
            q = row["floor_ratio"]
            tgt = row["workload"] in CNN_WORKLOADS
            qs = "n/a" if q is None else f"{q:5.2f}{(' ok' if q <= FLOOR_TARGET else '') if tgt else ''}"
            print(f"{row['workload']:26s} {row['train_flops'] / 1e9:7.3f} {fmt(row['floor_ms'])} {fmt(row['mpsc_train_ms'])} {qs:>8s}")
        print(f"(target: x floor <= {FLOOR_TARGET} on {', '.join(CNN_WORKLOADS)})")


if __name__ == "__main__":
    main()
