"""mpsc --device cuda vs PyTorch (eager, torch.compile, hand-captured CUDA graph) on the GPU machine.
Consumes bench/<workload>.model (mpsc bench --device cuda --json), bench/gpt_tiny.ts --device cuda (the GPT
workloads, built in IR as torch_gpt_ref.py's model), torch_ref.py and torch_gpt_ref.py (the PyTorch anchors);
prints, per workload, ms per training step (median), the ratio of mpsc to the best PyTorch, mpsc's achieved
TFLOP/s, and the issue's target; first the GPU's ceilings measured here (device copy bandwidth, fp32 and
TF32 / bf16 matrix rates through torch.matmul on random data).
Rows ending in _bf16 run mpsc at precision bf16 (gpt_tiny.ts --precision bf16; GPT-2 small from
bench/gpt2_124m_b16_t1024.model) against torch_gpt_ref.py --amp bf16, and print the planned peak memory.
--no-cublaslt builds mpsc with MPSC_CUDA_CUBLASLT=0 (every GEMM its generated kernel: the A/B of the GEMM path).
Usage: python3 bench/compare_cuda.py [--torch-ref DIR] [--skip-compile] [--steps N] [--profile K] [--no-cublaslt] [workload ...]"""
import argparse, json, os, re, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = ["gpt_tiny_b32_t64", "gpt_char_b64_t256"]
# bf16 rows (issue 15): mpsc at precision bf16 against PyTorch's --amp bf16; GPT-2 small from its spec
BF16 = ["gpt_char_b64_t256_bf16", "gpt2_124m_b16_t1024_bf16"]
SPEC_BF16 = {"gpt2_124m_b16_t1024_bf16": "gpt2_124m_b16_t1024.model"}
WORKLOADS = ["mnist_mlp_b256_adam", "mnist_cnn_b64_sgdm", "seed_cnn_b32_64px_adam", "wide_mlp_b1024_adam"] + GPT + BF16
# issue 14's targets (ms per step, fp32) and issue 15's (bf16: 0.8x PyTorch's best)
TARGET = {"mnist_mlp_b256_adam": 0.085, "mnist_cnn_b64_sgdm": 0.18, "seed_cnn_b32_64px_adam": 0.88, "wide_mlp_b1024_adam": 3.06,
          "gpt_tiny_b32_t64": 0.65, "gpt_char_b64_t256": 23.7, "gpt_char_b64_t256_bf16": 6.1, "gpt2_124m_b16_t1024_bf16": 27.4}
# issue 15: GPT-2 small's planned peak memory at most torch.compile's 9.1 GB
PEAK_TARGET_GB = {"gpt2_124m_b16_t1024_bf16": 9.1}

ap = argparse.ArgumentParser()
ap.add_argument("--torch-ref", default=next((d for d in [os.path.join(ROOT, ".device-env/bench"), os.path.join(ROOT, "../.device-env/bench"),
                                                             os.path.join(ROOT, "../shared/bench")] if os.path.exists(os.path.join(d, "torch_ref.py"))), ""))
ap.add_argument("--skip-compile", action="store_true", help="leave out torch.compile (its compile time dominates a short run)")
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--timeout", type=int, default=240, help="seconds one mpsc run (build included) may take")
ap.add_argument("--profile", type=int, default=0, metavar="K",
                help="after the table, each workload's K slowest kernels per program (MPSC_CUDA_PROFILE=1: launched one by one, cudaEvent times)")
ap.add_argument("--no-cublaslt", action="store_true", help="mpsc with MPSC_CUDA_CUBLASLT=0: every GEMM its generated kernel")
ap.add_argument("workloads", nargs="*", default=WORKLOADS)
a = ap.parse_args()

def ceilings():
    import torch
    def timed(f, n=20):
        for _ in range(3): f()
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); f(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        return statistics.median(ts)
    n = 8192
    A, B = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    for _ in range(30): A @ B  # out of idle clocks before anything is timed
    torch.cuda.synchronize()
    x = torch.randn(256 * 2**20, device="cuda"); y = torch.empty_like(x)
    bw = 2 * x.numel() * 4 / (timed(lambda: y.copy_(x)) / 1e3) / 1e9  # GB/s, read + write (timed() gives ms)
    out = {"copy_GBps": bw}
    for name, tf32, dt in [("fp32_TFLOPs", False, torch.float32), ("tf32_TFLOPs", True, torch.float32), ("bf16_TFLOPs", False, torch.bfloat16)]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a_, b_ = A.to(dt), B.to(dt)
        out[name] = 2 * n**3 / timed(lambda: a_ @ b_, 10) / 1e9
    torch.backends.cuda.matmul.allow_tf32 = False
    return out

def torch_times(flag):
    if not a.torch_ref: return {}
    got = {}
    runs = []
    if any(w not in GPT and w not in BF16 for w in a.workloads): runs.append(([os.path.join(a.torch_ref, "torch_ref.py"), "cuda"], ""))
    runs += [([os.path.join(a.torch_ref, "torch_gpt_ref.py"), "cuda", "--only", w], "") for w in a.workloads if w in GPT]
    runs += [([os.path.join(a.torch_ref, "torch_gpt_ref.py"), "cuda", "--amp", "bf16", "--only", w[:-len("_bf16")]], "_bf16") for w in a.workloads if w in BF16]
    for cmd, suffix in runs:
        r = subprocess.run([sys.executable] + cmd + ([flag] if flag else []), capture_output=True, text=True)
        for line in r.stdout.splitlines():
            m = re.match(r"(\S+) \S+ (?:params=\d+ )?([0-9.]+) ms/step", line)
            if m: got[m.group(1) + suffix] = float(m.group(2))
            mm = re.search(r"peak_mem=([0-9]+) MiB", line)
            if m and mm and suffix: print(f"torch {m.group(1)}{suffix} {flag or 'eager'}: peak {int(mm.group(1)) / 1024:.2f} GiB", flush=True)
        if r.returncode != 0: print(f"{os.path.basename(cmd[0])} {flag or 'eager'} failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return got

def mpsc_time(w, profile=False):
    steps = str(5 if profile else a.steps)
    # warm-up: as many steps as are timed, at least 10 (the PyTorch twins run 10, then time 5 x 50): a 0.08-ms step
    # warmed up 5 times starts timing before the GPU's clocks have risen (mnist_mlp 0.087 over 30 steps, 0.076 over 100)
    warm = str(5 if profile else max(10, a.steps))
    if w in SPEC_BF16:
        cmd = ["node", os.path.join(ROOT, "bin/mpsc.js"), "bench", os.path.join(ROOT, "bench", SPEC_BF16[w]), "--device", "cuda", "--json",
               "--steps", steps, "--warmup", warm]
    elif w in GPT or w in BF16:
        wl = w[:-len("_bf16")] if w in BF16 else w
        cmd = ["node", "--import", "tsx", os.path.join(ROOT, "bench/gpt_tiny.ts"), "--device", "cuda", "--workload", wl, "--steps", steps, "--warmup", warm]
        if w in BF16: cmd += ["--precision", "bf16"]
    else:
        cmd = ["node", os.path.join(ROOT, "bin/mpsc.js"), "bench", os.path.join(ROOT, "bench", w + ".model"), "--device", "cuda", "--json",
               "--steps", steps, "--warmup", warm]
    env = dict(os.environ, MPSC_CUDA_PROFILE="1" if profile else "0", **({"MPSC_CUDA_CUBLASLT": "0"} if a.no_cublaslt else {}))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        print(f"mpsc {w}: not finished within {a.timeout} s (--timeout; the build included)", file=sys.stderr, flush=True)
        return None
    if profile:
        shown = 0
        for line in r.stderr.splitlines():
            if line.startswith("mpsc cuda profile"): print(f"{w}: {line[len('mpsc cuda profile: '):]}"); shown = 0
            elif line.startswith("  ") and shown < a.profile and re.match(r"\s+[0-9.]+ us", line): print(line); shown += 1
        return None
    if r.returncode != 0:
        print(f"mpsc bench {w} failed:\n{r.stderr[-2000:]}", file=sys.stderr)
        return None
    # the model's create says which GEMM path its GEMM nodes took (runtime/cuda/mpsc_cublaslt.cpp via model_cuda.cu)
    for line in r.stderr.splitlines():
        if line.startswith("mpsc cuda: ") and ("GEMM calls run on cuBLASLt" in line or "without cuBLASLt" in line or "unusable" in line or "generated kernel:" in line):
            print(f"  {w}: {line[len('mpsc cuda: '):]}", flush=True)
    return json.loads(r.stdout.strip().splitlines()[-1])

c = ceilings()
print(f"ceilings measured here: copy {c['copy_GBps']:.0f} GB/s, fp32 matmul {c['fp32_TFLOPs']:.1f} TFLOP/s, tf32 {c['tf32_TFLOPs']:.1f}, bf16 {c['bf16_TFLOPs']:.1f}", flush=True)
eager, graph = torch_times(""), torch_times("--cudagraph")
comp = {} if a.skip_compile else torch_times("--compile")
fmt = lambda v: "-" if v is None else f"{v:.3f}"
print(f"\nGEMMs: {'generated kernels only (MPSC_CUDA_CUBLASLT=0)' if a.no_cublaslt else 'cuBLASLt where the build has it (docs/cuda.md)'}", flush=True)
print("\nworkload                  mpsc ms   eager  compile cudagraph  mpsc/best  mpsc TFLOP/s  target   met", flush=True)
for w in a.workloads:  # each row as soon as it is measured (a run cut short keeps the rows it printed)
    r = mpsc_time(w)
    ms = r["train"]["median_ms"] if r else float("nan")
    tf = r["train"]["gflops"] / 1000 if r else float("nan")
    e, co, g, tgt = eager.get(w), comp.get(w), graph.get(w), TARGET.get(w)
    best = min([t for t in (e, co, g) if t is not None], default=float("nan"))
    ratio = ms / best if best == best else float("nan")
    print(f"{w:25s} {ms:8.3f} {fmt(e):>7} {fmt(co):>8} {fmt(g):>9} {ratio:10.2f} {tf:13.3f} {fmt(tgt):>7}   {'yes' if tgt and ms <= tgt else 'no'}", flush=True)
    if r and w in BF16:
        peak = r["peak_bytes"] / 2**30
        pt = PEAK_TARGET_GB.get(w)
        print(f"  {w}: planned peak memory {peak:.2f} GiB (memory plan: arena + persistent + inputs)"
              + (f", target <= {pt} GB: {'met' if r['peak_bytes'] <= pt * 1e9 else 'not met'}" if pt else "")
              + f"; {tf:.1f} TFLOP/s against the measured bf16 matrix rate {c['bf16_TFLOPs']:.0f}", flush=True)
if a.profile:
    print("\nwhere the time goes (kernels launched one by one with events; the graph replays them without launch gaps)")
    for w in a.workloads: mpsc_time(w, profile=True)
