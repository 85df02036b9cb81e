// How the decode matmuls (gemv.cpp, quant_gemv.cpp) share a weight's output channels between threads.
#pragma once

#include "kernels/isa/isa.h"
#include "kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace attend::kernels::ATTEND_ISA {

// Runs channels(o0, o1) over [0, OC): each thread first takes its own contiguous share of seven eighths of the
// channels (one long stream through its weight rows), then the last eighth is shared in chunks of 32 as the
// threads free up. The cores stream at rates that differ from call to call, and with an even split one waited for
// the other for 15% of the gemv time; smaller chunks restart the prefetchers' streams too often
// (docs/BENCHMARKS.md). Every channel is computed the same way whichever thread takes it, so the result does not
// depend on the timing. Below 512 channels one thread is faster.
// `unit` > 1: channels(u0, u1) over units of that many channels each (groups of repacked rows), the same shares.
// `prologue()` runs first on each thread that takes a share (work each thread does for itself, such as quantizing
// the input, without a parallel region of its own).
struct NoPrologue {
  void operator()() const {}
};
template <typename F, typename P = NoPrologue>
void split_channels(int64_t OC, F&& channels, int64_t unit = 1, P&& prologue = P{}) {
  const int threads = OC * unit >= 512 ? num_threads() : 1;
  const int64_t own = OC * 7 / 8 / threads;
  const int64_t kChunk = std::max<int64_t>(1, 32 / unit);
  std::atomic<int64_t> next{own * threads};
  parallel_for(threads, 1, [&](int64_t t, int64_t) {
    prologue();
    channels(t * own, (t + 1) * own);
    for (int64_t o; (o = next.fetch_add(kChunk, std::memory_order_relaxed)) < OC;) channels(o, std::min(OC, o + kChunk));
  });
}

}  // namespace attend::kernels::ATTEND_ISA
