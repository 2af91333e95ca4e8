"""Side-by-side timing of mpsc and PyTorch on the CPU reference workloads (helper of bench/compare.sh).

For each thread count of --threads (e.g. 2,8) and each round: PyTorch's train step and forward pass, eager and
torch.compile (bench/torch_workloads.py, OMP/MKL threads = T, one process per mode), then
`node bin/mpsc.js bench bench/<workload>.model --threads T --json` per workload (its train and eval medians).
Prints one table: per workload, pass and thread count the medians over rounds of torch eager, torch.compile and
mpsc, mpsc / the better of the two torch columns (targets: train <= 0.5, forward <= 0.7), each round's own
ratio and the best rounds' ratio (mpsc's fastest round over torch's fastest: a shared host's other load only adds
time, so it bounds what the quiet machine would show), and mpsc against its FLOP floor.

FLOP floor: the machine's sgemm rate at T threads, measured in the same run as the better of torch.mm
(MKL / OpenBLAS, best of 512^2, 1024^2, 2048^2) and mpsc's own kernel (bench/sgemm_floor.sh, square
512^3 and 1024^3, best sample); a pass's floor is its FLOP count (`flops.train_step` / `flops.eval` of
`mpsc bench --json`, the compiler's count of the direct algorithm) at that rate. Target: the CNNs and the
GPT train step within 1.5x of it (issue 17). A ratio below 1 is possible where mpsc does fewer
multiply-adds than the direct count (Winograd convolutions).
Stdlib only, so it runs under any python3.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = ["mnist_mlp_b256_adam", "mnist_cnn_b64_sgdm", "seed_cnn_b32_64px_adam", "gpt_tiny_b32_t64"]
TARGET = {"train": 0.5, "forward": 0.7}
FLOOR_TARGET = 1.5
FLOOR_WORKLOADS = ("mnist_cnn_b64_sgdm", "seed_cnn_b32_64px_adam", "gpt_tiny_b32_t64")
MODES = [("train", False), ("train", True), ("forward", False), ("forward", True)]

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

INFO_SCRIPT = "import torch; print(torch.__version__, 'MKL' if torch.backends.mkl.is_available() else 'no MKL', " \
              "'oneDNN' if torch.backends.mkldnn.is_available() else 'no oneDNN')"


def log(msg):
    sys.stderr.write(f"[compare] {msg}\n")
    sys.stderr.flush()


def torch_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(threads)
    return env


def run_torch(python, threads, workloads, forward, compiled):
    """name -> ms (or an error string) from bench/torch_workloads.py"""
    args = [python, os.path.join(HERE, "torch_workloads.py")] + (["--forward"] if forward else []) + \
        (["--compile"] if compiled else []) + workloads
    out = subprocess.run(args, env=torch_env(threads), capture_output=True, text=True)
    got = {}
    for line in out.stdout.splitlines():
        m = re.match(r"^(\S+)\s+\S+\s+([0-9.]+)\s+ms/step", line)
        if m:
            got[m.group(1)] = float(m.group(2))
            continue
        m = re.match(r"^(\S+)\s+\S+\s+error:\s*(.*)$", line)
        if m:
            got[m.group(1)] = m.group(2)
    if out.returncode != 0:
        log(f"torch_workloads.py {' '.join(args[2:])} failed (exit {out.returncode}): {out.stderr.strip()[-1500:]}")
    return got


def torch_sgemm(python, threads):
    try:
        out = subprocess.run([python, "-c", SGEMM_SCRIPT], capture_output=True, text=True, env=torch_env(threads))
        return json.loads(out.stdout.strip().splitlines()[-1])["gflops"]
    except (OSError, ValueError, IndexError, KeyError):
        return None


def mpsc_sgemm(threads):
    """best GFLOP/s of mpsc's sgemm on square 512 / 1024 at `threads` (bench/sgemm_floor.sh), or None"""
    try:
        out = subprocess.run(["sh", os.path.join(HERE, "sgemm_floor.sh"), "--json", "--no-peak", "--threads", str(threads),
                              "square"], capture_output=True, text=True)
        obj = json.loads(out.stdout.strip().splitlines()[-1])
        return max(s["best"] for s in obj["sgemm"])
    except (OSError, ValueError, IndexError, KeyError):
        return None


def run_mpsc(node, name, threads, steps):
    """(train ms, eval ms, flops dict, error)"""
    cmd = [node, os.path.join(ROOT, "bin", "mpsc.js"), "bench", os.path.join(HERE, f"{name}.model"), "--threads",
           str(threads), "--json", "--device", "cpu"] + (["--steps", str(steps)] if steps else [])  # cpu: `auto` picks CUDA on a GPU machine
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    except OSError as e:
        return None, None, {}, f"cannot run node: {e}"
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["(no message)"]
        return None, None, {}, f"mpsc bench failed (exit {out.returncode}): " + next((l for l in lines if "error" in l.lower()), lines[0])
    try:
        text = out.stdout.strip()
        obj = json.loads(text[text.index("{"):])
        return obj["train"]["median_ms"], obj["eval"]["median_ms"], obj.get("flops") or {}, None
    except (ValueError, KeyError, TypeError):
        return None, None, {}, "mpsc bench --json printed no train / eval medians"


def machine():
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} logical CPUs"


def loadavg():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2", help="comma-separated thread counts, e.g. 2,8")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every measurement this many times; medians reported")
    ap.add_argument("--steps", type=int, default=0, help="passed to mpsc bench --steps (0: its default)")
    ap.add_argument("--python", default=sys.executable, help="python with torch")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile columns")
    ap.add_argument("--no-forward", action="store_true", help="train steps only")
    ap.add_argument("--skip-floor", action="store_true", help="do not measure the sgemm rate")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("workloads", nargs="*", default=WORKLOADS)
    a = ap.parse_args()
    try:
        thread_list = [int(t) for t in a.threads.split(",") if t.strip()]
        if not thread_list or min(thread_list) < 1:
            raise ValueError
    except ValueError:
        sys.exit(f"compare: --threads takes thread counts >= 1 separated by commas, e.g. 2,8 (got {a.threads!r})")
    unknown = [w for w in a.workloads if not os.path.exists(os.path.join(HERE, f"{w}.model"))]
    if unknown:
        sys.exit(f"compare: no bench/<workload>.model for {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    node = shutil.which("node") or "node"
    info = subprocess.run([a.python, "-c", INFO_SCRIPT], capture_output=True, text=True).stdout.strip() or "torch n/a"
    load0 = loadavg()
    modes = [m for m in MODES if not (a.no_compile and m[1]) and not (a.no_forward and m[0] == "forward")]

    # res[(w, pass, T)] = {"eager": [...], "compile": [...], "mpsc": [...], "errors": set()}
    res, flops, rates = {}, {}, {}
    for t in thread_list:
        for r in range(a.rounds):
            torch_ms = {}
            for pas, comp in modes:
                log(f"threads {t}, round {r + 1}/{a.rounds}: torch {pas} {'compile' if comp else 'eager'}")
                torch_ms[(pas, comp)] = run_torch(a.python, t, a.workloads, pas == "forward", comp)
            for w in a.workloads:
                log(f"threads {t}, round {r + 1}/{a.rounds}: mpsc bench {w}")
                mt, mf, fl, why = run_mpsc(node, w, t, a.steps)
                flops[w] = fl or flops.get(w, {})
                for pas in ("train", "forward"):
                    if a.no_forward and pas == "forward":
                        continue
                    e = res.setdefault((w, pas, t), {"eager": [], "compile": [], "mpsc": [], "errors": set()})
                    m = mt if pas == "train" else mf
                    if m is not None:
                        e["mpsc"].append(m)
                    elif why:
                        e["errors"].add(f"mpsc: {why}")
                    for comp in (False, True):
                        v = torch_ms.get((pas, comp), {}).get(w)
                        if isinstance(v, float):
                            e["compile" if comp else "eager"].append(v)
                        elif isinstance(v, str):
                            e["errors"].add(f"torch {'compile' if comp else 'eager'}: {v}")
        if not a.skip_floor:
            log(f"threads {t}: sgemm rate (torch.mm, mpsc sgemm_floor)")
            rates[t] = {"torch_mm": torch_sgemm(a.python, t), "mpsc": mpsc_sgemm(t)}

    med = lambda xs: statistics.median(xs) if xs else None
    rows = []
    for (w, pas, t), e in res.items():
        eager, comp, m = med(e["eager"]), med(e["compile"]), med(e["mpsc"])
        best = min([x for x in (eager, comp) if x is not None], default=None)
        # each round's own ratio (torch and mpsc of a round ran minutes apart at most): the error bar
        rounds = []
        for i in range(min(len(e["mpsc"]), max(len(e["eager"]), len(e["compile"])))):
            b = min(x[i] for x in (e["eager"], e["compile"]) if i < len(x))
            rounds.append(e["mpsc"][i] / b)
        # the best rounds' ratio: each side's fastest round (a shared host's other load only adds time, to either side)
        lows = [min(x) for x in (e["eager"], e["compile"]) if x]
        best_round = min(e["mpsc"]) / min(lows) if e["mpsc"] and lows else None
        fl = flops.get(w, {}).get("train_step" if pas == "train" else "eval")
        rate = max([x for x in rates.get(t, {}).values() if x], default=None)
        floor = fl / (rate * 1e9) * 1e3 if fl and rate else None
        # the step time the ratio target asks for, and whether it lies under the FLOP floor: a target no run of the
        # direct algorithm's multiply-adds at the machine's measured sgemm rate can meet (only fewer FLOPs could)
        target_ms = TARGET[pas] * best if best else None
        rows.append({"workload": w, "pass": pas, "threads": t, "torch_eager_ms": eager, "torch_compile_ms": comp,
                     "mpsc_ms": m, "ratio": m / best if m is not None and best else None, "target": TARGET[pas],
                     "ratio_rounds": rounds, "ratio_best_rounds": best_round, "gflop": fl / 1e9 if fl else None, "floor_ms": floor,
                     "target_ms": target_ms, "target_below_floor": target_ms < floor if target_ms and floor else None,
                     "floor_ratio": m / floor if m is not None and floor else None, "errors": sorted(e["errors"])})
    head = {"machine": machine(), "torch": info, "threads": thread_list, "rounds": a.rounds,
            "loadavg_start": load0, "loadavg_end": loadavg(),
            "sgemm_gflops": {str(t): r for t, r in rates.items()}, "floor_target": FLOOR_TARGET}
    if a.json:
        print(json.dumps({**head, "rows": rows}))
        return
    f = lambda x, w=8, p=2: f"{'-':>{w}s}" if x is None else f"{x:{w}.{p}f}"
    print(f"machine: {head['machine']}; torch {info}; rounds {a.rounds}; load average {load0} -> {head['loadavg_end']}")
    for t, r in rates.items():
        tm, mm = r["torch_mm"], r["mpsc"]
        print(f"sgemm rate, {t} threads: torch.mm {f(tm, 0, 1)} GFLOP/s, mpsc {f(mm, 0, 1)} GFLOP/s; floor at the better")
    print(f"ratio = mpsc / min(eager, compile); targets: train <= {TARGET['train']}, forward <= {TARGET['forward']}; "
          f"x floor <= {FLOOR_TARGET} for {', '.join(FLOOR_WORKLOADS)} train; "
          f"target ms = the ratio target x the better torch ('<' marks one under the floor: the direct algorithm's FLOPs "
          f"at the measured sgemm rate take longer)")
    print(f"{'workload':24s} {'pass':7s} {'thr':>3s} {'eager ms':>9s} {'compile':>9s} {'mpsc ms':>9s} {'ratio':>8s} "
          f"{'GFLOP':>7s} {'floor ms':>9s} {'x floor':>8s} {'target ms':>10s}  per-round ratios (best rounds' ratio)")
    for row in rows:
        q = row["ratio"]
        qs = f"{'-':>8s}" if q is None else f"{q:5.2f}{' ok' if q <= row['target'] else '   '}"
        fr = row["floor_ratio"]
        tgt = row["pass"] == "train" and row["workload"] in FLOOR_WORKLOADS
        fs = f"{'-':>8s}" if fr is None else f"{fr:5.2f}{(' ok' if fr <= FLOOR_TARGET else '   ') if tgt else '   '}"
        tms = row["target_ms"]
        ts = f"{'-':>10s}" if tms is None else f"{tms:8.2f}{' <' if row['target_below_floor'] else '  '}"
        rs = " ".join(f"{x:.2f}" for x in row["ratio_rounds"]) if len(row["ratio_rounds"]) > 1 else ""
        if rs and row["ratio_best_rounds"] is not None: rs += f" ({row['ratio_best_rounds']:.2f})"
        print(f"{row['workload']:24s} {row['pass']:7s} {row['threads']:3d} {f(row['torch_eager_ms'], 9)} "
              f"{f(row['torch_compile_ms'], 9)} {f(row['mpsc_ms'], 9)} {qs} {f(row['gflop'], 7, 3)} "
              f"{f(row['floor_ms'], 9)} {fs} {ts}  {rs}")
        for err in row["errors"]:
            print(f"  {err}")


if __name__ == "__main__":
    main()
