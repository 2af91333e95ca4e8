/**
 * optim: GPU kernels of the gradient plumbing and optimizer updates, one thread per element
 * (grad_accumulate, zero, clip_coef, sgd_update, adam_update). Hyper-parameters are baked in;
 * lr and t come from the StepParams struct. Consumes IR nodes; produces KernelSpecs.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { argOf, boolAttr, elementwise, numAttr, numel, shapeOf } from './common.js';

const I = '  ';

export function lowerOptim(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const ins = n.inputs;
  const has = (k: number) => ins.length > k && ins[k] >= 0;
  const a = (v: number, name: string, acc: 'r' | 'w' | 'rw' = 'r') => argOf(g, name, v, acc);
  const d = ctx.d, f32 = (x: number) => d.f(x);
  switch (n.op) {
    case 'grad_accumulate':
      return [elementwise(ctx, g, n, [a(ins[0], 'acc', 'rw'), a(ins[1], 'g')], numel(shapeOf(g, ins[0])),
        `${I}acc[i] += ${f32(numAttr(n, 'scale', 1))} * g[i];\n`)];
    case 'zero':
      return [elementwise(ctx, g, n, [a(ins[0], 'x', 'w')], numel(shapeOf(g, ins[0])), `${I}x[i] = ${f32(0)};\n`)];
    case 'clip_coef':
      return [elementwise(ctx, g, n, [a(ins[0], 'norm'), a(n.outputs[0], 'coef', 'w')], 1,
        `${I}coef[0] = ${d.math('min', f32(1), `${f32(numAttr(n, 'max_norm'))} / (norm[0] + ${f32(1e-6)})`)};\n`)];
    case 'sgd_update': {
      const mom = numAttr(n, 'momentum', 0), wd = numAttr(n, 'weight_decay', 0), nest = boolAttr(n, 'nesterov');
      const args = [a(ins[0], 'param', 'rw'), a(ins[1], 'grad')];
      if (mom !== 0 && has(2)) args.push(a(ins[2], 'buf', 'rw'));
      if (has(3)) args.push(a(ins[3], 'gscale'));
      let body = `${I}float gr = grad[i]${has(3) ? ' * gscale[0]' : ''};\n`;
      if (wd !== 0) body += `${I}gr += ${f32(wd)} * param[i];\n`;
      if (mom !== 0) {
        if (!has(2)) throw new Error(`internal: sgd_update node ${n.id} has momentum but no momentum_buffer`);
        body += `${I}const float bv = ${f32(mom)} * buf[i] + gr;\n${I}buf[i] = bv;\n`;
        body += nest ? `${I}gr = gr + ${f32(mom)} * bv;\n` : `${I}gr = bv;\n`;
      }
      body += `${I}param[i] -= sp.lr * gr;\n`;
      return [elementwise(ctx, g, n, args, numel(shapeOf(g, ins[0])), body)];
    }
    case 'adam_update': {
      const b1 = numAttr(n, 'beta1'), b2 = numAttr(n, 'beta2'), eps = numAttr(n, 'eps'), wd = numAttr(n, 'weight_decay', 0);
      const decoupled = boolAttr(n, 'decoupled');
      const args = [a(ins[0], 'param', 'rw'), a(ins[1], 'grad'), a(ins[2], 'ea', 'rw'), a(ins[3], 'eas', 'rw')];
      if (has(4)) args.push(a(ins[4], 'gscale'));
      let body = `${I}float gr = grad[i]${has(4) ? ' * gscale[0]' : ''};\n${I}float p = param[i];\n`;
      if (wd !== 0) body += decoupled ? `${I}p *= ${f32(1)} - sp.lr * ${f32(wd)};\n` : `${I}gr += ${f32(wd)} * p;\n`;
      body +=
        `${I}const float m = ${f32(b1)} * ea[i] + ${f32(1 - b1)} * gr;\n` +
        `${I}const float v = ${f32(b2)} * eas[i] + ${f32(1 - b2)} * gr * gr;\n` +
        `${I}ea[i] = m;\n${I}eas[i] = v;\n` +
        `${I}const float bc1 = ${f32(1)} - ${d.math('pow', f32(b1), 'float(sp.t)')};\n` +
        `${I}const float bc2 = ${f32(1)} - ${d.math('pow', f32(b2), 'float(sp.t)')};\n` +
        `${I}p -= (sp.lr / bc1) * m / (${d.math('sqrt', 'v')} / ${d.math('sqrt', 'bc2')} + ${f32(eps)});\n` +
        `${I}param[i] = p;\n`;
      return [elementwise(ctx, g, n, args, numel(shapeOf(g, ins[0])), body)];
    }
  }
  return null;
}

