/**
 * device_fusions: the FusionCaps (compiler/ir/fuse.ts) each device's backend fuses its programs
 * with, by device name: what `mpsc check --device D` plans with and what `mpsc bench` reports the
 * planned memory of. Consumes a device name; produces the backend's capability set (plain data),
 * or undefined for an unknown name. The backends themselves take their sets from their own
 * fusions.ts (codegen-cpu, codegen-metal, codegen-cuda); this is the one table naming them.
 */
import { CPU_FUSIONS } from './codegen-cpu/fusions.js';
import { metalFusions } from './codegen-metal/fusions.js';
import { cudaFusions } from './codegen-cuda/fusions.js';
import { type FusionCaps, NO_FUSIONS } from './ir/fuse.js';

/** made when asked for (CUDA's reads $MPSC_CUDA_FUSE_OFF: a bad value is a UserError of the command, not of loading this module) */
const DEVICE_FUSIONS: Record<string, () => FusionCaps> = { cpu: () => CPU_FUSIONS, cuda: () => cudaFusions(), metal: metalFusions, 'metal-emu': metalFusions, reference: () => NO_FUSIONS };

export const FUSION_DEVICES = Object.keys(DEVICE_FUSIONS);

export function deviceFusions(device: string): FusionCaps | undefined {
  return Object.prototype.hasOwnProperty.call(DEVICE_FUSIONS, device) ? DEVICE_FUSIONS[device]() : undefined;
}
