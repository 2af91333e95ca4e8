/**
 * init: initial values of every parameter and state tensor.
 *
 * Consumes: a CheckedModel (its ParamDecl list with InitSpecs) and a seed.
 * Produces: Map path -> Float32Array (row-major, numel(shape) elements) for every
 *           param and state value, following PyTorch's formulas:
 *   default_weight   kaiming_uniform_(a=sqrt(5)): U(-b, b), b = 1/sqrt(fan_in)
 *   default_bias     U(-b, b), b = 1/sqrt(fan_in) (0 when fan_in is 0)
 *   zeros/ones/constant/normal(mean,std)/uniform(a,b)
 *   xavier_uniform   U(-b, b), b = gain*sqrt(6/(fan_in+fan_out))
 *   xavier_normal    N(0, gain*sqrt(2/(fan_in+fan_out)))
 *   kaiming_uniform  U(-b, b), b = sqrt(3)*gain/sqrt(fan_in)  (mode fan_in)
 *   kaiming_normal   N(0, gain/sqrt(fan_in))
 *   gain = torch.nn.init.calculate_gain(nonlinearity, a): linear 1, relu sqrt(2),
 *   leaky_relu sqrt(2/(1+a^2)); fan_in = shape[1]*receptive, fan_out =
 *   shape[0]*receptive, receptive = prod(shape[2:]) (torch._calculate_fan_in_and_fan_out).
 * Randomness: element i of tensor `path` uses Philox4x32-10 (compiler/ir/philox.ts)
 *   with key (seed, fnv1a(path)) and counter (i, 0x1417, 0, 0): uniforms take 53 bits
 *   from the first two words, normals use Box-Muller on both word pairs. So values
 *   are reproducible for a seed, and adding or removing a layer never changes the
 *   initial values of the other layers. (Bit-identical values to PyTorch are not a
 *   goal: PyTorch's CPU generator is a different stream; the distributions match.)
 * Invariants: deterministic; no global state; fan-based inits need >= 2 dims
 *   (UserError otherwise, as torch raises).
 */
import { UserError } from '../errors.js';
import { numel } from '../ir/graph.js';
import { philox4x32Into } from '../ir/philox.js';
import type { CheckedModel, InitSpec, ParamDecl } from '../model.js';

const INIT_COUNTER_TAG = 0x1417;

/** 32-bit FNV-1a of a string's UTF-16 code units. */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

export function calculateGain(nonlinearity: 'relu' | 'leaky_relu' | 'linear', a: number): number {
  if (nonlinearity === 'relu') return Math.SQRT2;
  if (nonlinearity === 'leaky_relu') return Math.sqrt(2 / (1 + a * a));
  return 1;
}

export function fanInOut(shape: readonly number[], path: string): { fanIn: number; fanOut: number } {
  if (shape.length < 2) {
    throw new UserError(`error: cannot compute fan_in/fan_out for '${path}' with shape [${shape.join(', ')}]: fan-based init needs a tensor with at least 2 dimensions; use zeros, ones, constant, normal or uniform instead`);
  }
  const receptive = numel(shape.slice(2));
  return { fanIn: shape[1] * receptive, fanOut: shape[0] * receptive };
}

const words = new Uint32Array(4);

/** the first uniform in [0,1) of element i (53 random bits: words 0 and 1) */
function draw1(key0: number, key1: number, i: number): number {
  philox4x32Into(key0, key1, i, INIT_COUNTER_TAG, 0, 0, words);
  return ((words[0] >>> 5) * 67108864 + (words[1] >>> 6)) / 9007199254740992; // [0,1)
}

/** out[j] is element from + j of the tensor (its Philox counter) */
function fillUniform(out: Float32Array, from: number, key0: number, key1: number, lo: number, hi: number): void {
  for (let j = 0; j < out.length; j++) out[j] = lo + (hi - lo) * draw1(key0, key1, from + j);
}

function fillNormal(out: Float32Array, from: number, key0: number, key1: number, mean: number, std: number): void {
  for (let j = 0; j < out.length; j++) {
    // two independent uniforms in [0,1), 53 random bits each: words 0, 1 and words 2, 3
    philox4x32Into(key0, key1, from + j, INIT_COUNTER_TAG, 0, 0, words);
    const u1 = ((words[0] >>> 5) * 67108864 + (words[1] >>> 6)) / 9007199254740992;
    const u2 = ((words[2] >>> 5) * 67108864 + (words[3] >>> 6)) / 9007199254740992;
    const r = Math.sqrt(-2 * Math.log(1 - u1)); // 1-u1 in (0,1]
    out[j] = mean + std * r * Math.cos(2 * Math.PI * u2);
  }
}

export function initTensor(decl: InitDecl, seed: number): Float32Array {
  const out = new Float32Array(numel(decl.shape));
  initSlice(decl, seed, 0, out);
  return out;
}

/** what a tensor's initial values depend on */
export type InitDecl = Pick<ParamDecl, 'path' | 'shape' | 'init'>;

/**
 * Elements [from, from + out.length) of the tensor's initial values into `out`: the same values as those
 * elements of initTensor (each element's draws depend only on its index), so slices may be filled apart
 * (runtime/init_threads.ts fills a large model's slices on worker threads).
 */
export function initSlice(decl: InitDecl, seed: number, from: number, out: Float32Array): void {
  const k0 = seed >>> 0;
  const k1 = fnv1a(decl.path);
  const spec: InitSpec = decl.init;
  switch (spec.kind) {
    case 'zeros':
      break;
    case 'ones':
      out.fill(1);
      break;
    case 'constant':
      out.fill(spec.value);
      break;
    case 'normal':
      fillNormal(out, from, k0, k1, spec.mean, spec.std);
      break;
    case 'uniform':
      fillUniform(out, from, k0, k1, spec.a, spec.b);
      break;
    case 'default_weight': {
      const { fanIn } = fanInOut(decl.shape, decl.path);
      const b = fanIn > 0 ? 1 / Math.sqrt(fanIn) : 0;
      fillUniform(out, from, k0, k1, -b, b);
      break;
    }
    case 'default_bias': {
      const b = spec.fan_in > 0 ? 1 / Math.sqrt(spec.fan_in) : 0;
      fillUniform(out, from, k0, k1, -b, b);
      break;
    }
    case 'xavier_uniform': {
      const { fanIn, fanOut } = fanInOut(decl.shape, decl.path);
      const b = spec.gain * Math.sqrt(6 / (fanIn + fanOut));
      fillUniform(out, from, k0, k1, -b, b);
      break;
    }
    case 'xavier_normal': {
      const { fanIn, fanOut } = fanInOut(decl.shape, decl.path);
      fillNormal(out, from, k0, k1, 0, spec.gain * Math.sqrt(2 / (fanIn + fanOut)));
      break;
    }
    case 'kaiming_uniform': {
      const { fanIn } = fanInOut(decl.shape, decl.path);
      const b = (Math.sqrt(3) * calculateGain(spec.nonlinearity, spec.a)) / Math.sqrt(fanIn);
      fillUniform(out, from, k0, k1, -b, b);
      break;
    }
    case 'kaiming_normal': {
      const { fanIn } = fanInOut(decl.shape, decl.path);
      fillNormal(out, from, k0, k1, 0, calculateGain(spec.nonlinearity, spec.a) / Math.sqrt(fanIn));
      break;
    }
    default: {
      const never: never = spec;
      throw new Error(`internal: unknown init ${JSON.stringify(never)}`);
    }
  }
}

export function initParams(model: CheckedModel, seed: number): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const p of model.params) out.set(p.path, initTensor(p, seed));
  return out;
}
