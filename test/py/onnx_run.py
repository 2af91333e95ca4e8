"""Runs an exported ONNX model with onnxruntime for test/workflow_export.test.ts.
Usage: python test/py/onnx_run.py MODEL.onnx INPUTS.safetensors OUT.json
Checks the model with onnx.checker (full_check), feeds every graph input from the safetensors file
(by name), and writes {"opset": ..., "inputs": {name: shape}, "outputs": {name: {"shape": [...], "data": [...]}}}."""
import json, struct, sys
import numpy as np
import onnx
import onnxruntime as ort

model_path, inputs_path, out_path = sys.argv[1:4]
m = onnx.load(model_path)
onnx.checker.check_model(m, full_check=True)
raw = open(inputs_path, 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
header = json.loads(raw[8:8 + n])
header.pop('__metadata__', None)
feeds = {}
for name, t in header.items():
    b, e = t['data_offsets']
    dt = {'F32': np.float32, 'I32': np.int32}[t['dtype']]
    feeds[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).reshape(t['shape'])
sess = ort.InferenceSession(model_path, providers=['CPUExecutionProvider'])
ins = {i.name: i.shape for i in sess.get_inputs()}
res = sess.run(None, {k: feeds[k] for k in ins})
outs = {o.name: {'shape': list(r.shape), 'data': r.astype(np.float64).ravel().tolist()} for o, r in zip(sess.get_outputs(), res)}
json.dump({'opset': m.opset_import[0].version, 'inputs': ins, 'outputs': outs}, open(out_path, 'w'))
