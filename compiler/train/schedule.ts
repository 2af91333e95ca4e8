/**
 * schedule: the learning rate of each optimizer step, evaluated on the host.
 *
 * Consumes: a ScheduleConfig (model.ts), the optimizer's base lr, the 0-based
 *           optimizer step (number of updates already done) and the total number
 *           of optimizer steps of the run (for cosine with t_max null).
 * Produces: the lr passed in StepScalars.lr for that update: exactly what
 *           torch.optim.lr_scheduler gives when `scheduler.step()` is called
 *           after every `optimizer.step()`, i.e. the lr of the (step+1)-th update:
 *   constant     base
 *   step         base * gamma^floor(s / step_size)                       (StepLR)
 *   multistep    base * gamma^#{m in milestones : m <= s}                (MultiStepLR; bisect_right)
 *   exponential  base * gamma^s                                          (ExponentialLR)
 *   cosine       eta_min + (base - eta_min) * (1 + cos(pi * s / T)) / 2  (CosineAnnealingLR, T = t_max)
 *   warmup W>0   s < W: base * (f + (1 - f) * s / W)                     (LinearLR(start_factor=f, total_iters=W))
 *                s >= W: main(s - W) with base lr `base`                 (SequentialLR(..., milestones=[W]))
 *                for cosine with t_max null, T = totalSteps - W.
 * Closed forms vs torch's recursive ("chainable") forms: torch updates the lr
 * multiplicatively from the previous group lr; the closed forms above are the
 * same values up to float64 rounding (relative differences ~1e-15). The one
 * visible subtlety is cosine: torch's chainable form near s = T (lr close to
 * eta_min) can differ from the closed form by a few ulps of `base`, and past
 * T both follow the same period-2T cosine (the lr rises again), which is what
 * this closed form gives. SequentialLR restarts the main schedule at the
 * milestone with step(0), which sets the lr to the main schedule's closed form
 * at 0, i.e. `base`: so main(s - W) with the same base lr is exact.
 * Invariants: steps are integers >= 0; the result is finite and >= 0 when the
 * settings are (checked by the front end: gamma > 0, step_size >= 1, ...).
 */
import type { ScheduleConfig } from '../model.js';

function mainLr(schedule: ScheduleConfig, base: number, s: number, mainTotal: number): number {
  switch (schedule.kind) {
    case 'constant':
      return base;
    case 'step':
      return base * Math.pow(schedule.gamma, Math.floor(s / schedule.step_size));
    case 'multistep': {
      let count = 0;
      for (const m of schedule.milestones) if (m <= s) count++;
      return base * Math.pow(schedule.gamma, count);
    }
    case 'exponential':
      return base * Math.pow(schedule.gamma, s);
    case 'cosine': {
      const T = schedule.t_max ?? mainTotal;
      if (T <= 0) return base;
      return schedule.eta_min + ((base - schedule.eta_min) * (1 + Math.cos((Math.PI * s) / T))) / 2;
    }
  }
}

export function lrAt(schedule: ScheduleConfig, baseLr: number, step: number, totalSteps: number): number {
  if (!Number.isInteger(step) || step < 0) throw new Error(`internal: lrAt needs a step >= 0, got ${step}`);
  const W = schedule.warmup_steps;
  if (W > 0) {
    if (step < W) {
      const f = schedule.warmup_start_factor;
      return baseLr * (f + ((1 - f) * step) / W);
    }
    return mainLr(schedule, baseLr, step - W, totalSteps - W);
  }
  return mainLr(schedule, baseLr, step, totalSteps);
}
