/**
 * The 'reference' Session: runs ProgramSet graphs on the float64 interpreter.
 * One Float64Array per persistent value *name*, shared by every program and zero-filled
 * at creation (the host writes initial values through write()).
 */
import { type Program, type ProgramName, type ProgramSet, type StepScalars, isPersistent, numel, programsOf } from '../compiler/ir/graph.js';
import { type Env, runGraph } from '../compiler/reference/interpret.js';
import type { Batch, Session } from './session.js';

export async function createReferenceSession(programs: ProgramSet): Promise<Session> {
  const tensors = new Map<string, { shape: number[]; data: Float64Array }>();
  const present = new Map<ProgramName, Program>();
  for (const p of programsOf(programs)) {
    const name = p.name;
    present.set(name, p);
    for (const v of p.graph.values) {
      if (!isPersistent(v)) continue;
      const t = tensors.get(v.name);
      if (!t) tensors.set(v.name, { shape: [...v.shape], data: new Float64Array(numel(v.shape)) });
      else if (t.shape.join(',') !== v.shape.join(',')) {
        throw new Error(`internal: persistent tensor '${v.name}' has shape [${t.shape.join(',')}] in one program and [${v.shape.join(',')}] in ${name}`);
      }
    }
  }
  let closed = false;

  function tensor(name: string): { shape: number[]; data: Float64Array } {
    if (closed) throw new Error('reference session: used after close()');
    const t = tensors.get(name);
    if (!t) throw new Error(`reference session: no persistent tensor '${name}' (known: ${[...tensors.keys()].sort().join(', ')})`);
    return t;
  }

  function run(name: ProgramName, inputs: Batch, scalars: StepScalars): Float64Array {
    if (closed) throw new Error('reference session: used after close()');
    const p = present.get(name);
    if (!p) throw new Error(`reference session: no program '${name}' in model '${programs.model}'`);
    if (inputs.length !== p.inputs.length) throw new Error(`reference session: ${name} takes ${p.inputs.length} inputs, got ${inputs.length}`);
    const env: Env = new Map();
    p.inputs.forEach((id, k) => {
      const v = p.graph.values[id], data = inputs[k];
      const want = v.dtype === 'i32' ? Int32Array : Float32Array;
      if (!(data instanceof want)) throw new Error(`reference session: ${name} input '${v.name}' must be a ${want.name}, got ${data?.constructor?.name}`);
      if (data.length !== numel(v.shape)) throw new Error(`reference session: ${name} input '${v.name}' has ${data.length} elements, expected ${numel(v.shape)} for shape [${v.shape.join(',')}]`);
      env.set(id, Float64Array.from(data));
    });
    for (const v of p.graph.values) if (isPersistent(v)) env.set(v.id, tensors.get(v.name)!.data);
    runGraph(p.graph, env, scalars);
    return Float64Array.from(p.outputs.map((o) => {
      const data = env.get(o.value);
      if (!data || data.length !== 1) throw new Error(`internal: reference session: ${name} output '${o.name}' (value ${o.value}) is ${data ? `${data.length} elements, not a scalar` : 'never written'}`);
      return data[0];
    }));
  }

  return {
    device: 'reference',
    tensorNames: () => [...tensors.keys()].sort(),
    tensorShape: (name) => [...tensor(name).shape],
    read: (name) => Float32Array.from(tensor(name).data),
    write(name, data) {
      const t = tensor(name);
      if (data.length !== t.data.length) throw new Error(`reference session: write '${name}' with ${data.length} elements, expected ${t.data.length} for shape [${t.shape.join(',')}]`);
      t.data.set(data);
    },
    hasProgram: (name) => present.has(name),
    run,
    close() {
      closed = true;
      tensors.clear();
      present.clear();
    },
  };
}
