"""Helper of bench/cuda_env_ab.sh: one spec's CUDA train step under several build / run environments, interleaved.

Each variant is NAME or NAME:VAR=value;VAR=value (values may hold commas, e.g. MPSC_CUDA_FLASH_MINBLOCKS=4,0,3).
Round 0 builds every variant (the generator switches are part of the CUDA build key: runtime/cuda/session.ts
GENERATOR_ENV) and is not timed; rounds 1..R run `mpsc bench SPEC --device cuda --json` per variant in turn, so
a drift of the machine lands on every variant alike. Prints each round's median ms per step and, per variant, the
median over the rounds and its ratio to the first variant. With --profile K, one more run per variant with
MPSC_CUDA_PROFILE=1 prints its K slowest kernels (launched one by one) into PROFILE_DIR/<name>.txt."""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser()
ap.add_argument("spec")
ap.add_argument("variants", nargs="+", help="NAME[:VAR=value;VAR=value]")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--profile-dir", default="", help="write each variant's MPSC_CUDA_PROFILE=1 kernel list here")
ap.add_argument("--timeout", type=int, default=300, help="seconds one mpsc run (its build included) may take")
a = ap.parse_args()


def parse(v):
    name, _, rest = v.partition(":")
    env = {}
    for item in filter(None, rest.split(";")):
        k, eq, val = item.partition("=")
        if not eq or not k.startswith("MPSC_"):
            raise SystemExit(f"cuda_env_ab: '{item}' in variant '{v}' is not MPSC_VAR=value")
        env[k] = val
    return name, env


variants = [parse(v) for v in a.variants]


def run(env, steps, profile=False):
    cmd = ["node", os.path.join(ROOT, "bin/mpsc.js"), "bench", a.spec, "--device", "cuda", "--json", "--steps", str(steps), "--warmup", "5"]
    e = dict(os.environ, **env, MPSC_CUDA_PROFILE="1" if profile else "0")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return None, f"not finished within {a.timeout} s"
    if r.returncode != 0:
        return None, r.stderr[-1500:]
    return (r if profile else json.loads(r.stdout.strip().splitlines()[-1])), ""


times = {name: [] for name, _ in variants}
for rnd in range(a.rounds + 1):
    for name, env in variants:
        out, err = run(env, 5 if rnd == 0 else a.steps)
        if out is None:
            print(f"{name}: failed: {err}", file=sys.stderr, flush=True)
            continue
        if rnd == 0:
            print(f"{name}: built ({' '.join(f'{k}={v}' for k, v in env.items()) or 'defaults'}); first step after {out.get('first_step_s', 0):.1f} s "
                  f"(session {out.get('open_s', 0):.1f} s, initial parameters {out.get('init_s', 0):.1f} s)", flush=True)
        else:
            times[name].append(out["train"]["median_ms"])
            print(f"round {rnd} {name:16s} {out['train']['median_ms']:9.3f} ms", flush=True)

base = statistics.median(times[variants[0][0]]) if times[variants[0][0]] else float("nan")
print(f"\n{a.spec}: median ms per train step over {a.rounds} rounds of {a.steps} steps (ratio to {variants[0][0]})")
for name, env in variants:
    t = times[name]
    if not t:
        print(f"{name:16s} -")
        continue
    m = statistics.median(t)
    print(f"{name:16s} {m:9.3f}  x{m / base:.3f}  [{' '.join(f'{x:.3f}' for x in t)}]  {' '.join(f'{k}={v}' for k, v in env.items())}")

if a.profile_dir:
    os.makedirs(a.profile_dir, exist_ok=True)
    for name, env in variants:
        r, err = run(env, 5, profile=True)
        with open(os.path.join(a.profile_dir, f"{name}.txt"), "w") as f:
            f.write(r.stderr if r is not None else err)
