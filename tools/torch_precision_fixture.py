"""Writes test/fixtures/torch_precision.json for test/precision_*.test.ts (issue 15), so the tests
need no torch:
 - rounding: f32 numbers (edge cases: ties, the overflow threshold, subnormals, NaN / inf, signed
   zeros, and random values over each format's range) and torch's f16 / bf16 roundings of them;
 - grad_scaler: torch.amp.GradScaler('cpu') with its defaults on a 3-element SGD model whose
   gradient is made inf / NaN at given steps: per step the scale it ran with, whether the optimizer
   step was skipped, and the scale afterwards.
    /work/venv-torch/bin/python tools/torch_precision_fixture.py
"""
import json, math, os, random, torch

F32 = torch.float32
out = {"torch_version": torch.__version__}

# ---- rounding
edges = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 65504.0, 65505.0, 65519.0, 65519.99609375, 65520.0, 65536.0, -65520.0, 1e6,
         float("inf"), float("-inf"), float("nan"),
         2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -24, 2.0 ** -14 - 2.0 ** -25,
         1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -23, 2048 + 1.0, 2048 + 3.0,
         1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -23, 256 + 1.0, 3.3895313892515355e38, 3.3961775292304e38, 3.4e38,
         2.0 ** -126, 2.0 ** -127, 2.0 ** -133, 2.0 ** -134, 3 * 2.0 ** -134, 1e-40, -1e-45, 2.0 ** -149]
rng = random.Random(0)
rand = [rng.uniform(-1, 1) * 2.0 ** rng.randint(-30, 17) for _ in range(300)] + [rng.uniform(-1, 1) * 2.0 ** rng.randint(-140, 127) for _ in range(300)]
x = torch.tensor(edges + rand, dtype=torch.float64).to(F32)
enc = lambda t: [None if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else v) for v in t.to(torch.float64).tolist()]
signs = lambda t: [math.copysign(1, v) < 0 for v in t.to(torch.float64).tolist()]
out["rounding"] = {"x": enc(x), "x_negative": signs(x), "f16": enc(x.to(torch.float16)), "f16_negative": signs(x.to(torch.float16)),
                   "bf16": enc(x.to(torch.bfloat16)), "bf16_negative": signs(x.to(torch.bfloat16))}

# ---- GradScaler
STEPS = 4100
bad = {0: "inf", 1: "inf", 2: "nan", 3: "inf", 4: "inf", 5: "-inf", 9: "nan", 2015: "inf", 2016: "inf", 4050: "nan"}
p = torch.nn.Parameter(torch.zeros(3))
opt = torch.optim.SGD([p], lr=0.1)
scaler = torch.amp.GradScaler("cpu")
rows = []
for step in range(STEPS):
    opt.zero_grad()
    scaler.scale((p * torch.tensor([1.0, 2.0, 3.0])).sum()).backward()
    if step in bad:
        with torch.no_grad():
            p.grad[1] = float(bad[step])
    used = scaler.get_scale()
    before = p.detach().clone()
    scaler.step(opt)
    scaler.update()
    rows.append([used, bool(torch.equal(before, p.detach())), scaler.get_scale()])
out["grad_scaler"] = {"defaults": {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000},
                      "bad_steps": {str(k): v for k, v in bad.items()}, "steps": rows}

path = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "torch_precision.json")
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
    f.write("\n")
print("wrote", path, "torch", torch.__version__)
