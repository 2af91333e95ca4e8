/**
 * `mpsc sample SPEC --weights FILE`: generate text with a trained language model
 * (runtime/sampler.ts), streaming it to stdout; the speed goes to stderr.
 */
import { Option, type Command } from 'commander';
import { UserError } from '../compiler/errors.js';
import { DEVICES } from '../runtime/device.js';
import { sample, type SampleOptions } from '../runtime/sampler.js';
import { defaultThreads, THREADS_HELP } from '../runtime/threads.js';
import { checkSpec, parseNonNegInt, parsePositiveInt } from './train.js';

/** what commander parses: the sampler's options without the output callbacks */
type SampleCliOptions = Omit<SampleOptions, 'onText' | 'onNote'> & { device: string };

function parseTemperature(v: string): number {
  const x = Number(v);
  if (!Number.isFinite(x) || x < 0 || v.trim() === '') throw new UserError(`error: --temperature must be a number >= 0, got '${v}'\n  help: 1 samples from the model's distribution, lower is more conservative, 0 always takes the most likely token`);
  return x;
}

export function register(program: Command): void {
  program
    .command('sample')
    .description('generate text with a language model trained on text(): `mpsc sample specs/char_gpt.model --weights latest`')
    .argument('<spec>', 'the .model file')
    .requiredOption('--weights <ref>', "the trained weights: a checkpoint or weights file, a run folder, or latest (they hold the vocabulary)")
    .option('--prompt <text>', 'text to continue (default: a newline); every character must be in the vocabulary')
    .option('--tokens <n>', 'how many tokens to generate', parsePositiveInt('--tokens'), 500)
    .option('--temperature <t>', 'divide the logits by t before the softmax (0: always the most likely token)', parseTemperature, 1)
    .option('--top-k <k>', 'sample among the k most likely tokens only', parsePositiveInt('--top-k'))
    .option('--seed <n>', 'random seed of the sampling', parseNonNegInt('--seed'), 0)
    .addOption(new Option('--device <device>', 'where to run').choices([...DEVICES]).default('auto'))
    .option('--threads <n>', THREADS_HELP, parsePositiveInt('--threads'))
    .addHelpText(
      'after',
      '\nEach token runs the eval program once on a [1, T] window (T = the spec\'s sequence length): the last T tokens\n' +
        'of the text, or all of it at positions 0..L-1 while it is shorter. The programs are static-shaped, so there\n' +
        'is no KV cache; the cost per token is one T-position forward pass however long the text grows. The speed\n' +
        '(tokens/s) is printed on stderr at the end.',
    )
    .action(async (spec: string, o: SampleCliOptions) => {
      // `mpsc sample ... | head`: a reader that stops early ends the generation quietly
      process.stdout.on('error', (e: NodeJS.ErrnoException) => {
        if (e.code === 'EPIPE') process.exit(0);
        throw e;
      });
      const model = await checkSpec(spec);
      const r = await sample(model, {
        ...o,
        threads: o.threads ?? defaultThreads(),
        onText: (s) => process.stdout.write(s),
        onNote: (m) => process.stderr.write(m + '\n'),
      });
      process.stdout.write('\n');
      process.stderr.write(`${r.tokens} tokens in ${r.seconds.toFixed(2)} s: ${r.tokensPerSecond.toFixed(1)} tokens/s on ${r.device} (one [1, ${r.window}] window per token)\n`);
    });
}
