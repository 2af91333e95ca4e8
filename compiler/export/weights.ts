/**
 * Weights for export: the parameters and buffers of a model, read by name from a
 * safetensors file (a full training checkpoint, whose optimizer state is ignored, or a
 * weights-only `model.safetensors`).
 *
 * Consumes: a CheckedModel and a file path.
 * Produces: `ExportWeights`: every parameter and buffer the model's programs hold, as float32
 *           (shape checked against the spec), `<layer>.num_batches_tracked` (torch's batchnorm
 *           counter; 0 when the file has none) for every layer with a running_mean, and the
 *           file's `vocab` metadata (a text model's tokenizer) when it has one.
 * Relies on: the one weights-loading path of eval / predict / sample (runtime/trainer.ts
 *           weightsLoad + runtime/checkpoint.ts loadIntoSession, into a table of the programs'
 *           persistent tensors instead of a session), so a missing, unexpected or mis-shaped
 *           tensor is the same UserError naming the tensors and the file.
 */
import type { CheckedModel } from '../model.js';
import { buildPrograms } from '../ir/programs.js';
import { batchnormLayers, loadIntoSession, programTensorTable, readCheckpointFile } from '../../runtime/checkpoint.js';
import { tensorToF32 } from '../../runtime/safetensors.js';
import { weightsLoad } from '../../runtime/trainer.js';

export interface ExportWeights {
  /** param / state path -> float32 values (row-major, ParamDecl.shape) */
  tensors: Map<string, { shape: number[]; data: Float32Array }>;
  /** batchnorm layer path -> num_batches_tracked */
  batchesTracked: Map<string, bigint>;
  /** metadata to carry into an exported weights file (`vocab` of a text model) */
  metadata: Record<string, string>;
}

export function readExportWeights(model: CheckedModel, file: string): ExportWeights {
  const st = readCheckpointFile(file);
  const table = programTensorTable(buildPrograms(model, { batch: 1 }));
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  loadIntoSession({ ...table, write: (name, data) => tensors.set(name, { shape: table.tensorShape(name), data }) }, st, file, weightsLoad(model, table));
  const batchesTracked = new Map<string, bigint>();
  for (const layer of batchnormLayers(model)) {
    const t = st.tensors.get(`${layer}.num_batches_tracked`);
    let v = 0n;
    if (t && t.dtype === 'I64' && t.data.byteLength === 8) v = new DataView(t.data.buffer, t.data.byteOffset, 8).getBigInt64(0, true);
    else if (t) v = BigInt(Math.round(tensorToF32(t)[0]));
    batchesTracked.set(layer, v);
  }
  const metadata: Record<string, string> = {};
  if (st.metadata.vocab !== undefined) metadata.vocab = st.metadata.vocab;
  return { tensors, batchesTracked, metadata };
}
