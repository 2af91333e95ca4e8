/**
 * strict_check: the strict conformance check of generated Metal Shading Language and of the
 * Objective-C++ bridge, with the host's clang (test/metal_strict.test.ts; docs/metal.md says what
 * it proves and what only a Mac can).
 *
 * MSL (checkMsl): each `.metal` text is compiled by `clang++ -fsyntax-only -nostdinc -nostdinc++`
 * against msl_strict.h (include/metal_stdlib), where `device`, `constant` and `threadgroup` are
 * distinct clang address spaces and only the MSL functions mpsc uses are declared, with their
 * MSL signatures. Before that, this module
 *   - rewrites each `[[name]]` / `[[name(args)]]` attribute into `MSL_ATTR_name` /
 *     `MSL_ATTR_name(args)` (msl_strict.h defines the known ones; an unknown one is a syntax error),
 *   - makes `threadgroup T name[N];` declarations inside functions `static` (clang allows no
 *     automatic variable in an address space; Metal gives each threadgroup one copy),
 *   - checks every kernel signature: `[[buffer(n)]]` only on device / constant pointers or
 *     references, each index once and below 31; `[[threadgroup(n)]]` only on threadgroup pointers;
 *     built-in attributes only on the types the specification allows for them.
 * Several files are compiled in one clang run, each inside its own namespace.
 *
 * Bridge (checkBridge): the bridge `.mm` (with the generated mpsc_metal_plan.inc) is compiled as
 * Objective-C++ with ARC for a macOS target against the declaration headers in sdk/ (Metal,
 * Foundation, dispatch, Availability), written from Apple's documentation, with the SDK version
 * (__MAC_OS_X_VERSION_MAX_ALLOWED) and deployment target chosen by the caller; unguarded use of
 * API newer than the deployment target is an error.
 *
 * Relies on: clang++ on PATH (or $MPSC_CLANG); Debian's clang 14 works. The C++ standard headers
 * the bridge includes are the host's libstdc++ / glibc headers (only a syntax check).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const STRICT_INCLUDE = path.join(HERE, 'include');
export const STRICT_SDK = path.join(HERE, 'sdk');

/** the clang++ to use, or null when none is installed */
export function findClang(): string | null {
  for (const c of [process.env.MPSC_CLANG, 'clang++', 'clang++-14', 'clang++-15', 'clang++-16'].filter((x): x is string => !!x)) {
    const r = spawnSync(c, ['--version'], { encoding: 'utf8' });
    if (!r.error && r.status === 0 && /clang/i.test(r.stdout)) return c;
  }
  return null;
}

export interface MslFile {
  /** file name used in diagnostics, e.g. `lenet.train_step.metal` */
  name: string;
  source: string;
}

export interface CheckResult {
  ok: boolean;
  /** clang's diagnostics and the signature checks, `file:line: error: ...` */
  diagnostics: string;
}

/** built-in attribute -> the parameter types the Metal specification allows (MSL 5.2.3.6) */
const BUILTIN_TYPES: Record<string, string[]> = {
  thread_position_in_grid: ['uint', 'uint2', 'uint3', 'ushort', 'ushort2', 'ushort3'],
  threadgroup_position_in_grid: ['uint', 'uint2', 'uint3', 'ushort', 'ushort2', 'ushort3'],
  thread_position_in_threadgroup: ['uint', 'uint2', 'uint3', 'ushort', 'ushort2', 'ushort3'],
  threads_per_threadgroup: ['uint', 'uint2', 'uint3', 'ushort', 'ushort2', 'ushort3'],
  threadgroups_per_grid: ['uint', 'uint2', 'uint3', 'ushort', 'ushort2', 'ushort3'],
  thread_index_in_threadgroup: ['uint', 'ushort'],
  thread_index_in_simdgroup: ['uint', 'ushort'],
  simdgroup_index_in_threadgroup: ['uint', 'ushort'],
  threads_per_simdgroup: ['uint', 'ushort'],
};
const MAX_BUFFERS = 31;

/** `[[name(args)]]` -> `MSL_ATTR_name(args)`; anything else inside `[[ ]]` is left for clang to reject */
export function rewriteAttributes(source: string): string {
  return source.replace(/\[\[\s*([A-Za-z_]\w*)\s*(\([^()[\]]*\))?\s*\]\]/g, (_m, name: string, args: string | undefined) => `MSL_ATTR_${name}${args ?? ''}`);
}

/** `threadgroup T name[N];` inside a function body -> `static threadgroup T name[N];` (line by line, braces counted) */
export function staticThreadgroupArrays(source: string): string {
  let depth = 0;
  return source.split('\n').map((line) => {
    const code = line.replace(/\/\/.*$/, '');
    const out = depth > 0 ? line.replace(/^(\s*)(threadgroup\s+[^;=()]*\[[^;=]*\]\s*;)/, '$1static $2') : line;
    for (const c of code) depth += c === '{' ? 1 : c === '}' ? -1 : 0;
    return out;
  }).join('\n');
}

function lineOf(text: string, index: number): number {
  let n = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) n++;
  return n;
}

/** the parameter lists of every `kernel` function, split at top-level commas */
function kernelSignatures(source: string): { name: string; line: number; params: string[] }[] {
  const out: { name: string; line: number; params: string[] }[] = [];
  const re = /\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(/g;
  for (let m = re.exec(source); m; m = re.exec(source)) {
    let depth = 1, i = re.lastIndex, start = i;
    const params: string[] = [];
    for (; i < source.length && depth > 0; i++) {
      const c = source[i];
      if (c === '(' || c === '[' || c === '<') depth++;
      else if (c === ')' || c === ']' || c === '>') depth--;
      if ((c === ',' && depth === 1) || depth === 0) {
        params.push(source.slice(start, i).trim());
        start = i + 1;
      }
    }
    out.push({ name: m[1], line: lineOf(source, m.index), params: params.filter((p) => p.length > 0) });
  }
  return out;
}

/** the signature rules clang cannot see once attributes are macros; `file:line: error: ...` lines */
export function checkSignatures(file: MslFile): string[] {
  const errors: string[] = [];
  for (const k of kernelSignatures(file.source)) {
    const at = `${file.name}:${k.line}: error: kernel ${k.name}`;
    const buffers = new Set<number>();
    for (const p of k.params) {
      const attr = /\[\[\s*([A-Za-z_]\w*)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]\s*$/.exec(p);
      if (!attr) {
        errors.push(`${at}: parameter '${p}' has no Metal attribute (every kernel parameter needs [[buffer(n)]], [[threadgroup(n)]] or a built-in)`);
        continue;
      }
      const decl = p.slice(0, attr.index).trim();
      const [, name, index] = attr;
      if (name === 'buffer') {
        const n = Number(index);
        if (!/^(?:const\s+)?(device|constant)\b.*[*&]\s*\w+$/.test(decl))
          errors.push(`${at}: [[buffer(${index})]] on '${decl}', which is not a device or constant pointer/reference`);
        if (!(n >= 0 && n < MAX_BUFFERS)) errors.push(`${at}: [[buffer(${index})]] is outside 0..${MAX_BUFFERS - 1}`);
        if (buffers.has(n)) errors.push(`${at}: [[buffer(${index})]] is bound twice`);
        buffers.add(n);
      } else if (name === 'threadgroup') {
        if (!/^threadgroup\b.*\*\s*\w+$/.test(decl)) errors.push(`${at}: [[threadgroup(${index})]] on '${decl}', which is not a threadgroup pointer`);
      } else if (name in BUILTIN_TYPES) {
        const type = decl.replace(/\s+\w+$/, '').replace(/^const\s+/, '').trim();
        if (!BUILTIN_TYPES[name].includes(type)) errors.push(`${at}: [[${name}]] on type '${type}' (Metal allows ${BUILTIN_TYPES[name].join(', ')})`);
      } else {
        errors.push(`${at}: unknown kernel parameter attribute [[${name}]]`);
      }
    }
  }
  return errors;
}

function runClang(clang: string, args: string[], cwd: string): { ok: boolean; text: string } {
  const r = spawnSync(clang, args, { cwd, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return { ok: r.status === 0, text: `${r.stdout}${r.stderr}` };
}

/** clang flags of the MSL check: C++17 without any system or standard-library header */
export function mslClangFlags(): string[] {
  return [
    '-x', 'c++', '-std=c++17', '-fsyntax-only', '-nostdinc', '-nostdinc++', '-fno-builtin',
    // a 64-bit Apple target: long is 64 bits and _Float16 (half) exists, as in Metal
    '--target=arm64-apple-macosx14.0',
    '-isystem', STRICT_INCLUDE,
    '-Werror=unknown-attributes', '-Werror=ignored-attributes', '-Werror=double-promotion', '-Werror=implicit-float-conversion',
    '-Werror=return-type', '-Werror=uninitialized', '-Werror=shadow-field', '-ferror-limit=50',
  ];
}

/**
 * Compiles the files together (one clang run, one namespace per file). ok is false when clang or
 * the signature checks report an error; warnings are in diagnostics either way.
 */
export function checkMsl(clang: string, files: MslFile[]): CheckResult {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-msl-strict-'));
  try {
    const sig = files.flatMap(checkSignatures);
    let tu = '#include <metal_stdlib>\n';
    files.forEach((f, i) => {
      const safe = f.name.replace(/[^A-Za-z0-9_.-]/g, '_');
      fs.writeFileSync(path.join(dir, safe), staticThreadgroupArrays(rewriteAttributes(f.source)));
      tu += `namespace msl_file_${i} {\n#include "${safe}"\n}\n`;
    });
    fs.writeFileSync(path.join(dir, 'all.cc'), tu);
    const r = runClang(clang, [...mslClangFlags(), 'all.cc'], dir);
    const text = r.text.replace(/^In file included from all\.cc:\d+:\n/gm, '');
    return { ok: r.ok && sig.length === 0, diagnostics: [...sig, text.trim()].filter(Boolean).join('\n') };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export interface BridgeCheckOptions {
  /** SDK version the declaration headers pretend to be, as __MAC_OS_X_VERSION_MAX_ALLOWED (e.g. 140000, 150000) */
  sdk: number;
  /** deployment target, e.g. '13.0' */
  minMacos: string;
  /** extra -D / -I flags */
  extra?: string[];
}

/** host include folders of libstdc++ / glibc, for the bridge's C++ headers under a macOS target */
function hostCxxIncludes(clang: string): string[] {
  const r = spawnSync(clang, ['-x', 'c++', '-E', '-v', '-'], { input: '', encoding: 'utf8' });
  const text = `${r.stdout}${r.stderr}`;
  const a = text.indexOf('#include <...> search starts here:');
  const b = text.indexOf('End of search list.');
  if (a < 0 || b < 0) return [];
  return text.slice(a, b).split('\n').slice(1).map((l) => l.trim()).filter((l) => l.startsWith('/') && !l.includes('/lib/clang/') && !l.includes('/lib/llvm'));
}

/**
 * Compiles `mm` (the bridge, in a folder that also holds the generated mpsc_metal_plan.inc and
 * the runtime headers) as Objective-C++ with ARC against sdk/.
 */
export function checkBridge(clang: string, mm: string, opts: BridgeCheckOptions): CheckResult {
  const args = [
    '-x', 'objective-c++', '-std=c++17', '-fsyntax-only', '-fobjc-arc', '-fblocks',
    `--target=x86_64-apple-macosx${opts.minMacos}`, '-stdlib=libstdc++', '-nostdinc++',
    // the host's glibc headers under a Darwin target: clang predefines __nonnull as a nullability
    // keyword there (glibc uses the name as a macro), and _GNU_SOURCE as on Linux
    '-Wno-macro-redefined', '-D__nonnull(params)=', '-D_GNU_SOURCE',
    `-DMPSC_STRICT_SDK_VERSION=${opts.sdk}`,
    '-isystem', STRICT_SDK,
    ...hostCxxIncludes(clang).flatMap((d) => ['-isystem', d]),
    '-Werror', '-Wunguarded-availability-new', '-Wunguarded-availability', '-Wobjc-method-access', '-Wno-unused-function',
    '-ferror-limit=50', ...(opts.extra ?? []), path.basename(mm),
  ];
  const r = runClang(clang, args, path.dirname(mm));
  return { ok: r.ok, diagnostics: r.text.trim() };
}
