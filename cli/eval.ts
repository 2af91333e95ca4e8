import type { Command } from 'commander';
// placeholder until the 'eval' command lands (owned by its issue's helper)
export function register(program: Command): void {
  program.command('eval').description('(eval: not implemented yet)').action(() => {
    throw new Error('eval is not implemented yet');
  });
}
