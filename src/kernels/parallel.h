// The one threading helper: OpenMP behind a small interface.
//
// parallel_for splits [0, n) into one contiguous chunk per thread (static schedule), so which thread
// does which element never depends on timing. Work smaller than `grain` runs on the calling thread.
#pragma once

#include <cstdint>
#include <exception>

namespace attend::kernels {

int num_threads();
// Sets the threads used by every kernel and by the GEMM backend. n <= 0 means all cores.
void set_num_threads(int n);
// Inside parallel_for: which of its chunks (0 .. num_threads()−1) the calling thread runs; 0 outside.
// Kernels use it to pick a per-thread slice of their workspace.
int thread_index();

// The grain for row-wise kernels: enough rows that a thread gets about 16k elements to pay for waking it.
inline int64_t row_grain(int64_t row_length) {
  const int64_t rows = 16384 / (row_length > 1 ? row_length : 1);
  return rows > 1 ? rows : 1;
}

// An exception thrown by `fn` on any thread is rethrown on the calling thread once all chunks are done
// (an exception escaping an OpenMP region would end the process). Kernels never throw; the tokenizers'
// and data loaders' work can.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  int threads = num_threads();
  if (threads <= 1 || n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = n / (grain > 0 ? grain : 1);
  if (chunks > threads) chunks = threads;
  std::exception_ptr error;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    try {
      fn(n * c / chunks, n * (c + 1) / chunks);
    } catch (...) {
#pragma omp critical(attend_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace attend::kernels
