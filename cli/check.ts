/**
 * `mpsc check SPEC [--json] [--ir [PROGRAM]] [--device D]`: parse and check a .model file, print the
 * model summary; with --ir, a program as backend D runs it (fused, planned). Exit 0 when valid, 1
 * with diagnostics when not. With --json, stdout is one JSON object either way:
 * the summary plus `ok: true` and `diagnostics` (warnings), or `{ok: false, diagnostics}` (cli/main.ts);
 * each diagnostic has file, line, col, endLine, endCol, severity, message, hint.
 */
import type { Command } from 'commander';
import { checkFileWithWarnings } from '../compiler/check/index.js';
import { diagnosticJson } from '../compiler/diagnostics.js';
import { renderSummary, summarize } from '../compiler/check/summary.js';
import { FUSION_DEVICES, deviceFusions } from '../compiler/device_fusions.js';
import { UserError } from '../compiler/errors.js';
import { NO_FUSIONS } from '../compiler/ir/fuse.js';
import { formatProgramsForCheck, plannedPeakBytes } from '../compiler/ir/print_ir.js';
import { precisionOverride } from '../compiler/check/overrides.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import type { CheckedModel } from '../compiler/model.js';
import { generateCudaModel } from '../compiler/codegen-cuda/index.js';
import { cublasLtChoice, cudaArchitecture, findCublasLt, findGpu, gemmReport, tf32x3Choice } from '../runtime/cuda/session.js';

/** `--ir --device cuda`: where each GEMM node of each program runs (cuBLASLt or the generated kernel) and why */
function cudaGemmPaths(model: CheckedModel): string {
  const a = generateCudaModel(buildPrograms(model, { batch: model.train.batch }), { cublasLt: cublasLtChoice(), tf32x3: tf32x3Choice(), arch: cudaArchitecture(findGpu()?.computeCap ?? null) });
  return `\n# CUDA GEMM paths (compiler/codegen-cuda/cublaslt.ts)\n${gemmReport(a.gemms, findCublasLt(), true).join('\n')}\n`;
}


export function register(program: Command): void {
  program
    .command('check')
    .description('check a .model spec (syntax, names, shapes, settings) and print a model summary')
    .argument('[spec]', 'path to a .model file')
    .option('--json', 'print the summary as JSON ({ok: true, ..., diagnostics: [warnings]}); errors as {ok: false, diagnostics: [...]} (exit 1)')
    .option('--precision <p>', 'check (and plan memory) at this train precision: fp32, fp16 or bf16 (= train { precision }); --ir shows each value\'s storage type')
    .option('--ir [program]', 'print a program after autodiff, optimizer lowering, fusion and memory planning: train_step (default), apply_update, eval, eval_tail, all')
    .option('--device <device>', 'the backend whose fusions to apply: cpu, cuda, metal, metal-emu, reference (none); with --ir the default is cpu, and the summary\'s planned memory is the unfused programs\' unless --device is given')
    .addHelpText(
      'after',
      `
Examples:
  mpsc check specs/lenet.model            layers, shapes, parameter counts, planned memory
  mpsc check specs/lenet.model --json     the same as one JSON object (errors too: {"ok": false, "diagnostics": [...]})
  mpsc check specs/lenet.model --ir       the train-step program the backends generate code from
  mpsc check specs/lenet.model --ir eval  the forward-only evaluation program
  mpsc check specs/lenet.model --ir --device metal   the train step as the Metal backend fuses it
  mpsc check specs/lenet.model --precision bf16 --ir   bf16 storage (PyTorch autocast's types: f16 / bf16 values) and the memory plan
  mpsc check bench/gpt2_124m_b16_t1024.model --precision bf16 --device cuda   planned peak as the CUDA backend runs it`,
    )
    .action((specArg: string | undefined, opts: { json?: boolean; ir?: string | boolean; device?: string; precision?: string }) => {
      // `mpsc check --ir specs/x.model`: commander gives the spec to --ir's optional value
      let spec = specArg;
      if (spec === undefined && typeof opts.ir === 'string' && /\.model$/.test(opts.ir)) {
        spec = opts.ir;
        opts.ir = true;
      }
      if (spec === undefined) throw new UserError("error: missing required argument 'spec'\n  help: mpsc check SPEC.model [--ir [PROGRAM]] (see mpsc check --help)");
      const device = opts.device ?? 'cpu';
      const fusions = deviceFusions(device);
      if (!fusions) throw new UserError(`error: unknown --device '${device}' for check\n  help: use one of ${FUSION_DEVICES.join(', ')}`);
      const { model, warnings, warningDiagnostics } = checkFileWithWarnings(spec, opts.precision !== undefined ? [precisionOverride(opts.precision)] : []);
      for (const w of warnings) process.stderr.write(w + '\n');
      if (opts.ir !== undefined) {
        process.stdout.write(formatProgramsForCheck(model, opts.ir === true ? 'train_step' : String(opts.ir), fusions, device));
        if (device === 'cuda') process.stdout.write(cudaGemmPaths(model));
        return;
      }
      const summary = summarize(model, model.loss ? plannedPeakBytes(model, opts.device !== undefined ? fusions : NO_FUSIONS) : null);
      const json = { ok: true, ...summary, diagnostics: warningDiagnostics.map(diagnosticJson) };
      process.stdout.write(opts.json ? JSON.stringify(json, null, 2) + '\n' : renderSummary(summary) + '\n');
    });
}
