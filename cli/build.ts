import type { Command } from 'commander';
// placeholder until the 'build' command lands (owned by its issue's helper)
export function register(program: Command): void {
  program.command('build').description('(build: not implemented yet)').action(() => {
    throw new Error('build is not implemented yet');
  });
}
