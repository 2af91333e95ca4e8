/**
 * Weights for export: the parameters and buffers of a model, read by name from a
 * safetensors file (a full training checkpoint, whose optimizer state is ignored, or a
 * weights-only `model.safetensors`).
 *
 * Consumes: a CheckedModel and a file path.
 * Produces: `ExportWeights`: every ParamDecl's tensor as float32 (shape checked against the
 *           spec) and `<layer>.num_batches_tracked` (torch's batchnorm counter; 0 when the
 *           file has none) for every layer with a running_mean.
 * Relies on: runtime/checkpoint.ts (checksum-verified reading); checkpoint names are torch names.
 * A missing or mis-shaped tensor is a UserError naming the tensor and the file.
 */
import { UserError } from '../errors.js';
import type { CheckedModel } from '../model.js';
import { batchnormLayers, readCheckpointFile } from '../../runtime/checkpoint.js';
import { tensorToF32 } from '../../runtime/safetensors.js';

export interface ExportWeights {
  /** param / state path -> float32 values (row-major, ParamDecl.shape) */
  tensors: Map<string, { shape: number[]; data: Float32Array }>;
  /** batchnorm layer path -> num_batches_tracked */
  batchesTracked: Map<string, bigint>;
}

export function readExportWeights(model: CheckedModel, file: string): ExportWeights {
  const st = readCheckpointFile(file);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  const missing: string[] = [];
  for (const p of model.params) {
    const t = st.tensors.get(p.path);
    if (!t) {
      missing.push(p.path);
      continue;
    }
    if (t.shape.length !== p.shape.length || t.shape.some((d, i) => d !== p.shape[i])) {
      throw new UserError(`${file}: error: tensor '${p.path}' has shape [${t.shape.join(', ')}], the spec ${model.file} needs [${p.shape.join(', ')}]\n  hint: export with the spec the weights were trained with`);
    }
    tensors.set(p.path, { shape: [...p.shape], data: tensorToF32(t) });
  }
  if (missing.length > 0) {
    const shown = missing.slice(0, 5).map((m) => `'${m}'`).join(', ');
    throw new UserError(`${file}: error: the weights file has no tensor ${shown}${missing.length > 5 ? ` and ${missing.length - 5} more` : ''} of model '${model.name}'\n  hint: pass a checkpoint or model.safetensors written by training ${model.file}`);
  }
  const batchesTracked = new Map<string, bigint>();
  for (const layer of batchnormLayers(model)) {
    const t = st.tensors.get(`${layer}.num_batches_tracked`);
    let v = 0n;
    if (t && t.dtype === 'I64' && t.data.byteLength === 8) v = new DataView(t.data.buffer, t.data.byteOffset, 8).getBigInt64(0, true);
    else if (t) v = BigInt(Math.round(tensorToF32(t)[0]));
    batchesTracked.set(layer, v);
  }
  return { tensors, batchesTracked };
}
