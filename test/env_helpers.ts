// Test helper: run a function with one environment variable set (or unset), restored afterwards.

/** f with `name` set to `value` (undefined: unset), restored afterwards */
export function withEnv<T>(name: string, value: string | undefined, f: () => T): T {
  const before = process.env[name];
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
  try {
    return f();
  } finally {
    if (before === undefined) delete process.env[name];
    else process.env[name] = before;
  }
}
