/*
 * mpsc_parallel.hpp: C++ convenience over mpsc_parallel_for (mpsc_model.h) for generated kernels.
 *
 *   mpsc::parallel_for(ctx, n, [&](int64_t begin, int64_t end) { ... });
 *
 * Same deterministic chunking as mpsc_parallel_for. Pass ctx = nullptr to run inline.
 */
#ifndef MPSC_PARALLEL_HPP
#define MPSC_PARALLEL_HPP

#include <type_traits>

#include "mpsc_model.h"

namespace mpsc {

template <class F>
inline void parallel_for(mpsc_ctx* ctx, int64_t n, F&& f) {
  if (n <= 0) return;
  using Fn = typename std::remove_reference<F>::type;
  auto thunk = [](void* arg, int64_t b, int64_t e) { (*static_cast<Fn*>(arg))(b, e); };
  mpsc_parallel_for(ctx, n, thunk, const_cast<void*>(static_cast<const void*>(&f)));
}

/** the context's thread count (1 for nullptr): use it to size per-chunk partial buffers,
 *  then parallel_for over that many chunks (chunk results are combined in index order) */
inline int64_t threads(const mpsc_ctx* ctx) { return ctx && ctx->threads > 1 ? ctx->threads : 1; }

}  // namespace mpsc

#endif
