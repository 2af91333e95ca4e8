/**
 * Dynamic loss scaling for `train { precision: "fp16" }`: torch.amp.GradScaler's state machine with
 * its defaults, run on the host once per optimizer step (runtime/trainer.ts).
 *
 * The backward is seeded with the scale (the `amp.loss_scale` state, compiler/ir/programs.ts), so
 * every gradient is multiplied by it; apply_update divides by it before clipping and the update.
 * After each step the trainer reports whether the scaled gradients held an inf or NaN
 * (`found_inf`): then the update is skipped and the scale backs off (x0.5) and the count of
 * consecutive finite steps resets; else, after 2000 consecutive finite steps, the scale grows (x2)
 * when the grown scale is finite in f32. The scale is an f32, as torch keeps it. Plain data in and
 * out; the checkpoint stores it (runtime/checkpoint.ts `amp_*` metadata) so --resume is exact.
 */

export interface ScalerConfig {
  initScale: number;
  growthFactor: number;
  backoffFactor: number;
  growthInterval: number;
}

/** torch.amp.GradScaler() defaults */
export const GRAD_SCALER_DEFAULTS: ScalerConfig = { initScale: 2 ** 16, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000 };

/**
 * Consecutive skipped steps after which training stops with an error: from the initial 2^16, 40
 * back-offs reach 2^-24, the smallest f16 subnormal, below which no scale makes a finite gradient
 * representable, so the loss or the gradients are non-finite whatever the scale.
 */
export const MAX_CONSECUTIVE_SKIPS = 40;

export interface ScalerState {
  /** the current loss scale (an f32 value) */
  scale: number;
  /** consecutive finite steps since the last growth or back-off (torch's _growth_tracker) */
  growthTracker: number;
  /** optimizer steps skipped so far in the run */
  skipped: number;
  /** skipped steps in a row, up to now */
  consecutiveSkips: number;
}

export function initialScaler(cfg: ScalerConfig = GRAD_SCALER_DEFAULTS): ScalerState {
  return { scale: Math.fround(cfg.initScale), growthTracker: 0, skipped: 0, consecutiveSkips: 0 };
}

/** the state after one optimizer step whose scaled gradients were (found_inf) or were not all finite: torch's _amp_update_scale_ */
export function updateScaler(s: ScalerState, foundInf: boolean, cfg: ScalerConfig = GRAD_SCALER_DEFAULTS): ScalerState {
  if (foundInf) {
    return { scale: Math.fround(s.scale * cfg.backoffFactor), growthTracker: 0, skipped: s.skipped + 1, consecutiveSkips: s.consecutiveSkips + 1 };
  }
  const successful = s.growthTracker + 1;
  if (successful === cfg.growthInterval) {
    const grown = Math.fround(s.scale * cfg.growthFactor);
    return { scale: Number.isFinite(grown) ? grown : s.scale, growthTracker: 0, skipped: s.skipped, consecutiveSkips: 0 };
  }
  return { scale: s.scale, growthTracker: successful, skipped: s.skipped, consecutiveSkips: 0 };
}
