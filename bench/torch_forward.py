"""Anchor timings: PyTorch forward passes (eval, torch.no_grad()) of the reference workloads.
Same models, shapes and timing loop as ../shared/bench/torch_ref.py (median of 5 timed repeats after warm-up).
Usage: OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_forward.py [cpu|cuda]
Prints one line per workload: name, device-forward, ms/step."""
import statistics
import sys
import time

import torch
import torch.nn as nn

dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
torch.manual_seed(0)


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def workloads():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    yield "mnist_mlp_b256_adam", mlp, (256, 1, 28, 28)
    lenet = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    yield "mnist_cnn_b64_sgdm", lenet, (64, 1, 28, 28)
    seed = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    yield "seed_cnn_b32_64px_adam", seed, (32, 3, 64, 64)


only = [a for a in sys.argv[2:] if not a.startswith("-")]
for name, model, shape in workloads():
    if only and name not in only:
        continue
    model = model.to(dev).eval()
    x = torch.randn(*shape, device=dev)
    with torch.no_grad():
        for _ in range(10):
            model(x)
        sync()
        times = []
        iters = 50 if dev == "cuda" else 10
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(iters):
                model(x)
            sync()
            times.append((time.perf_counter() - t) / iters * 1000)
    print(f"{name} {dev}-forward {statistics.median(times):.3f} ms/step", flush=True)
