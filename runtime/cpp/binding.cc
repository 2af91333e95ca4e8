/*
 * binding.cc: node-addon-api (Node-API 8) binding over the C ABI of mpsc_model.h.
 * Compiled together with one generated model and mpsc_runtime.cc into one addon.
 *
 * JS API (runtime/native/native_session.ts is the only caller):
 *   describe(): { abi, model, backend, persistentBytes,
 *                 tensors: [{ name, dtype: 'f32'|'i32', kind, shape }],
 *                 programs: [{ name, batch, arenaBytes, kernels, inputs: [{ name, dtype, shape }], outputs: [names] }] }
 *   create(threads: number): handle            (throws Error on failure)
 *   read(handle, name): Float32Array           (a copy)
 *   write(handle, name, data: Float32Array)    (exact length required)
 *   run(handle, program: string, inputs: (Float32Array|Int32Array)[], scalars: {lr,t,seed,counter}): Float64Array
 *   free(handle)                               (idempotent; the GC also frees)
 * Every argument is checked (type, dtype, length) before native code touches the data;
 * problems throw a JS Error. Input batches are passed by pointer, never copied.
 */
#define NAPI_VERSION 8
#include <napi.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mpsc_model.h"

namespace {

struct Handle {
  mpsc_ctx* ctx = nullptr;
};

const char* kind_name(int32_t k) {
  switch (k) {
    case MPSC_PARAM: return "param";
    case MPSC_STATE: return "state";
    case MPSC_OPTSTATE: return "optstate";
    case MPSC_GRADACC: return "gradacc";
    default: return "input";
  }
}

Napi::Object tensor_obj(Napi::Env env, const mpsc_tensor_desc& t) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", t.name);
  o.Set("dtype", t.dtype == MPSC_I32 ? "i32" : "f32");
  o.Set("kind", kind_name(t.kind));
  Napi::Array shape = Napi::Array::New(env, t.rank);
  for (int i = 0; i < t.rank; i++) shape.Set(i, Napi::Number::New(env, (double)t.shape[i]));
  o.Set("shape", shape);
  return o;
}

Napi::Value Describe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const mpsc_model_desc* m = mpsc_model();
  Napi::Object o = Napi::Object::New(env);
  o.Set("abi", m->abi_version);
  o.Set("model", m->model_name);
  o.Set("backend", m->backend);
  o.Set("persistentBytes", Napi::Number::New(env, (double)m->persistent_bytes));
  Napi::Array ts = Napi::Array::New(env, m->n_tensors);
  for (int i = 0; i < m->n_tensors; i++) ts.Set(i, tensor_obj(env, m->tensors[i]));
  o.Set("tensors", ts);
  Napi::Array ps = Napi::Array::New(env, m->n_programs);
  for (int i = 0; i < m->n_programs; i++) {
    const mpsc_program_desc& p = m->programs[i];
    Napi::Object po = Napi::Object::New(env);
    po.Set("name", p.name);
    po.Set("batch", p.batch);
    po.Set("arenaBytes", Napi::Number::New(env, (double)p.arena_bytes));
    po.Set("kernels", p.n_kernels);
    Napi::Array ins = Napi::Array::New(env, p.n_inputs);
    for (int j = 0; j < p.n_inputs; j++) ins.Set(j, tensor_obj(env, p.inputs[j]));
    po.Set("inputs", ins);
    Napi::Array outs = Napi::Array::New(env, p.n_outputs);
    for (int j = 0; j < p.n_outputs; j++) outs.Set(j, p.output_names[j]);
    po.Set("outputs", outs);
    ps.Set(i, po);
  }
  o.Set("programs", ps);
  return o;
}

Handle* get_handle(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsExternal()) throw Napi::TypeError::New(info.Env(), "mpsc: expected a model handle as the first argument");
  Handle* h = info[0].As<Napi::External<Handle>>().Data();
  if (!h || !h->ctx) throw Napi::Error::New(info.Env(), "mpsc: the model handle was already freed");
  return h;
}

std::string get_string(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (info.Length() <= i || !info[i].IsString()) throw Napi::TypeError::New(info.Env(), std::string("mpsc: expected a string ") + what);
  return info[i].As<Napi::String>().Utf8Value();
}

Napi::Value Create(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int32_t threads = 0;
  if (info.Length() >= 1 && !info[0].IsUndefined()) {
    if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "mpsc: create(threads) expects a number");
    threads = info[0].As<Napi::Number>().Int32Value();
  }
  char err[512] = {0};
  mpsc_ctx* ctx = mpsc_create(mpsc_model(), threads, err, sizeof err);
  if (!ctx) throw Napi::Error::New(env, std::string("mpsc: ") + err);
  Handle* h = new Handle();
  h->ctx = ctx;
  return Napi::External<Handle>::New(env, h, [](Napi::Env, Handle* hh) {
    mpsc_free(hh->ctx);
    delete hh;
  });
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  if (info.Length() >= 1 && info[0].IsExternal()) {
    Handle* h = info[0].As<Napi::External<Handle>>().Data();
    if (h && h->ctx) {
      mpsc_free(h->ctx);
      h->ctx = nullptr;
    }
  }
  return info.Env().Undefined();
}

int32_t tensor_or_throw(Napi::Env env, Handle* h, const std::string& name) {
  int32_t i = mpsc_tensor_index(h->ctx->model, name.c_str());
  if (i < 0) throw Napi::Error::New(env, "mpsc: the model has no persistent tensor named '" + name + "'");
  return i;
}

Napi::Value Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = get_handle(info);
  std::string name = get_string(info, 1, "tensor name");
  int32_t i = tensor_or_throw(env, h, name);
  const mpsc_tensor_desc& t = h->ctx->model->tensors[i];
  if (mpsc_tensors_to_host(h->ctx) != 0) throw Napi::Error::New(env, std::string("mpsc: read('") + name + "') failed: " + mpsc_last_error(h->ctx));
  Napi::Float32Array out = Napi::Float32Array::New(env, (size_t)t.numel);
  std::memcpy(out.Data(), h->ctx->tensors[i], (size_t)t.numel * 4);
  return out;
}

Napi::Value Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = get_handle(info);
  std::string name = get_string(info, 1, "tensor name");
  int32_t i = tensor_or_throw(env, h, name);
  const mpsc_tensor_desc& t = h->ctx->model->tensors[i];
  if (info.Length() < 3 || !info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw Napi::TypeError::New(env, "mpsc: write('" + name + "', data) expects a Float32Array");
  Napi::Float32Array a = info[2].As<Napi::Float32Array>();
  if ((int64_t)a.ElementLength() != t.numel)
    throw Napi::Error::New(env, "mpsc: write('" + name + "'): got " + std::to_string(a.ElementLength()) + " elements, the tensor has " + std::to_string(t.numel));
  if (mpsc_tensors_to_host(h->ctx) != 0) throw Napi::Error::New(env, std::string("mpsc: write('") + name + "') failed: " + mpsc_last_error(h->ctx));
  std::memcpy(h->ctx->tensors[i], a.Data(), (size_t)t.numel * 4);
  if (mpsc_tensors_from_host(h->ctx) != 0) throw Napi::Error::New(env, std::string("mpsc: write('") + name + "') failed: " + mpsc_last_error(h->ctx));
  return env.Undefined();
}

double get_num(Napi::Env env, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw Napi::TypeError::New(env, std::string("mpsc: scalars.") + key + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

Napi::Value Run(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = get_handle(info);
  std::string pname = get_string(info, 1, "program name");
  int32_t pi = mpsc_program_index(h->ctx->model, pname.c_str());
  if (pi < 0) throw Napi::Error::New(env, "mpsc: the model has no program '" + pname + "'");
  const mpsc_program_desc& p = h->ctx->model->programs[pi];
  if (info.Length() < 3 || !info[2].IsArray()) throw Napi::TypeError::New(env, "mpsc: run(" + pname + "): inputs must be an array of typed arrays");
  Napi::Array arr = info[2].As<Napi::Array>();
  if ((int32_t)arr.Length() != p.n_inputs)
    throw Napi::Error::New(env, "mpsc: run(" + pname + "): got " + std::to_string(arr.Length()) + " inputs, the program takes " + std::to_string(p.n_inputs));
  std::vector<const void*> ptrs((size_t)p.n_inputs + 1, nullptr);
  for (int j = 0; j < p.n_inputs; j++) {
    const mpsc_tensor_desc& d = p.inputs[j];
    Napi::Value v = arr.Get((uint32_t)j);
    napi_typedarray_type want = d.dtype == MPSC_I32 ? napi_int32_array : napi_float32_array;
    const char* wantName = d.dtype == MPSC_I32 ? "Int32Array" : "Float32Array";
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != want)
      throw Napi::TypeError::New(env, "mpsc: run(" + pname + "): input '" + d.name + "' must be an " + wantName);
    Napi::TypedArray ta = v.As<Napi::TypedArray>();
    if ((int64_t)ta.ElementLength() != d.numel)
      throw Napi::Error::New(env, "mpsc: run(" + pname + "): input '" + d.name + "' has " + std::to_string(ta.ElementLength()) +
                                      " elements, expected " + std::to_string(d.numel) + " (batch " + std::to_string(p.batch) + ")");
    if (d.dtype == MPSC_I32) ptrs[j] = v.As<Napi::Int32Array>().Data();
    else ptrs[j] = v.As<Napi::Float32Array>().Data();
  }
  if (info.Length() < 4 || !info[3].IsObject()) throw Napi::TypeError::New(env, "mpsc: run(" + pname + "): scalars must be an object {lr, t, seed, counter}");
  Napi::Object so = info[3].As<Napi::Object>();
  mpsc_scalars s;
  s.lr = (float)get_num(env, so, "lr");
  s.t = (int32_t)get_num(env, so, "t");
  s.seed = (uint32_t)(int64_t)get_num(env, so, "seed");
  s.counter = (uint32_t)(int64_t)get_num(env, so, "counter");
  // run(handle, program, inputs, scalars, read = true): read false passes outputs = NULL (an asynchronous
  // backend then does not wait for the step) and returns NaN outputs
  const bool read = info.Length() < 5 || !info[4].IsBoolean() || info[4].As<Napi::Boolean>().Value();
  Napi::Float64Array out = Napi::Float64Array::New(env, (size_t)p.n_outputs);
  for (int j = 0; j < p.n_outputs; j++) out[j] = std::numeric_limits<double>::quiet_NaN();
  int rc = mpsc_run(h->ctx, pi, ptrs.data(), &s, p.n_outputs && read ? out.Data() : nullptr);
  if (rc != 0) throw Napi::Error::New(env, std::string("mpsc: run(") + pname + ") failed: " + mpsc_last_error(h->ctx));
  return out;
}

// collectiveId(handle): the backend's collective unique id (a Uint8Array) for rank 0 to share
Napi::Value CollectiveId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = get_handle(info);
  unsigned char id[512];
  const int32_t n = mpsc_collective_id(h->ctx, id, (int32_t)sizeof id);
  if (n < 0) throw Napi::Error::New(env, std::string("mpsc: collectiveId failed: ") + mpsc_last_error(h->ctx));
  Napi::Uint8Array out = Napi::Uint8Array::New(env, (size_t)n);
  std::memcpy(out.Data(), id, (size_t)n);
  return out;
}

// collectiveInit(handle, nranks, rank, id: Uint8Array): join the group (blocks until every rank joined)
Napi::Value CollectiveInit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = get_handle(info);
  if (info.Length() < 4 || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsTypedArray() ||
      info[3].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Napi::TypeError::New(env, "mpsc: collectiveInit(handle, nranks, rank, id: Uint8Array)");
  Napi::Uint8Array id = info[3].As<Napi::Uint8Array>();
  const int rc = mpsc_collective_init(h->ctx, info[1].As<Napi::Number>().Int32Value(), info[2].As<Napi::Number>().Int32Value(), id.Data(), (int32_t)id.ElementLength());
  if (rc != 0) throw Napi::Error::New(env, std::string("mpsc: collectiveInit failed: ") + mpsc_last_error(h->ctx));
  return env.Undefined();
}

// allreduceGrads(handle): average every gradient accumulator over the ranks (enqueued after the last run)
Napi::Value AllreduceGrads(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = get_handle(info);
  if (mpsc_allreduce_grads(h->ctx) != 0) throw Napi::Error::New(env, std::string("mpsc: allreduceGrads failed: ") + mpsc_last_error(h->ctx));
  return env.Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("describe", Napi::Function::New(env, Describe));
  exports.Set("create", Napi::Function::New(env, Create));
  exports.Set("free", Napi::Function::New(env, Free));
  exports.Set("read", Napi::Function::New(env, Read));
  exports.Set("write", Napi::Function::New(env, Write));
  exports.Set("run", Napi::Function::New(env, Run));
  exports.Set("collectiveId", Napi::Function::New(env, CollectiveId));
  exports.Set("collectiveInit", Napi::Function::New(env, CollectiveInit));
  exports.Set("allreduceGrads", Napi::Function::New(env, AllreduceGrads));
  return exports;
}

}  // namespace

NODE_API_MODULE(mpsc_model, Init)
