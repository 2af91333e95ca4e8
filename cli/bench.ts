import type { Command } from 'commander';
// placeholder until the 'bench' command lands (owned by its issue's helper)
export function register(program: Command): void {
  program.command('bench').description('(bench: not implemented yet)').action(() => {
    throw new Error('bench is not implemented yet');
  });
}
