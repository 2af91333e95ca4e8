import type { Command } from 'commander';
// placeholder until the 'train' command lands (owned by its issue's helper)
export function register(program: Command): void {
  program.command('train').description('(train: not implemented yet)').action(() => {
    throw new Error('train is not implemented yet');
  });
}
