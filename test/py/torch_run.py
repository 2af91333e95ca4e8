"""Runs a `mpsc export --format torch` folder for test/workflow_export.test.ts.
Usage: python test/py/torch_run.py EXPORT_DIR INPUTS.safetensors OUT.json
Imports EXPORT_DIR/model.py, loads model.safetensors with load() (strict), calls forward in eval mode with
the inputs by the forward signature's names, and writes {"outputs": {name: {"shape", "data"}}} (one output
is named "__single__", several come as the module's dict)."""
import importlib.util, inspect, json, os, sys
import torch

folder, inputs_path, out_path = sys.argv[1:4]
spec = importlib.util.spec_from_file_location('exported', os.path.join(folder, 'model.py'))
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
net = mod.load(os.path.join(folder, 'model.safetensors'))
feeds = mod.read_safetensors(inputs_path)
args = [feeds[name] for name in inspect.signature(net.forward).parameters]
with torch.no_grad():
    y = net(*args)
outs = y if isinstance(y, dict) else {'__single__': y}
json.dump({'outputs': {k: {'shape': list(v.shape), 'data': v.double().flatten().tolist()} for k, v in outs.items()}}, open(out_path, 'w'))
