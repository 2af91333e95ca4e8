import { describe, it, expect } from 'vitest';
import { UserError } from '../compiler/errors.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { openSession, parseDevice } from '../runtime/device.js';
import { findGpu } from '../runtime/cuda/session.js';

const HAS_GPU = findGpu() !== null;
import { tinyClassifier } from './fixtures/train/models.js';

const programs = buildPrograms(tinyClassifier({ features: [4], classes: 3, data: { kind: 'synthetic', train_size: 16, test_size: 8, seed: 1 }, batch: 4 }), { batch: 4 });

describe('device selection', () => {
  it('rejects unknown devices with the list of known ones', () => {
    expect(() => parseDevice('rocm')).toThrowError(UserError);
    expect(() => parseDevice('rocm')).toThrowError(/auto, cuda, cpu, metal, metal-emu, reference/);
    expect(parseDevice('metal-emu')).toBe('metal-emu');
  });
  it.skipIf(process.platform === 'darwin')('metal off macOS is a UserError pointing at metal-emu and cpu', async () => {
    await expect(openSession('metal', programs)).rejects.toThrowError(/macOS on Apple silicon[\s\S]*--device cpu[\s\S]*--device metal-emu/);
  });
  it('reference opens the float64 interpreter and says so', async () => {
    const o = await openSession('reference', programs);
    expect(o.device).toBe('reference');
    expect(o.session.device).toBe('reference');
    expect(o.note).toBe('device: reference');
    expect(o.session.tensorNames()).toContain('fc.weight');
    o.session.close();
  });
  it.skipIf(process.platform === 'darwin' || HAS_GPU)('auto never picks metal-emu or reference when the cpu backend exists, and says why', async () => {
    const o = await openSession('auto', programs);
    expect(o.device).toBe('cpu');
    expect(o.note).toMatch(/^device: cpu \(auto: no CUDA device found: nvidia-smi lists no GPU; no Metal on /);
    o.session.close();
  });
  it.skipIf(HAS_GPU)('--device cuda on a machine without a GPU is a UserError saying so', async () => {
    const err = await openSession('cuda', programs).catch((e) => e);
    expect(err).toBeInstanceOf(UserError);
    expect(String(err.message)).toMatch(/--device cuda: no CUDA device found.*\n  help: use --device cpu/);
  });
});
