"""Data-parallel training on the GPU machine (issue 18; runtime/ddp, docs/cuda.md "Data-parallel training").

  python3 bench/ddp_check.py [check] [scaling] [--steps N] [--specs a.model,b.model] [--gpus-max N]
  (default specs: specs/mnist_mlp.model, bench/gpt_tiny_b32_t64.model)

check (the default; one GPU is enough): for each spec, `mpsc train --device cuda` (the single-GPU path) and
  `mpsc train --device cuda --gpus 1` (the data-parallel path: train_step, an NCCL all-reduce of one rank,
  apply_update) for --steps steps with every loss read (--log-every 1); the per-step losses and the final
  test loss must be identical (the all-reduce of one rank is a copy, averaging by 1 exact): PASS; NEAR when
  they agree within 1e-5 relative but not bitwise (the split programs' other buffer offsets can make
  cuBLASLt pick another algorithm); FAIL otherwise. Then the same
  with MPSC_DDP_OVERLAP=1 (the buckets' all-reduces captured into train_step's CUDA graph on a side stream). One line per
  spec, then one verdict line: "ddp_check: PASS ..." or "ddp_check: FAIL ...". Exit 1 on a failure.
overhead (one GPU): the cost of the data-parallel path at N = 1: ms/step of gpt_char_b64_t256 (batch 64) and
  seed_cnn_b32_64px_adam (batch 32) on the single-GPU path, with --gpus 1, and with --gpus 1 and
  MPSC_DDP_OVERLAP=1 (step time from step 10 to the last of 60 steps, as below); informational, no verdict.
scaling (a multi-GPU kind): bench/gpt_char_b64_t256.model (per-GPU batch 64) and
  bench/seed_cnn_b32_64px_adam.model (per-GPU batch 32) at N = 1, 2, 4, 8 (up to the visible GPUs or
  --gpus-max), each N in one run: step time from the cumulative samples/s the trainer logs at step 10 and
  at the last step (the first steps build, capture and warm up); scaling efficiency
  = N-GPU samples/s / (N x 1-GPU samples/s) = T1(batch b) / TN(batch N*b), target >= 0.90 (issue 18).
  Also the N = 2 equality: --gpus 2 at batch 2b against --gpus 1 at batch 2b (same global batches),
  losses within 1e-4 relative over the steps. The all-reduce runs after the backward unless the
  environment has MPSC_DDP_OVERLAP=1 (buckets inside the CUDA graph): run scaling once each way.
Every process gets NCCL_NVLS_ENABLE=0 (NVLink multicast off). Logs: $OUT_DIR (default a temporary folder).
"""
import json, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
args = sys.argv[1:]
def opt(name, default):
    if name in args:
        i = args.index(name); v = args[i + 1]; del args[i:i + 2]; return v
    return default
steps = int(opt("--steps", "20"))
specs = opt("--specs", "specs/mnist_mlp.model,bench/gpt_tiny_b32_t64.model").split(",")
gpus_max = int(opt("--gpus-max", "8"))
# --device cpu: the same check with --ranks 1 on the CPU (the script's own test, runnable without a GPU)
device = opt("--device", "cuda")
flag = "--gpus" if device == "cuda" else "--ranks"
modes = [a for a in args if a in ("check", "overhead", "scaling")] or ["check"]
out_dir = os.environ.get("OUT_DIR") or tempfile.mkdtemp(prefix="mpsc-ddp-")
os.makedirs(out_dir, exist_ok=True)
ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", CI="1")

def train(tag, spec, extra, timeout=900, env=None):
    """one `mpsc train` run: (exit code, the train metrics lines, the summary JSON or None, stderr)"""
    run_dir = os.path.join(out_dir, tag)
    metrics = os.path.join(out_dir, tag + ".metrics.jsonl")
    cmd = ["node", os.path.join(ROOT, "bin/mpsc.js"), "train", os.path.join(ROOT, spec), "--device", device, "--json",
           "--run-dir", run_dir, "--metrics", metrics] + extra
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(ENV, **(env or {})), timeout=timeout, cwd=out_dir)
    except subprocess.TimeoutExpired:
        return 124, [], None, f"timed out after {timeout} s"
    with open(os.path.join(out_dir, tag + ".log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stderr + "\n" + r.stdout)
    lines = []
    if os.path.exists(metrics):
        lines = [json.loads(l) for l in open(metrics) if l.strip()]
    summary = None
    for l in reversed(r.stdout.strip().splitlines()):
        try:
            summary = json.loads(l); break
        except ValueError:
            pass
    return r.returncode, [l for l in lines if l.get("split") == "train"], summary, r.stderr

def losses(lines):
    return [(l["step"], l["loss"]) for l in lines]

failures = []
near = []  # equal within 1e-5 relative but not bitwise (e.g. cuBLASLt picked another algorithm for the split programs' buffers)
def rel_close(a, b):
    return len(a) == len(b) and all(abs(x[1] - y[1]) <= 1e-5 * max(abs(x[1]), 1e-12) for x, y in zip(a, b))
if "check" in modes:
    for spec in specs:
        name = os.path.splitext(os.path.basename(spec))[0]
        common = ["--steps", str(steps), "--log-every", "1", "--seed", "1"]
        c1, l1, s1, e1 = train(f"{name}.single", spec, common)
        c2, l2, s2, e2 = train(f"{name}.dp1", spec, common + [flag, "1"])
        if c1 != 0 or c2 != 0:
            why = (e1 if c1 != 0 else e2).strip().splitlines()[-3:]
            failures.append(name)
            print(f"{name}: FAIL: {'single-process' if c1 != 0 else flag + ' 1'} run exited with {c1 if c1 != 0 else c2}: {' | '.join(why)}", flush=True)
            continue
        a, b = losses(l1), losses(l2)
        nccl = next((l for l in e2.splitlines() if ("NCCL" in l and "communicator" in l) or "gradients averaged" in l), "no collective line")
        diffs = [abs(x[1] - y[1]) for x, y in zip(a, b)]
        same_steps = [x[0] for x in a] == [y[0] for y in b] and len(a) == steps
        ident = same_steps and all(d == 0 for d in diffs)
        tl = (s1 or {}).get("test_loss"), (s2 or {}).get("test_loss")
        ok = ident and tl[0] == tl[1]
        close = not ok and same_steps and rel_close(a, b)
        if close: near.append(name)
        elif not ok: failures.append(name)
        worst = max(diffs, default=float("nan"))
        verdict = "identical" if ident else f"differ (max |diff| {worst:.3e})"
        print(f"{name}: {'PASS' if ok else 'NEAR' if close else 'FAIL'}: {len(a)} / {len(b)} steps, losses {verdict}, "
              f"final loss {a[-1][1] if a else None} / {b[-1][1] if b else None}, test loss {tl[0]} / {tl[1]}; {nccl.strip()}", flush=True)
        if device != "cuda": continue
        # MPSC_DDP_OVERLAP=1: the buckets' all-reduces inside train_step's CUDA graph on a side stream
        c3, l3, s3, e3 = train(f"{name}.overlap1", spec, common + [flag, "1"], env={"MPSC_DDP_OVERLAP": "1"})
        if c3 != 0:
            failures.append(name + " overlap")
            print(f"{name} overlap: FAIL: exited with {c3}: {' | '.join(e3.strip().splitlines()[-3:])}", flush=True)
            continue
        c = losses(l3)
        d3 = [abs(x[1] - y[1]) for x, y in zip(a, c)]
        ok3 = [x[0] for x in c] == [x[0] for x in a] and all(d == 0 for d in d3) and (s3 or {}).get("test_loss") == tl[0]
        # the overlap must give exactly what the plain --gpus 1 run gave (same programs, the all-reduce only earlier)
        same_as_dp = [x for x in c] == [x for x in b]
        close3 = not ok3 and (same_as_dp or rel_close(a, c))
        if close3: near.append(name + " overlap")
        elif not ok3: failures.append(name + " overlap")
        line3 = next((l for l in e3.splitlines() if "communicator" in l), "no NCCL line")
        worst3 = max(d3, default=float("nan"))
        verdict3 = "identical" if ok3 else f"differ (max |diff| {worst3:.3e}, {len(c)} steps)"
        print(f"{name} overlap: {'PASS' if ok3 else 'NEAR' if close3 else 'FAIL'}: losses {verdict3}{' (bitwise equal to the --gpus 1 run without overlap)' if same_as_dp and not ok3 else ''}; {line3.strip()}", flush=True)

def step_ms(lines, batch, first=10):
    """ms per step between step `first` and the last step, from the cumulative samples/s"""
    by = {l["step"]: l for l in lines}
    last = max(by) if by else 0
    if first not in by or last <= first: return None
    t = lambda s: s * batch / by[s]["samples_per_sec"]
    return 1000 * (t(last) - t(first)) / (last - first)

if "overhead" in modes:
    n_steps = max(steps, 60)
    print(f"\noverhead at N = 1: {n_steps} steps per run, step time from step 10 to the last", flush=True)
    for spec, b in (("bench/gpt_char_b64_t256.model", 64), ("bench/seed_cnn_b32_64px_adam.model", 32)):
        name = os.path.splitext(os.path.basename(spec))[0]
        extra = ["--steps", str(n_steps), "--log-every", "10", "--batch", str(b), "--set", f"data.train_size={b * (n_steps + 1)}", "--set", "data.test_size=0"]
        row = []
        for tag, more, env in (("single", [], None), ("gpus1", [flag, "1"], None), ("overlap1", [flag, "1"], {"MPSC_DDP_OVERLAP": "1"})):
            c, lines, _, err = train(f"{name}.over.{tag}", spec, extra + more, timeout=1200, env=env)
            ms = step_ms(lines, b) if c == 0 else None
            row.append(f"{tag} {ms:.3f} ms" if ms else f"{tag} failed (exit {c}: {' | '.join(err.strip().splitlines()[-2:])})")
        print(f"{name} batch {b}: " + ", ".join(row), flush=True)

if "scaling" in modes:
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    visible = len([l for l in r.stdout.splitlines() if l.startswith("GPU ")])
    ns = [n for n in (1, 2, 4, 8) if n <= min(visible, gpus_max)]
    print(f"\nscaling: {visible} GPUs visible, N = {ns}; {max(steps, 60)} steps per run, step time from step 10 to the last", flush=True)
    for spec, per in (("bench/gpt_char_b64_t256.model", 64), ("bench/seed_cnn_b32_64px_adam.model", 32)):
        name = os.path.splitext(os.path.basename(spec))[0]
        n_steps = max(steps, 60)
        base = None
        for n in ns:
            b = per * n
            extra = ["--steps", str(n_steps), "--log-every", "10", "--batch", str(b), "--gpus", str(n),
                     "--set", f"data.train_size={b * (n_steps + 1)}", "--set", "data.test_size=0"]
            c, lines, s, err = train(f"{name}.scale{n}", spec, extra, timeout=1200)
            ms = step_ms(lines, b) if c == 0 else None
            if n == 1: base = ms
            eff = base / ms if base and ms else None
            if n > 1 and (eff is None or eff < 0.9): failures.append(f"{name} N={n} efficiency")
            print(f"{name} N={n} batch {b}: " + (f"{ms:.2f} ms/step, {b / ms * 1000:.0f} samples/s" if ms else f"failed (exit {c}): {' | '.join(err.strip().splitlines()[-2:])}")
                  + (f", efficiency {eff:.3f}" if eff and n > 1 else ""), flush=True)
        if len(ns) >= 2:
            # the equality at N = 2: --gpus 2 vs --gpus 1 at the same global batch
            b = 2 * per
            common = ["--steps", "20", "--log-every", "1", "--batch", str(b), "--set", "data.test_size=0", "--seed", "1"]
            c1, l1, _, _ = train(f"{name}.eq1", spec, common + ["--gpus", "1"])
            c2, l2, _, _ = train(f"{name}.eq2", spec, common + ["--gpus", "2"])
            a, bb = losses(l1), losses(l2)
            rel = max((abs(x[1] - y[1]) / max(abs(x[1]), 1e-12) for x, y in zip(a, bb)), default=float("inf"))
            ok = c1 == 0 and c2 == 0 and len(a) == len(bb) == 20 and rel <= 1e-4
            if not ok: failures.append(f"{name} N=2 equality")
            print(f"{name} N=2 vs N=1 at batch {b}: {'PASS' if ok else 'FAIL'} (max relative loss difference {rel:.2e} over {len(a)} steps)", flush=True)

print(f"\nlogs: {out_dir}")
status = "FAIL" if failures else "NEAR" if near else "PASS"
detail = ", ".join(failures) if failures else ("within 1e-5 but not bitwise: " + ", ".join(near)) if near else "all identical" if modes == ["check"] else "all passed"
print(f"ddp_check: {status} ({', '.join(modes)}; {detail})", flush=True)
sys.exit(1 if failures else 0)
