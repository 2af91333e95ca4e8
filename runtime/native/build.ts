/**
 * build: turns generated C++ sources into a loadable node-addon-api module, through a
 * generated CMake project built by cmake-js (as a child process: cmake-js calls
 * process.chdir), cached in a content-addressed folder.
 *
 * Consumes: generated source files (relative path -> text; with the `cuda` option also `.cu` files,
 *           CUDA then being a CMake language), the shared host runtime
 *           (runtime/cpp: mpsc_model.h, mpsc_parallel.hpp, mpsc_runtime.cc, binding.cc), flags.
 * Produces: `<cacheRoot>/<key>/mpsc_<key16>.node` where key = sha256(generated sources +
 *           runtime sources + flags + compiler version + Node-API version). Callers may also pass
 *           `inputsKey` (a digest of what the generated sources are a pure function of): then
 *           `<cacheRoot>/by-inputs/<sha256(inputsKey + flags + ...)>` records the key, so a warm
 *           cache is found without generating any code (the entry itself stays addressed by
 *           the generated sources, shared with callers that pass files). Also
 *           `<cacheRoot>/rt-<key32>/{binding,mpsc_runtime}.cc.o`: the runtime's model-independent
 *           sources compiled once per compiler, flags and runtime text (runtimeObjects), linked
 *           into each module (writeCmakeProject's `prebuilt`).
 *
 * Cache protocol (safe for concurrent builders of the same key):
 *   1. if `<root>/<key>/<module>` exists, use it (the folder only ever appears complete);
 *   2. otherwise build in `<root>/tmp-<key16>-<pid>-<random>/`, then rename that folder to
 *      `<root>/<key>`; if the rename loses a race (the key folder appeared meanwhile), delete
 *      ours and use the winner's. A half-finished build is never at the final path, and the
 *      module file name contains the hash (Node cannot reload a module of the same path).
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { UserError } from '../../compiler/errors.js';

const require = createRequire(import.meta.url);
const RUNTIME_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../cpp');
/** runtime sources copied into every project (headers and .cc files) */
export const RUNTIME_FILES = ['mpsc_model.h', 'mpsc_parallel.hpp', 'mpsc_runtime.cc', 'binding.cc'] as const;
const CUDA_RUNTIME_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../cuda');
/**
 * CUDA projects only (runtime/cuda): the cuBLASLt calls of the generated host code (compiled and
 * linked, with MPSC_CUBLASLT defined, only where CMake finds CUDA::cublasLt) and the NCCL calls of
 * data-parallel training (compiled and linked, with MPSC_NCCL defined, only where CMake finds
 * nccl.h and libnccl: find_path / find_library, NCCL ships no CMake package).
 */
export const CUDA_RUNTIME_FILES = ['mpsc_cublaslt.h', 'mpsc_cublaslt.cpp', 'mpsc_nccl.h', 'mpsc_nccl.cpp'] as const;
const CUBLASLT_SOURCE = 'mpsc_cublaslt.cpp';
const NCCL_SOURCE = 'mpsc_nccl.cpp';
/**
 * `-march=native` on x86; Arm compilers (Apple clang, GCC on aarch64) spell it `-mcpu=native`.
 * `-fno-math-errno`: sqrt is then one instruction GCC can vectorise (with errno it keeps a branch and a
 * libm call, so a loop with sqrt, e.g. the Adam update, stays scalar); no result changes, only errno.
 */
export const DEFAULT_CXXFLAGS = process.arch === 'arm64' ? '-O3 -mcpu=native -fno-math-errno' : '-O3 -march=native -fno-math-errno';
const NAPI_VERSION = 8;

export interface BuildAddonOptions {
  /**
   * generated files, path relative to the project's src/ folder -> contents; `.cc`/`.cpp` files are
   * compiled. A function is called only when the cache misses (then `inputsKey` is required).
   */
  files: Record<string, string> | (() => Record<string, string>);
  /**
   * Optional: a digest of everything the generated files are a pure function of (e.g. the
   * ProgramSet JSON + the generator's own sources, see sourcesDigest). When given, it replaces the
   * generated sources in the cache key, so a warm cache needs no code generation at all.
   */
  inputsKey?: string;
  /** compiler flags (default: $MPSC_CXXFLAGS, else DEFAULT_CXXFLAGS: `-O3 -march=native -fno-math-errno`) */
  cxxflags?: string;
  /** cache root (default: $MPSC_CACHE_DIR, else ~/.cache/mpsc) */
  cacheDir?: string;
  /** a CUDA project (`.cu` sources compiled by nvcc, linked with the CUDA runtime); see CudaBuild */
  cuda?: CudaBuild;
  /** parallel compile jobs (default: number of CPUs) */
  jobs?: number;
  onProgress?: (msg: string) => void;
}

/** What a CUDA project adds: CUDA as a CMake language, its architectures, nvcc's version in the key. */
export interface CudaBuild {
  /** the nvcc to use (CMake's CUDACXX) */
  nvcc: string;
  /** CMAKE_CUDA_ARCHITECTURES, e.g. '90a' (Hopper) or '89' */
  architectures: string;
  /** first line of `nvcc --version` that names the release (part of the cache key) */
  version: string;
  /** nccl.h as runtime/cuda/session.ts found it (null: none; part of the cache key, so installing NCCL rebuilds) */
  nccl?: string | null;
}

export interface BuiltAddon {
  key: string;
  /** the cache folder holding the module and its sources */
  dir: string;
  modulePath: string;
  /** true when the module came from the cache */
  cached: boolean;
}

export function defaultCacheDir(): string {
  return process.env.MPSC_CACHE_DIR || path.join(os.homedir(), '.cache', 'mpsc');
}

export function resolveCxxflags(cxxflags?: string): string {
  return (cxxflags ?? process.env.MPSC_CXXFLAGS ?? DEFAULT_CXXFLAGS).trim();
}

let compilerVersionMemo: string | undefined;
/** first line of `$CXX --version` (what CMake will pick), memoised per process */
export function compilerVersion(): string {
  if (compilerVersionMemo === undefined) {
    const cxx = process.env.CXX || 'c++';
    const r = spawnSync(cxx, ['--version'], { encoding: 'utf8' });
    if (r.error || r.status !== 0) {
      throw new UserError(
        `mpsc: cannot run the C++ compiler '${cxx}' (${r.error?.message ?? `exit ${r.status}`}).\n` +
          `  The CPU backend needs a C++17 compiler and CMake: install g++ (or clang) and cmake, or set CXX.`,
      );
    }
    compilerVersionMemo = `${cxx}: ${r.stdout.split('\n')[0].trim()}`;
  }
  return compilerVersionMemo;
}

let runtimeMemo: Record<string, string> | undefined;
let cudaRuntimeMemo: Record<string, string> | undefined;
/** the runtime files every project gets; with `cuda`, also the CUDA runtime files */
export function runtimeSources(cuda = false): Record<string, string> {
  if (!runtimeMemo) {
    runtimeMemo = {};
    for (const f of RUNTIME_FILES) runtimeMemo[f] = fs.readFileSync(path.join(RUNTIME_DIR, f), 'utf8');
  }
  if (!cuda) return runtimeMemo;
  if (!cudaRuntimeMemo) {
    cudaRuntimeMemo = { ...runtimeMemo };
    for (const f of CUDA_RUNTIME_FILES) cudaRuntimeMemo[f] = fs.readFileSync(path.join(CUDA_RUNTIME_DIR, f), 'utf8');
  }
  return cudaRuntimeMemo;
}

function napiIncludeDir(): string {
  return path.dirname(require.resolve('node-addon-api/package.json'));
}

/** sha256 over the contents of files / folders (recursively, sorted): e.g. a code generator's sources */
export function sourcesDigest(paths: string[]): string {
  const h = createHash('sha256');
  const visit = (p: string) => {
    const st = fs.statSync(p);
    if (st.isDirectory()) {
      for (const f of fs.readdirSync(p).sort()) visit(path.join(p, f));
    } else {
      h.update(`${p}\0${st.size}\0`);
      h.update(fs.readFileSync(p, "utf8"));
    }
  };
  for (const p of paths) visit(p);
  return h.digest('hex');
}

/** relative module specifiers of a JavaScript / TypeScript source: `import ... from`, `export ... from`, `import '...'` */
const IMPORT_RE = /(?:^|[\n;])\s*(?:(?:import|export)\b[^'"]*?\bfrom\s*|import\s*)['"](\.{1,2}\/[^'"]+)['"]/g;

/**
 * `entry` and every module it imports, transitively, by relative specifiers (sorted absolute paths): the sources a
 * code generator's output is a function of, wherever it runs from (the sources through tsx: `./x.js` resolves to
 * `x.ts`; dist/: to `x.js`). Keys built on it (cpuInputsKey, cudaInputsKey) then change with any module the generator
 * reaches, not a hand-kept list of folders: a list drifts as the generator grows imports (before 8 Dec, the CUDA key
 * left out compiler/ir/memory_plan.ts and fuse.ts, which the CUDA backend runs while generating, and the CPU key the
 * 16-bit header it inlines, so an edit there reused a stale build). Files a generator reads as text (C++ headers it
 * ships) are not imports: its caller names them beside.
 */
export function moduleClosure(entry: string): string[] {
  const seen = new Set<string>();
  const todo = [entry];
  while (todo.length > 0) {
    const f = todo.pop()!;
    if (seen.has(f)) continue;
    seen.add(f);
    for (const m of fs.readFileSync(f, 'utf8').matchAll(IMPORT_RE)) {
      const js = path.resolve(path.dirname(f), m[1]);
      const p = [js, js.replace(/\.js$/, '.ts')].find((c) => fs.existsSync(c) && fs.statSync(c).isFile());
      if (p !== undefined) todo.push(p);
    }
  }
  return [...seen].sort();
}

/** a sha256 of labelled texts (each prefixed by its label and length, so no two sequences collide) */
function keyHasher(): { add: (label: string, text: string) => void; digest: () => string } {
  const h = createHash('sha256');
  return {
    add: (label, text) => void h.update(`${label}\0${Buffer.byteLength(text)}\0`).update(text),
    digest: () => h.digest('hex'),
  };
}

/** the CPU a build's code is tied to when its flags say `native` (a cache folder may be shared between machines) */
function nativeCpuTag(cxxflags: string): string | undefined {
  return /-march=native|-mcpu=native|-mtune=native/.test(cxxflags) ? `${process.arch} ${os.cpus()[0]?.model ?? 'unknown'}` : undefined;
}

/**
 * The cache's publish step: renames a finished temporary folder to its final name. When a concurrent builder of the
 * same key got there first (the rename fails as the folder exists) and `complete()` says theirs is whole, theirs is
 * kept (identical by the key) and ours removed; any other failure is thrown.
 */
function renameIntoPlace(tmp: string, dir: string, complete: () => boolean): void {
  try {
    fs.renameSync(tmp, dir);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (!(code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'EPERM') || !complete()) throw e;
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

/** the cache key of a build: generated files, or (when given) the digest of their inputs */
export function addonKey(files: Record<string, string> | string, cxxflags: string, cuda?: CudaBuild): string {
  const { add, digest } = keyHasher();
  add('cxxflags', cxxflags);
  const cpu = nativeCpuTag(cxxflags);
  if (cpu !== undefined) add('cpu', cpu);
  add('compiler', compilerVersion());
  add('napi', String(NAPI_VERSION));
  if (cuda) add('cuda', `${cuda.version} ${cuda.architectures}${cuda.nccl ? ' nccl' : ''}`);
  add('node-addon-api', fs.readFileSync(path.join(napiIncludeDir(), 'package.json'), 'utf8'));
  const rt = runtimeSources(cuda !== undefined);
  for (const f of Object.keys(rt).sort()) add(`runtime/${f}`, rt[f]);
  if (typeof files === 'string') add('inputs', files);
  else for (const f of Object.keys(files).sort()) add(`src/${f}`, files[f]);
  return digest();
}

/**
 * The runtime sources every addon compiles alike: neither depends on the model (mpsc_model.h is the fixed
 * interface), and binding.cc (Node-API and node-addon-api's headers) took ~4 s of g++ per build on the 2-core CI
 * machine, mpsc_runtime.cc ~1.8 s. buildAddon compiles them once per compiler, flags and runtime text
 * (runtimeObjects) and links the objects into each addon.
 */
const PREBUILT_SOURCES = ['binding.cc', 'mpsc_runtime.cc'] as const;

/** a CMake list of project sources (src/<f>) */
const srcListOf = (fs_: string[]) => fs_.map((f) => cmakeQuote(`src/${f}`)).join(' ');

/** CMake's quoted-argument escaping */
function cmakeQuote(s: string): string {
  return '"' + s.replace(/[\\"$;]/g, (c) => '\\' + c) + '"';
}

/** a CMake project's opening lines, alike in every project mpsc writes: C++17, position-independent code, Threads */
function cmakeProjectHeader(name: string, cuda: boolean): string {
  return `cmake_minimum_required(VERSION 3.15)
project(${name} LANGUAGES CXX${cuda ? ' CUDA' : ''})
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_FLAGS_RELEASE "")
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
find_package(Threads REQUIRED)
`;
}

/** what a target compiling binding.cc needs: cmake-js's Node headers, node-addon-api's, src/, the Node-API definitions */
function napiTargetLines(target: string, indent: string): string {
  return (
    `${indent}target_include_directories(${target} PRIVATE \${CMAKE_JS_INC} ${cmakeQuote(napiIncludeDir())} src)\n` +
    `${indent}target_compile_definitions(${target} PRIVATE NAPI_VERSION=${NAPI_VERSION} NAPI_CPP_EXCEPTIONS)\n`
  );
}

/** package.json of a cmake-js project: a Node-API addon of NAPI_VERSION (so cmake-js downloads no headers) */
const cmakeJsPackage = (name: string) => JSON.stringify({ name, private: true, binary: { napi_versions: [NAPI_VERSION] } }, null, 2) + '\n';

/**
 * Writes a complete CMake project into dir: CMakeLists.txt, package.json (tells cmake-js
 * this is a Node-API addon: no header download), src/ with the generated files and the runtime.
 * Targets: `<target>` (the .node addon) and `<target>_embed` (a static library of the
 * model + runtime without Node, for embedding; EXCLUDE_FROM_ALL). Returns the written paths.
 */
export function writeCmakeProject(dir: string, files: Record<string, string>, cxxflags: string, target: string, cuda?: CudaBuild, prebuilt?: string[]): string[] {
  const written: string[] = [];
  const put = (rel: string, text: string) => {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, text);
    written.push(p);
  };
  const all: Record<string, string> = { ...runtimeSources(cuda !== undefined), ...files };
  for (const [rel, text] of Object.entries(all)) {
    if (rel.includes('..') || path.isAbsolute(rel)) throw new Error(`internal: bad generated file path '${rel}'`);
    put(path.join('src', rel), text);
  }
  const ccs = Object.keys(all).filter((f) => (cuda ? /\.(cc|cpp|cu)$/ : /\.(cc|cpp)$/).test(f) && f !== CUBLASLT_SOURCE && f !== NCCL_SOURCE).sort();
  const modelCcs = ccs.filter((f) => f !== 'binding.cc');
  // the addon's own compiles: with `prebuilt`, the runtime's two sources come as objects built once (runtimeObjects)
  const addonSrcs = prebuilt ? `${srcListOf(ccs.filter((f) => !(PREBUILT_SOURCES as readonly string[]).includes(f)))} ${prebuilt.map(cmakeQuote).join(' ')}` : srcListOf(ccs);
  const cxxOnly = (f: string) => (cuda ? `"$<$<COMPILE_LANGUAGE:CXX>:${f.slice(1, -1)}>"` : f);
  const flags = cxxflags.split(/\s+/).filter(Boolean).map(cmakeQuote).map(cxxOnly).join(' ');
  // CUDA: nvcc gets -O3 and -fmad=true (contractions as PyTorch's kernels have them), never fast math
  const cudaFlags = cuda ? ' "$<$<COMPILE_LANGUAGE:CUDA>:-O3>" "$<$<COMPILE_LANGUAGE:CUDA>:-fmad=true>" "$<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>"' : '';
  const cudaSetup = cuda
    ? `set(CMAKE_CUDA_ARCHITECTURES ${cmakeQuote(cuda.architectures)})\nset(CMAKE_CUDA_STANDARD 17)\nfind_package(CUDAToolkit REQUIRED)\n` +
      `if(TARGET CUDA::cublasLt)\n  message(STATUS "mpsc: cuBLASLt found: GEMM nodes chosen for it run as cuBLASLt calls")\nelse()\n  message(STATUS "mpsc: no cuBLASLt in this CUDA toolkit: every GEMM runs as its generated kernel")\nendif()\n` +
      `find_path(MPSC_NCCL_INCLUDE nccl.h HINTS \${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)\n` +
      `find_library(MPSC_NCCL_LIBRARY nccl HINTS \${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)\n` +
      `if(MPSC_NCCL_INCLUDE AND MPSC_NCCL_LIBRARY)\n  message(STATUS "mpsc: NCCL found (\${MPSC_NCCL_LIBRARY}): data-parallel training (--gpus) available")\nelse()\n  message(STATUS "mpsc: no NCCL (nccl.h / libnccl not found): built without NCCL, --gpus unavailable")\nendif()\n`
    : '';
  const cudaLib = cuda ? ' CUDA::cudart' : '';
  // cuBLASLt where the toolkit has it (the GPU machine); elsewhere every GEMM runs as its generated kernel
  const cublasLt = (t: string, vis: string) =>
    cuda
      ? `if(TARGET CUDA::cublasLt)\n  target_sources(${t} PRIVATE ${cmakeQuote(`src/${CUBLASLT_SOURCE}`)})\n  target_compile_definitions(${t} ${vis} MPSC_CUBLASLT)\n  target_link_libraries(${t} ${vis} CUDA::cublasLt)\nendif()\n`
      : '';
  // NCCL where CMake finds it (the GPU machine); elsewhere the collective hooks say "built without NCCL"
  const nccl = (t: string, vis: string) =>
    cuda
      ? `if(MPSC_NCCL_INCLUDE AND MPSC_NCCL_LIBRARY)\n  target_sources(${t} PRIVATE ${cmakeQuote(`src/${NCCL_SOURCE}`)})\n  target_compile_definitions(${t} ${vis} MPSC_NCCL)\n  target_include_directories(${t} ${vis} \${MPSC_NCCL_INCLUDE})\n  target_link_libraries(${t} ${vis} \${MPSC_NCCL_LIBRARY})\nendif()\n`
      : '';
  put(
    'CMakeLists.txt',
    `# generated by mpsc (runtime/native/build.ts); build with cmake-js (see README) or plain CMake for ${target}_embed
${cmakeProjectHeader(target, cuda !== undefined)}${cudaSetup}
if(CMAKE_JS_VERSION)
  add_library(${target} SHARED ${addonSrcs} \${CMAKE_JS_SRC})
  set_target_properties(${target} PROPERTIES PREFIX "" SUFFIX ".node")
${napiTargetLines(target, '  ')}  target_compile_options(${target} PRIVATE ${flags}${cudaFlags})
  target_link_libraries(${target} PRIVATE \${CMAKE_JS_LIB} Threads::Threads${cudaLib})
${cublasLt(target, 'PRIVATE')}${nccl(target, 'PRIVATE')}endif()

add_library(${target}_embed STATIC EXCLUDE_FROM_ALL ${srcListOf(modelCcs)})
target_include_directories(${target}_embed PUBLIC src)
target_compile_options(${target}_embed PRIVATE ${flags}${cudaFlags})
target_link_libraries(${target}_embed PUBLIC Threads::Threads${cudaLib})
${cublasLt(`${target}_embed`, 'PUBLIC')}${nccl(`${target}_embed`, 'PUBLIC')}`,
  );
  put('package.json', cmakeJsPackage(target));
  return written;
}

/**
 * The CMake project of the runtime objects: an OBJECT library of PREBUILT_SOURCES with what the addon target gives
 * them (cmake-js's Node include dirs, node-addon-api's, the Node-API definitions, the flags, position-independent code,
 * C++17, Threads); what it leaves out (the CUDA projects' MPSC_CUBLASLT / MPSC_NCCL definitions and CUDA include
 * dirs, the target's `_EXPORTS` definition) neither source reads.
 */
function runtimeObjectsProject(cxxflags: string): string {
  const flags = cxxflags.split(/\s+/).filter(Boolean).map(cmakeQuote).join(' ');
  return `# generated by mpsc (runtime/native/build.ts runtimeObjects): the runtime objects every addon of these flags links
${cmakeProjectHeader('mpsc_rt', false)}add_library(mpsc_rt OBJECT ${srcListOf([...PREBUILT_SOURCES])})
${napiTargetLines('mpsc_rt', '')}target_compile_options(mpsc_rt PRIVATE ${flags})
target_link_libraries(mpsc_rt PRIVATE Threads::Threads)
`;
}

/** the object files under dir whose names end in `/<source>.o` (CMake's CMakeFiles/<target>.dir/src/<source>.o) */
function findObject(dir: string, source: string): string | undefined {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      const found = findObject(p, source);
      if (found) return found;
    } else if (e.name === `${source}.o` || e.name === `${source}.obj`) return p;
  }
  return undefined;
}

/**
 * The compiled PREBUILT_SOURCES for these flags: `<root>/rt-<key32>/<source>.o`, key = sha256(the project's CMake text
 * (flags, include dirs), the compiler's version, the CPU for -march=native, node-addon-api's and cmake-js's versions,
 * the runtime files); built on a miss with cmake-js in a temporary folder renamed into place (buildAddon's protocol:
 * a concurrent builder of the same key keeps the first complete folder).
 */
async function runtimeObjects(root: string, cxxflags: string, jobs: number, onProgress?: (m: string) => void): Promise<string[]> {
  const project = runtimeObjectsProject(cxxflags);
  const rt = runtimeSources(false);
  const { add, digest } = keyHasher();
  add('project', project);
  add('compiler', compilerVersion());
  const cpu = nativeCpuTag(cxxflags);
  if (cpu !== undefined) add('cpu', cpu);
  add('node-addon-api', fs.readFileSync(path.join(napiIncludeDir(), 'package.json'), 'utf8'));
  add('cmake-js', fs.readFileSync(require.resolve('cmake-js/package.json'), 'utf8'));
  for (const f of Object.keys(rt).sort()) add(`runtime/${f}`, rt[f]);
  const key = digest();
  const dir = path.join(root, `rt-${key.slice(0, 32)}`);
  const objects = PREBUILT_SOURCES.map((f) => path.join(dir, `${f}.o`));
  const complete = () => objects.every((o) => fs.existsSync(o));
  if (complete()) return objects;
  const tmp = path.join(root, `tmp-rt-${key.slice(0, 16)}-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    fs.mkdirSync(path.join(tmp, 'src'), { recursive: true });
    for (const [f, text] of Object.entries(rt)) fs.writeFileSync(path.join(tmp, 'src', f), text);
    fs.writeFileSync(path.join(tmp, 'CMakeLists.txt'), project);
    fs.writeFileSync(path.join(tmp, 'package.json'), cmakeJsPackage('mpsc_rt'));
    onProgress?.('compiling the runtime objects (once per compiler and flags)');
    await runCmakeJs(tmp, 'mpsc_rt', jobs, undefined, {}, false);
    for (const f of PREBUILT_SOURCES) {
      const o = findObject(path.join(tmp, 'build'), f);
      if (!o) throw new Error(`internal: the runtime objects' build left no object for ${f} in ${tmp}`);
      fs.copyFileSync(o, path.join(tmp, `${f}.o`));
    }
    fs.rmSync(path.join(tmp, 'build'), { recursive: true, force: true });
    renameIntoPlace(tmp, dir, complete);
  } catch (e) {
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  return objects;
}

/**
 * Builds in flight: each cmake-js runs in its own process group, so that when mpsc exits (Ctrl-C
 * before training, an error) the whole build is stopped with it instead of running on, orphaned,
 * and writing into the cache: SIGTERM to the group (cmake-js, cmake --build and the build tool;
 * ninja, which runs each compiler in a process group of its own, then stops its compilers).
 */
const liveBuilds = new Set<number>();
let exitHookInstalled = false;
function killBuildsOnExit(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const pid of liveBuilds) {
      try {
        process.kill(-pid, 'SIGTERM');
      } catch {
        // the group has already ended
      }
    }
  });
}

/** Runs cmake-js (child process) on a project folder; resolves to the built module path. */
export async function runCmakeJs(projectDir: string, target: string, jobs: number, onProgress?: (m: string) => void, env: Record<string, string> = {}, module = true): Promise<string> {
  const cmakeJs = path.join(path.dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
  const args = [cmakeJs, 'build', '-d', projectDir, '-O', path.join(projectDir, 'build'), '-B', 'Release', '-p', String(jobs), '-l', 'error'];
  onProgress?.(`compiling ${target} (cmake-js, ${jobs} job${jobs === 1 ? '' : 's'})`);
  const out = await new Promise<{ code: number | null; text: string }>((resolve, reject) => {
    killBuildsOnExit();
    const child = spawn(process.execPath, args, { cwd: projectDir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env }, detached: true });
    if (child.pid !== undefined) liveBuilds.add(child.pid);
    let text = '';
    child.stdout.on('data', (d) => (text += d));
    child.stderr.on('data', (d) => (text += d));
    child.on('error', reject);
    child.on('close', (code) => {
      if (child.pid !== undefined) liveBuilds.delete(child.pid);
      resolve({ code, text });
    });
  });
  const mod = path.join(projectDir, 'build', 'Release', `${target}.node`);
  if (out.code !== 0 || (module && !fs.existsSync(mod))) {
    const tail = out.text.split('\n').slice(-60).join('\n');
    if (/Could not find CMAKE|cmake: not found|CMake executable is not found|ENOENT/.test(out.text)) {
      throw new UserError(`mpsc: cmake-js could not run CMake (is cmake >= 3.15 installed?):\n${tail}`);
    }
    throw new Error(`internal: compiling the generated C++ failed (exit ${out.code}) in ${projectDir}:\n${tail}`);
  }
  return mod;
}

/** removes temporary build folders left by builds that died more than a day ago */
function removeStaleTemps(root: string): void {
  const dayAgo = Date.now() - 24 * 3600 * 1000;
  for (const e of fs.readdirSync(root)) {
    if (!e.startsWith('tmp-')) continue;
    try {
      if (fs.statSync(path.join(root, e)).mtimeMs < dayAgo) fs.rmSync(path.join(root, e), { recursive: true, force: true });
    } catch {
      // another process removed or renamed it meanwhile
    }
  }
}

/** Builds (or finds in the cache) the addon for these generated sources. */
export async function buildAddon(opts: BuildAddonOptions): Promise<BuiltAddon> {
  const cxxflags = resolveCxxflags(opts.cxxflags);
  const root = opts.cacheDir ?? defaultCacheDir();
  if (typeof opts.files === 'function' && opts.inputsKey === undefined) throw new Error('internal: buildAddon: lazy files need an inputsKey');
  const located = (key: string) => {
    const target = `mpsc_${key.slice(0, 16)}`;
    const dir = path.join(root, key);
    return { target, dir, module: path.join(dir, `${target}.node`) };
  };
  // warm path: inputs digest -> key, without generating anything
  const aliasPath = opts.inputsKey !== undefined ? path.join(root, 'by-inputs', addonKey(opts.inputsKey, cxxflags, opts.cuda)) : null;
  if (aliasPath && fs.existsSync(aliasPath)) {
    const key = fs.readFileSync(aliasPath, 'utf8').trim();
    const loc = located(key);
    if (/^[0-9a-f]{64}$/.test(key) && fs.existsSync(loc.module)) return { key, dir: loc.dir, modulePath: loc.module, cached: true };
  }
  const files = typeof opts.files === 'function' ? opts.files() : opts.files;
  const key = addonKey(files, cxxflags, opts.cuda);
  const { target, dir: finalDir, module: finalModule } = located(key);
  const remember = () => {
    if (!aliasPath) return;
    const tmpAlias = `${aliasPath}.${process.pid}.${randomBytes(4).toString('hex')}`;
    fs.mkdirSync(path.dirname(aliasPath), { recursive: true });
    fs.writeFileSync(tmpAlias, key + '\n');
    fs.renameSync(tmpAlias, aliasPath);
  };
  if (fs.existsSync(finalModule)) {
    remember();
    return { key, dir: finalDir, modulePath: finalModule, cached: true };
  }

  try {
    fs.mkdirSync(root, { recursive: true });
    fs.accessSync(root, fs.constants.W_OK);
  } catch (e) {
    throw new UserError(
      `error: cannot use the build cache folder ${root} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})\n` +
        `  help: set MPSC_CACHE_DIR to a writable folder`,
    );
  }
  removeStaleTemps(root);
  const tmp = path.join(root, `tmp-${key.slice(0, 16)}-${process.pid}-${randomBytes(4).toString('hex')}`);
  fs.mkdirSync(tmp, { recursive: true });
  try {
    const jobs = opts.jobs ?? Math.max(1, os.cpus().length);
    // the runtime's sources as objects built once per flags, unless the generated files bring their own runtime text
    const own = [...PREBUILT_SOURCES, 'mpsc_model.h'].some((f) => f in files);
    writeCmakeProject(tmp, files, cxxflags, target, opts.cuda, own ? undefined : await runtimeObjects(root, cxxflags, jobs, opts.onProgress));
    const built = await runCmakeJs(tmp, target, jobs, opts.onProgress, opts.cuda ? { CUDACXX: opts.cuda.nvcc } : {});
    fs.copyFileSync(built, path.join(tmp, `${target}.node`));
    fs.rmSync(path.join(tmp, 'build'), { recursive: true, force: true });
    fs.writeFileSync(path.join(tmp, 'build.json'), JSON.stringify({ key, cxxflags, compiler: compilerVersion(), built: new Date().toISOString() }, null, 2) + '\n');
    // another process may have finished the same key first: theirs is complete and identical
    renameIntoPlace(tmp, finalDir, () => fs.existsSync(finalModule));
  } catch (e) {
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  remember();
  return { key, dir: finalDir, modulePath: finalModule, cached: false };
}

/** Loads a built addon module (a fresh path per key, so each key is loaded once per process). */
export function loadAddon<T = unknown>(modulePath: string): T {
  return require(modulePath) as T;
}
