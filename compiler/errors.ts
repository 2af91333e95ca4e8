/**
 * Errors that reach the user. Everything the user can fix (a bad spec, a missing data
 * file, a checkpoint that does not match) is a UserError: the CLI prints its message
 * and exits 1. Any other exception is a bug in mpsc: the CLI says so and exits 2.
 */
export class UserError extends Error {
  /** already formatted, may span several lines (e.g. `path:line:col: error: ...` diagnostics) */
  constructor(message: string, readonly exitCode = 1) {
    super(message);
    this.name = 'UserError';
  }
}
