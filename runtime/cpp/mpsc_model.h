/*
 * mpsc_model.h: the C ABI between a *generated model* and the mpsc host runtime.
 *
 * Every backend's code generator emits one translation unit that defines
 *
 *     const mpsc_model_desc* mpsc_model(void);
 *
 * returning a static table that describes the model: its persistent tensors
 * (parameters, buffers, optimizer state, gradient accumulators), and its programs
 * (train_step, apply_update, eval, eval_tail), each with a `run` function pointer.
 * The host runtime (mpsc_runtime.cc, shared by every backend) owns the memory and
 * the threads; it allocates what the table asks for and calls `run`.
 *
 *   CPU backend:        run() executes generated C++ kernels (compiler/codegen-cpu).
 *   Metal emulator:     run() executes generated MSL through the emulator; the same table.
 *   CUDA:               run() replays a CUDA graph over one device allocation; the persistent
 *                       block here is the host copy (backend_to_host / backend_from_host).
 *   Embedding:          link the generated model .cc + mpsc_runtime.cc into any C/C++
 *                       program and use the API at the bottom of this file (no Node needed).
 *
 * Memory (all owned by the runtime, created by mpsc_create):
 *   - persistent: one block, 16 KiB (Apple page) aligned, zero-filled; tensor i lives at
 *     ctx->persistent + model->tensors[i].offset (offsets chosen by the generator, each a
 *     multiple of 64 bytes; the block is model->persistent_bytes long, a multiple of 16 KiB
 *     so a Metal backend can wrap it without copying). ctx->tensors[i] is that pointer.
 *   - arena: one block, 16 KiB aligned, max over programs of arena_bytes (rounded up to
 *     16 KiB). Programs use it for activations / gradients / outputs at the byte offsets
 *     of the memory plan (compiler/ir/memory_plan.ts). Contents are undefined between runs.
 *   - inputs: the host passes one pointer per program input (Program.inputs order), each
 *     pointing at exactly numel * 4 bytes (f32 or i32); the runtime does not copy them.
 *     Callers (binding.cc) validate lengths and dtypes before calling run.
 *
 * Threads: ctx owns a pool of (threads - 1) workers that stay alive across runs;
 * generated code splits work with mpsc_parallel_for (or the C++ wrapper in
 * mpsc_parallel.hpp). The partition of [0, n) into chunks depends only on n and the
 * thread count, never on timing (threads claim chunks, so which thread runs a chunk
 * may vary, never its bounds), so results are bitwise reproducible for a fixed
 * thread count.
 *
 * Errors: functions returning int return 0 on success, non-zero on error;
 * mpsc_last_error(ctx) then gives a message (valid until the next call on ctx).
 * Nothing in this ABI throws C++ exceptions across it.
 *
 * ABI stability: bump MPSC_ABI_VERSION on any change to the structs below; the
 * runtime refuses a model whose abi_version differs.
 */
#ifndef MPSC_MODEL_H
#define MPSC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPSC_ABI_VERSION 3
/** alignment (bytes) of the persistent block and of the arena */
#define MPSC_BLOCK_ALIGN 16384

/* dtypes (graph.ts DType) */
enum { MPSC_F32 = 0, MPSC_I32 = 1 };

/* persistent tensor kinds (graph.ts ValueKind); MPSC_INPUT is used in program input descs */
enum { MPSC_PARAM = 0, MPSC_STATE = 1, MPSC_OPTSTATE = 2, MPSC_GRADACC = 3, MPSC_INPUT = 4 };

/** A tensor as the table describes it. */
typedef struct mpsc_tensor_desc {
  const char* name;      /* persistent: PyTorch-style path (`fc1.weight`, `fc1.weight.exp_avg`); input: spec input name */
  int32_t dtype;         /* MPSC_F32 / MPSC_I32 */
  int32_t kind;          /* MPSC_PARAM ... MPSC_INPUT */
  int32_t rank;          /* 0 for a scalar */
  const int64_t* shape;  /* rank dims (may be NULL when rank is 0) */
  int64_t numel;         /* product of shape (1 for a scalar) */
  int64_t offset;        /* persistent tensors: byte offset in the persistent block (multiple of 64); inputs: 0 */
} mpsc_tensor_desc;

/** Step scalars (graph.ts StepScalars), computed by the host each run. */
typedef struct mpsc_scalars {
  float lr;          /* learning rate of this optimizer step */
  int32_t t;         /* 1-based optimizer step (adam bias correction) */
  uint32_t seed;     /* run seed (dropout key) */
  uint32_t counter;  /* 0-based number of train_step runs so far (dropout counter) */
} mpsc_scalars;

struct mpsc_model_desc;

/** Runtime state of one model instance (created by mpsc_create). Generated code reads these fields. */
typedef struct mpsc_ctx {
  const struct mpsc_model_desc* model;
  unsigned char* persistent;  /* persistent block (model->persistent_bytes) */
  void** tensors;             /* model->n_tensors pointers into `persistent`, in table order */
  unsigned char* arena;       /* scratch arena shared by all programs */
  int64_t arena_bytes;
  int32_t threads;            /* total threads including the caller (>= 1) */
  void* pool;                 /* runtime-private thread pool */
  void* backend;              /* what model->backend_create returned (NULL if none) */
  char error[512];            /* last error message */
} mpsc_ctx;

/**
 * Runs one program. inputs: one pointer per program input (desc order), already validated.
 * outputs: n_outputs doubles to fill (the program's scalar outputs: loss first, then metrics).
 * Returns 0, or non-zero after writing a message into ctx->error.
 */
typedef int (*mpsc_run_fn)(mpsc_ctx* ctx, const void* const* inputs, const mpsc_scalars* scalars, double* outputs);

typedef struct mpsc_program_desc {
  const char* name;                   /* "train_step" | "apply_update" | "eval" | "eval_tail" */
  int32_t batch;                      /* batch size the program was compiled for */
  int32_t n_inputs;
  const mpsc_tensor_desc* inputs;     /* kind MPSC_INPUT, Program.inputs order */
  int32_t n_outputs;
  const char* const* output_names;    /* Program.outputs names */
  int64_t arena_bytes;                /* memory plan arena size */
  int32_t n_kernels;                  /* kernel launches per run (for reports) */
  mpsc_run_fn run;
} mpsc_program_desc;

typedef struct mpsc_model_desc {
  int32_t abi_version;                /* MPSC_ABI_VERSION */
  const char* model_name;
  const char* backend;                /* "cpu", "metal-emu", "metal" */
  int32_t n_tensors;
  const mpsc_tensor_desc* tensors;    /* persistent tensors, sorted by name */
  int64_t persistent_bytes;           /* size of the persistent block (multiple of MPSC_BLOCK_ALIGN) */
  int32_t n_programs;
  const mpsc_program_desc* programs;
  /* optional backend hooks (NULL for the CPU backend): called at the end of mpsc_create /
   * start of mpsc_free; create returns ctx->backend, or NULL with ctx->error set on failure. */
  void* (*backend_create)(mpsc_ctx* ctx);
  void (*backend_free)(mpsc_ctx* ctx, void* backend);
  /* optional (NULL when the persistent tensors live in host memory): a device backend (cuda) keeps
   * them in device memory and ctx->persistent is the host copy. to_host brings the host copy up to
   * date before the host reads it; from_host tells the backend the host copy changed (upload
   * before the next run). Both return 0, or non-zero with ctx->error set. */
  int (*backend_to_host)(mpsc_ctx* ctx, void* backend);
  int (*backend_from_host)(mpsc_ctx* ctx, void* backend);
  /* optional (NULL unless the backend has a collective library: the cuda backend; runtime/ddp):
   * data-parallel training. collective_id writes the group's unique id (rank 0 makes it and the
   * launcher shares it; at most len bytes, returns the id's length or -1); collective_init joins
   * the group of nranks as rank `rank` (blocks until every rank joined); allreduce_grads averages
   * every MPSC_GRADACC tensor over the ranks in place, enqueued after the last run (asynchronous).
   * The int ones return 0 on success, non-zero with ctx->error set (e.g. "built without NCCL"). */
  int32_t (*backend_collective_id)(mpsc_ctx* ctx, void* backend, unsigned char* id, int32_t len);
  int (*backend_collective_init)(mpsc_ctx* ctx, void* backend, int32_t nranks, int32_t rank, const unsigned char* id, int32_t len);
  int (*backend_allreduce_grads)(mpsc_ctx* ctx, void* backend);
} mpsc_model_desc;

/* ------------------------------------------------------------------ implemented by the generated model */
const mpsc_model_desc* mpsc_model(void);

/* ------------------------------------------------------------------ implemented by the runtime (mpsc_runtime.cc) */

/** Creates an instance: allocates the persistent block (zeroed) and the arena, starts threads-1 workers.
 *  threads <= 0 means all hardware threads. Returns NULL on failure (bad ABI version, out of memory);
 *  if err is non-NULL a message is written there (errlen bytes incl. NUL). */
mpsc_ctx* mpsc_create(const mpsc_model_desc* model, int32_t threads, char* err, size_t errlen);

/** Index of a persistent tensor by name, or -1. */
int32_t mpsc_tensor_index(const mpsc_model_desc* model, const char* name);
/** Pointer to a persistent tensor's data (numel * 4 bytes), or NULL for an unknown name. */
void* mpsc_tensor_ptr(mpsc_ctx* ctx, const char* name);
/** Makes ctx->persistent current (a device backend downloads its copy). Call before reading tensors. 0 or non-zero. */
int mpsc_tensors_to_host(mpsc_ctx* ctx);
/** Says the host changed ctx->persistent (a device backend uploads it before the next run). Call after writing
 *  tensors, having called mpsc_tensors_to_host before. 0 or non-zero. */
int mpsc_tensors_from_host(mpsc_ctx* ctx);
/** Index of a program by name, or -1 (apply_update / eval_tail may be absent). */
int32_t mpsc_program_index(const mpsc_model_desc* model, const char* name);
/** Runs program `program` (an index from mpsc_program_index). Returns 0 or non-zero (see mpsc_last_error).
 *  outputs may be NULL: then a device backend does not wait for the step to finish. */
int mpsc_run(mpsc_ctx* ctx, int32_t program, const void* const* inputs, const mpsc_scalars* scalars, double* outputs);
const char* mpsc_last_error(const mpsc_ctx* ctx);
/** Data-parallel collectives of a backend that has them (cuda built with NCCL); on other backends they
 *  fail with a message (the host then all-reduces through read / write: runtime/ddp). collective_id returns
 *  the id's length (bytes written to id) or -1; the others 0 or non-zero (see mpsc_last_error). */
int32_t mpsc_collective_id(mpsc_ctx* ctx, unsigned char* id, int32_t len);
int mpsc_collective_init(mpsc_ctx* ctx, int32_t nranks, int32_t rank, const unsigned char* id, int32_t len);
int mpsc_allreduce_grads(mpsc_ctx* ctx);
/** Stops the workers and frees everything. NULL is a no-op. */
void mpsc_free(mpsc_ctx* ctx);

/** Work function for mpsc_parallel_for: process [begin, end). */
typedef void (*mpsc_range_fn)(void* arg, int64_t begin, int64_t end);
/**
 * Splits [0, n) into at most ctx->threads contiguous chunks (chunk t = [t*n/T, (t+1)*n/T))
 * and runs them on the pool (the caller runs chunk 0), returning when all are done.
 * Runs fn(arg, 0, n) inline when ctx is NULL, when n < 2, when ctx->threads == 1, or when
 * called from inside a parallel region (no nesting). The chunking is deterministic.
 */
void mpsc_parallel_for(mpsc_ctx* ctx, int64_t n, mpsc_range_fn fn, void* arg);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MPSC_MODEL_H */
