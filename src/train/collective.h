// Data parallelism's collectives on a Communicator, each in a fixed order so that every rank computes the
// same numbers whatever the timing: small sums (target counts, losses, norms) and broadcasts, and the
// gradient reduction in buckets that starts while backward is still running.
//
// The gradient buffer is cut into buckets from its end (backward finishes the last layers first); each
// bucket into size() chunks, chunk r owned by rank r. A bucket is reduced when backward reports that every
// gradient at or past its start is final: each rank sends chunk p to rank p and receives its own chunk from
// every rank, and sums the contributions in rank order (0, 1, …, N−1: the same additions on every rank and
// on every run). Then, without ZeRO, each owner sends its summed chunk to every other rank (an all-gather);
// with ZeRO-1 the owner keeps it, updates its chunks' parameters with its share of the optimizer state and
// sends the new parameters instead (gather_values). Either way each rank sends 2(N−1)/N of the buffer per
// step, what a ring all-reduce sends, in 2(N−1) messages per bucket.
#pragma once

#include <attend/communicator.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace attend::train {

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end) of a buffer
  int64_t size() const { return end - begin; }
};

// Σ over ranks of `values`, added in rank order; every rank gets it.
void sum_in_rank_order(Communicator& group, std::span<double> values);
// Root's bytes to every rank (the same size everywhere).
void broadcast(Communicator& group, std::span<std::byte> data, int root = 0);
void broadcast(Communicator& group, std::span<float> data, int root = 0);
std::string broadcast(Communicator& group, const std::string& text, int root = 0);
// A run of floats to one rank, and from one (the receiver knows the length), waited for.
void send_floats(Communicator& group, int peer, std::span<float> data);
void receive_floats(Communicator& group, int peer, std::span<float> data);

struct ReducerOptions {
  bool zero = false;             // ZeRO-1: each rank keeps only its own chunks' sums (and optimizer state)
  bool bf16_wire = false;        // gradients travel (and are summed from) bf16, half the bytes
  int64_t bucket_elements = 0;   // floats per bucket; 0: one bucket (no overlap with backward)
};

struct ReducerStats {
  int64_t bytes_sent = 0;   // this rank, since the last take_stats
  double wait_s = 0.0;      // time finish() and gather_values() waited: communication not hidden
  double overlap_s = 0.0;   // time spent moving transfers on from backward's hook (ready)
};

class GradientReducer {
 public:
  GradientReducer(Communicator& group, int64_t elements, const ReducerOptions& options);
  ~GradientReducer();

  // The ranges of the buffer that `rank` owns: chunk `rank` of every bucket, in buffer order.
  std::vector<Range> owned_by(int rank) const;
  const std::vector<Range>& owned() const { return owned_; }
  int64_t buckets() const;

  // A step's reduction of `grads` (the gradient buffer, as many floats as the constructor's elements).
  void start(std::span<float> grads);
  // Every gradient at or past `from` is final: the buckets that lie there start, and the transfers under way
  // move on. Backward calls it after each block; ready(0) after the whole backward.
  void ready(int64_t from);
  // Waits for every bucket. Then grads holds the sum over ranks of everyone's gradients: everywhere, or with
  // ZeRO on this rank's owned ranges (the rest is left as it was).
  void finish();
  // ZeRO-1, after the update: every rank's owned ranges of `values` to every other rank.
  void gather_values(std::span<float> values);

  ReducerStats take_stats();

 private:
  struct Bucket;
  void launch(size_t b);
  bool advance(size_t b);  // true when bucket b has nothing left to do
  void sum_own_chunk(size_t b);

  Communicator& group_;
  ReducerOptions options_;
  int64_t elements_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<Range> owned_;
  std::span<float> grads_;
  size_t launched_ = 0;  // buckets are launched from the buffer's end: buckets_[0] is the last range
  ReducerStats stats_;
};

}  // namespace attend::train
