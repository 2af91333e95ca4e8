/**
 * safetensors(train: "train.safetensors", test: "test.safetensors", inputs: {image: "x", label: "y"}):
 * named tensors, first dimension = samples. `inputs` maps each spec input to a tensor name
 * (inputs not listed use the tensor of the same name). Float tensors feed f32 inputs;
 * integer tensors (I64/I32/I16/I8/U8) feed i32 inputs (and f32 ones, converted).
 */
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { readSafetensors, tensorToF32, tensorToF64, isFloatDType } from '../runtime/safetensors.js';
import { sampleShape, type DataArray, type Dataset } from './dataset.js';

export function loadSafetensorsData(model: CheckedModel, file: string, mapping: Record<string, string> | null): Dataset {
  const st = readSafetensors(file);
  const tensors = new Map<string, DataArray>();
  let count = -1;
  let countFrom = '';
  for (const inp of model.inputs) {
    const tname = mapping?.[inp.name] ?? inp.name;
    const t = st.tensors.get(tname);
    if (!t) {
      throw new UserError(
        `${file}: error: no tensor '${tname}' for the spec's input '${inp.name}' (the file has: ${[...st.tensors.keys()].join(', ') || 'no tensors'})\n` +
          `  help: map the input to a tensor with inputs: {${inp.name}: "<tensor name>"}`,
      );
    }
    if (t.shape.length === 0) throw new UserError(`${file}: error: tensor '${tname}' is a scalar; data tensors need a leading sample dimension`);
    const n = t.shape[0];
    if (count < 0) {
      count = n;
      countFrom = tname;
    } else if (n !== count) {
      throw new UserError(`${file}: error: tensor '${tname}' has ${n} samples but '${countFrom}' has ${count}`);
    }
    const want = sampleShape(inp);
    const got = t.shape.slice(1);
    const wantN = want.reduce((a, b) => a * b, 1);
    const gotN = got.reduce((a, b) => a * b, 1);
    if (wantN !== gotN) {
      throw new UserError(`${file}: error: tensor '${tname}' has samples of shape [${got.join(', ')}] but input '${inp.name}' takes [${want.join(', ')}]`);
    }
    if (inp.dtype === 'f32') {
      tensors.set(inp.name, tensorToF32(t));
    } else {
      const v = tensorToF64(t);
      const out = new Int32Array(v.length);
      for (let i = 0; i < v.length; i++) {
        if (!Number.isInteger(v[i]) || v[i] > 2147483647 || v[i] < -2147483648) {
          throw new UserError(
            `${file}: error: tensor '${tname}' (${t.dtype}) value ${v[i]} at sample ${Math.floor(i / Math.max(1, gotN))} is not an integer, but input '${inp.name}' is i32` +
              (isFloatDType(t.dtype) ? '\n  help: store labels as an integer tensor (int64 in PyTorch)' : ''),
          );
        }
        out[i] = v[i];
      }
      tensors.set(inp.name, out);
    }
  }
  return { source: file, count: Math.max(count, 0), tensors };
}
