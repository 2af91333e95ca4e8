"""PyTorch anchors of bench/compare.sh: the train step and the forward pass of every reference workload,
eager or torch.compile, on the CPU at the thread count of OMP_NUM_THREADS (torch.set_num_threads too).

Usage: python3 bench/torch_workloads.py [--forward] [--compile] [workload ...]
Prints one line per workload: `NAME MODE MS ms/step` (MODE: train-eager, train-compile, forward-eager,
forward-compile), or `NAME MODE error: MESSAGE` when that workload fails (e.g. torch.compile without a
C++ compiler), so one failure does not hide the others.

Models, inputs and optimizers are those of ../shared/bench/torch_ref.py (MLP, LeNet, seed CNN) and of
bench/torch_gpt_ref.py (gpt_tiny_b32_t64: the GPT class is imported from there). The train step is
zero_grad + forward + loss + backward + optimizer step; the forward pass is the model and its loss under
torch.no_grad() in eval mode, which is what mpsc's eval program computes (`mpsc bench`'s eval column).
Timing: warm-up steps (the first compiles under --compile), then 5 timed repeats of `iters` steps with
`iters` chosen from the last warm-up step so a repeat lasts ~0.3 s (1..10 steps); the median of the 5.
"""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_ref import GPT, WORKLOADS as GPT_WORKLOADS  # noqa: E402


def cnn_workloads():
    """name -> (model factory, input shape, classes, optimizer factory)"""
    return {
        "mnist_mlp_b256_adam": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)),
                                (256, 1, 28, 28), lambda p: torch.optim.Adam(p, 1e-3)),
        "mnist_cnn_b64_sgdm": (lambda: nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)),
            (64, 1, 28, 28), lambda p: torch.optim.SGD(p, 0.01, momentum=0.9)),
        "seed_cnn_b32_64px_adam": (lambda: nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)),
            (32, 3, 64, 64), lambda p: torch.optim.Adam(p, 1e-3)),
    }


def build(name):
    """(model, optimizer, loss closure over the model) for a workload name"""
    cnn = cnn_workloads()
    if name in cnn:
        make, shape, mkopt = cnn[name]
        model = make()
        x = torch.randn(*shape)
        y = torch.randint(0, 10, (shape[0],))
        return model, mkopt(model.parameters()), lambda m: F.cross_entropy(m(x), y)
    if name in GPT_WORKLOADS:
        V, T, C, L, H, B, lr = GPT_WORKLOADS[name]
        model = GPT(V, T, C, L, H)
        idx = torch.randint(0, V, (B, T))
        tgt = torch.randint(0, V, (B, T))
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
        return model, opt, lambda m: F.cross_entropy(m(idx).view(-1, V), tgt.view(-1))
    raise SystemExit(f"torch_workloads.py: unknown workload {name}; one of {', '.join(list(cnn) + list(GPT_WORKLOADS))}")


def make_step(name, forward, compiled):
    torch.manual_seed(0)
    model, opt, loss_of = build(name)
    if forward:
        model.eval()
        net = torch.compile(model) if compiled else model

        def step():
            with torch.no_grad():
                return loss_of(net)
        return step

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model)
        loss.backward()
        opt.step()
        return loss
    return torch.compile(train_step) if compiled else train_step


def time_step(step):
    last = 0.0
    for _ in range(5):
        t = time.perf_counter()
        step()
        last = time.perf_counter() - t
    iters = max(1, min(10, round(0.3 / max(last, 1e-6))))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(iters):
            step()
        times.append((time.perf_counter() - t) / iters * 1000)
    return statistics.median(times)


def main():
    args = sys.argv[1:]
    forward, compiled = "--forward" in args, "--compile" in args
    names = [a for a in args if not a.startswith("--")] or list(cnn_workloads()) + ["gpt_tiny_b32_t64"]
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    mode = f"{'forward' if forward else 'train'}-{'compile' if compiled else 'eager'}"
    for name in names:
        try:
            ms = time_step(make_step(name, forward, compiled))
            print(f"{name} {mode} {ms:.3f} ms/step", flush=True)
        except Exception as e:  # noqa: BLE001 - reported per workload, the others still run
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"{name} {mode} error: {msg[:300]}", flush=True)


if __name__ == "__main__":
    main()
