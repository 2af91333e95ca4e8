/**
 * gpu_caps: the TypeScript side of runtime/metal-bridge/mpsc_metal_caps.h. A Metal backend (the
 * bridge, or the emulator modelling a GPU) refuses a program its GPU cannot run when the model is
 * created, with a reason starting with UNSUPPORTED_GPU; the sessions turn that Error of the native
 * module into a UserError (exit 1) with the reason, and leave every other error as it is.
 * Consumes an error thrown by createNativeSession; produces the error to rethrow.
 */
import { UserError } from '../../compiler/errors.js';

/** MPSC_UNSUPPORTED_GPU of mpsc_metal_caps.h */
export const UNSUPPORTED_GPU = 'unsupported GPU: ';

export function gpuUserError(e: unknown): unknown {
  const msg = e instanceof Error ? e.message : '';
  const at = msg.indexOf(UNSUPPORTED_GPU);
  return at < 0 ? e : new UserError(`error: ${msg.slice(at + UNSUPPORTED_GPU.length)}`);
}
