// mpsc_nccl.cpp: the NCCL calls of the CUDA backend (see mpsc_nccl.h). Compiled only where CMake
// finds nccl.h and libnccl; every NCCL status is checked and turned into a message naming the call.
#include "mpsc_nccl.h"
#include <nccl.h>
#include <cstdio>
#include <cstring>

struct MpscNccl {
  ncclComm_t comm = nullptr;
  int nranks = 0, rank = 0;
  bool failed = false;  // a call failed: destroy aborts the communicator instead of waiting for the others
};

static bool nccl_ok(ncclResult_t r, ncclComm_t comm, const char* what, char* err, size_t errlen) {
  if (r == ncclSuccess) return true;
  const char* detail = comm ? ncclGetLastError(comm) : nullptr;
  std::snprintf(err, errlen, "NCCL error in %s: %s%s%s", what, ncclGetErrorString(r), detail && detail[0] ? ": " : "", detail ? detail : "");
  return false;
}

void mpsc_nccl_version(char* out, size_t outlen) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) v = 0;
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9
  std::snprintf(out, outlen, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
}

int mpsc_nccl_unique_id(unsigned char* out, int len, char* err, size_t errlen) {
  ncclUniqueId id;
  if (len < (int)sizeof id.internal) {
    std::snprintf(err, errlen, "the unique id buffer has %d bytes, NCCL needs %d", len, (int)sizeof id.internal);
    return -1;
  }
  if (!nccl_ok(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId", err, errlen)) return -1;
  std::memcpy(out, id.internal, sizeof id.internal);
  return (int)sizeof id.internal;
}

MpscNccl* mpsc_nccl_init(int nranks, int rank, const unsigned char* id, int len, char* err, size_t errlen) {
  ncclUniqueId uid;
  if (len != (int)sizeof uid.internal) {
    std::snprintf(err, errlen, "the unique id has %d bytes, NCCL's has %d (ranks built against different NCCL versions?)", len, (int)sizeof uid.internal);
    return nullptr;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    std::snprintf(err, errlen, "rank %d of %d is not a rank of the group", rank, nranks);
    return nullptr;
  }
  std::memcpy(uid.internal, id, sizeof uid.internal);
  MpscNccl* c = new MpscNccl();
  c->nranks = nranks;
  c->rank = rank;
  if (!nccl_ok(ncclCommInitRank(&c->comm, nranks, uid, rank), nullptr, "ncclCommInitRank", err, errlen)) {
    delete c;
    return nullptr;
  }
  return c;
}

bool mpsc_nccl_allreduce_avg(MpscNccl* c, float* const* ptrs, const int64_t* counts, int n, cudaStream_t st, char* err, size_t errlen) {
  if (!c || !c->comm) {
    std::snprintf(err, errlen, "the NCCL communicator was not created (collectiveInit first)");
    return false;
  }
  if (!nccl_ok(ncclGroupStart(), c->comm, "ncclGroupStart", err, errlen)) {
    c->failed = true;
    return false;
  }
  bool ok = true;
  for (int i = 0; ok && i < n; ++i)
    ok = nccl_ok(ncclAllReduce(ptrs[i], ptrs[i], (size_t)counts[i], ncclFloat32, ncclAvg, c->comm, st), c->comm, "ncclAllReduce", err, errlen);
  // the group is closed even after a failed call (NCCL requires the matching ncclGroupEnd)
  const ncclResult_t end = ncclGroupEnd();
  if (ok) ok = nccl_ok(end, c->comm, "ncclGroupEnd", err, errlen);
  if (!ok) c->failed = true;
  return ok;
}

void mpsc_nccl_destroy(MpscNccl* c) {
  if (!c) return;
  if (c->comm) {
    if (c->failed) ncclCommAbort(c->comm);
    else ncclCommDestroy(c->comm);
  }
  delete c;
}
