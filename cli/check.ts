import type { Command } from 'commander';
// placeholder until the 'check' command lands (owned by its issue's helper)
export function register(program: Command): void {
  program.command('check').description('(check: not implemented yet)').action(() => {
    throw new Error('check is not implemented yet');
  });
}
