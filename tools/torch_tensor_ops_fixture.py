"""Writes test/fixtures/torch_tensor_ops.json: PyTorch's float64 values for the issue-13 ops that
test/reference_tensor_ops.test.ts checks the reference interpreter against (inputs included, so the
test needs no torch): scaled_dot_product_attention (causal and not, S > T) with its gradients,
cross_entropy over [N, T, C] with ignore_index (and all positions ignored -> nan), torch.max(dim)'s
gradient on ties, broadcasting matmul with its gradients, layer_norm without affine parameters.
    /work/venv-torch/bin/python tools/torch_tensor_ops_fixture.py
"""
import json, math, os, torch
import torch.nn.functional as F

torch.manual_seed(0)
D = torch.float64
out = {"torch_version": torch.__version__, "cases": []}
L = lambda t: t.detach().reshape(-1).tolist()

def sdpa(name, N, H, T, S, Dh, causal):
    q = torch.randn(N, H, T, Dh, dtype=D, requires_grad=True)
    k = torch.randn(N, H, S, Dh, dtype=D, requires_grad=True)
    v = torch.randn(N, H, S, Dh, dtype=D, requires_grad=True)
    scale = 1 / math.sqrt(Dh)
    mask = None
    if causal:  # mpsc's rule: key s hidden from query t when s > t + (S - T)
        mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    g = torch.randn_like(o)
    o.backward(g)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal: s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    out["cases"].append({"name": name, "op": "attention", "attrs": {"causal": causal, "scale": scale},
        "shapes": {"q": [N, H, T, Dh], "k": [N, H, S, Dh]},
        "q": L(q), "k": L(k), "v": L(v), "do": L(g), "o": L(o), "lse": L(lse), "dq": L(q.grad), "dk": L(k.grad), "dv": L(v.grad)})

sdpa("sdpa_causal", 2, 3, 5, 5, 4, True)
sdpa("sdpa_causal_kv", 1, 2, 3, 7, 8, True)
sdpa("sdpa_full", 1, 2, 4, 6, 3, False)

for name, ii, ls in [("ce_ignore", 2, 0.0), ("ce_ignore_ls", 2, 0.1), ("ce_none", None, 0.0)]:
    x = torch.randn(2, 5, 7, dtype=D, requires_grad=True)
    y = torch.randint(0, 7, (2, 5))
    y[0, 1] = 2; y[1, 3] = 2
    kw = {} if ii is None else {"ignore_index": ii}
    loss = F.cross_entropy(x.permute(0, 2, 1), y, label_smoothing=ls, **kw)
    loss.backward()
    out["cases"].append({"name": name, "op": "cross_entropy", "attrs": {"label_smoothing": ls, **kw}, "shapes": {"x": [2, 5, 7]},
        "x": L(x), "y": L(y), "loss": loss.item(), "dx": L(x.grad)})
x = torch.randn(2, 3, 4, dtype=D)
y = torch.full((2, 3), 1)
out["cases"].append({"name": "ce_all_ignored", "op": "cross_entropy", "attrs": {"label_smoothing": 0.0, "ignore_index": 1},
    "shapes": {"x": [2, 3, 4]}, "x": L(x), "y": L(y), "loss": "nan" if math.isnan(F.cross_entropy(x.permute(0, 2, 1), y, ignore_index=1).item()) else "not nan"})

x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 0.0, 5.0], [0.5, -1.0, 0.25, 0.5]], dtype=D, requires_grad=True)
vals, _ = torch.max(x, dim=1)
g = torch.tensor([1.0, 2.0, 3.0], dtype=D)
vals.backward(g)
out["cases"].append({"name": "max_dim_ties", "op": "reduce_max", "shapes": {"x": [3, 4]}, "x": L(x), "y": L(vals), "dy": L(g), "dx": L(x.grad)})

a = torch.randn(2, 1, 3, 4, dtype=D, requires_grad=True)
b = torch.randn(5, 4, 2, dtype=D, requires_grad=True)
y = a @ b
g = torch.randn_like(y)
y.backward(g)
out["cases"].append({"name": "matmul_bcast", "op": "matmul", "shapes": {"a": [2, 1, 3, 4], "b": [5, 4, 2], "y": list(y.shape)},
    "a": L(a), "b": L(b), "y": L(y), "dy": L(g), "da": L(a.grad), "db": L(b.grad)})

x = torch.randn(3, 6, dtype=D, requires_grad=True)
y = F.layer_norm(x, (6,), eps=1e-5)
g = torch.randn_like(y)
y.backward(g)
out["cases"].append({"name": "layernorm_noaffine", "op": "layernorm", "shapes": {"x": [3, 6]}, "x": L(x), "y": L(y), "dy": L(g), "dx": L(x.grad)})

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "torch_tensor_ops.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path, len(out["cases"]), "cases")
