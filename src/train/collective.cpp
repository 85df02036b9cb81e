#include "train/collective.h"

#include "kernels/convert.h"

#include <attend/error.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace attend::train {

namespace {

// Tags of the messages: a small operation's, and per bucket its reduce and gather phases and the parameter
// gather. Messages with one tag between two ranks arrive in the order they were sent, so operations that
// follow each other may share a tag.
constexpr int kSmallTag = 1, kBroadcastTag = 2, kFloatsTag = 4, kBucketTag = 16;

// Messages are counted in int by MPI: long runs of floats go in pieces of 256 MiB.
template <typename F>
void for_each_piece(std::span<float> data, F&& f) {
  constexpr size_t kPiece = size_t{64} << 20;
  for (size_t at = 0; at < data.size(); at += kPiece) f(data.subspan(at, std::min(kPiece, data.size() - at)));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void sum_in_rank_order(Communicator& group, std::span<double> values) {
  const int n = group.size(), me = group.rank();
  if (n == 1) return;
  std::vector<double> all(values.size() * n);
  std::copy(values.begin(), values.end(), all.begin() + me * values.size());
  std::vector<Communicator::Request> pending;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    pending.push_back(group.send(p, std::as_bytes(values), kSmallTag));
    pending.push_back(group.receive(p, std::as_writable_bytes(std::span(all).subspan(p * values.size(), values.size())),
                                    kSmallTag));
  }
  for (Communicator::Request r : pending) group.wait(r);
  for (size_t i = 0; i < values.size(); ++i) {
    double sum = all[i];
    for (int p = 1; p < n; ++p) sum += all[p * values.size() + i];
    values[i] = sum;
  }
}

void broadcast(Communicator& group, std::span<std::byte> data, int root) {
  const int n = group.size(), me = group.rank();
  if (n == 1) return;
  if (me != root) {
    group.wait(group.receive(root, data, kBroadcastTag));
    return;
  }
  std::vector<Communicator::Request> pending;
  for (int p = 0; p < n; ++p)
    if (p != root) pending.push_back(group.send(p, data, kBroadcastTag));
  for (Communicator::Request r : pending) group.wait(r);
}

void broadcast(Communicator& group, std::span<float> data, int root) {
  for_each_piece(data, [&](std::span<float> piece) { broadcast(group, std::as_writable_bytes(piece), root); });
}

void send_floats(Communicator& group, int peer, std::span<float> data) {
  for_each_piece(data, [&](std::span<float> piece) { group.wait(group.send(peer, std::as_bytes(piece), kFloatsTag)); });
}

void receive_floats(Communicator& group, int peer, std::span<float> data) {
  for_each_piece(data, [&](std::span<float> piece) {
    group.wait(group.receive(peer, std::as_writable_bytes(piece), kFloatsTag));
  });
}

std::string broadcast(Communicator& group, const std::string& text, int root) {
  uint64_t size = text.size();
  broadcast(group, std::as_writable_bytes(std::span(&size, 1)), root);
  std::string out = group.rank() == root ? text : std::string(size, '\0');
  broadcast(group, std::as_writable_bytes(std::span(out.data(), out.size())), root);
  return out;
}


struct GradientReducer::Bucket {
  Range range;
  std::vector<int64_t> cut;  // chunk p is [cut[p], cut[p + 1])
  enum class Phase { Waiting, Reducing, Gathering, Done } phase = Phase::Waiting;
  std::vector<Communicator::Request> sends, receives;
  std::vector<float> incoming;      // fp32 wire: every other rank's contribution to my chunk, in rank order
  std::vector<uint16_t> outgoing16, incoming16;  // bf16 wire: the bucket rounded; the others' chunks
  std::vector<float> acc, widened;                // bf16 wire: the sum, and one contribution widened
  Range chunk(int p) const { return {cut[p], cut[p + 1]}; }
};

GradientReducer::GradientReducer(Communicator& group, int64_t elements, const ReducerOptions& options)
    : group_(group), options_(options), elements_(elements) {
  check(elements > 0, "data parallel: the model has no gradients to reduce");
  const int n = group.size();
  const int64_t per_bucket = options.bucket_elements > 0 ? options.bucket_elements : elements;
  // Chunks start at multiples of 16 floats (a cache line) where the bucket is long enough.
  for (int64_t hi = elements; hi > 0;) {
    const int64_t lo = std::max<int64_t>(0, hi - per_bucket);
    Bucket b;
    b.range = {lo, hi};
    for (int p = 0; p <= n; ++p) {
      int64_t at = lo + (hi - lo) * p / n;
      if (p > 0 && p < n) at = std::min(hi, lo + (at - lo + 15) / 16 * 16);
      b.cut.push_back(at);
    }
    buckets_.push_back(std::move(b));
    hi = lo;
  }
  owned_ = owned_by(group.rank());
}

GradientReducer::~GradientReducer() = default;

int64_t GradientReducer::buckets() const { return static_cast<int64_t>(buckets_.size()); }

std::vector<Range> GradientReducer::owned_by(int rank) const {
  std::vector<Range> out;
  for (size_t b = buckets_.size(); b-- > 0;)
    if (buckets_[b].chunk(rank).size() > 0) out.push_back(buckets_[b].chunk(rank));
  return out;
}

void GradientReducer::start(std::span<float> grads) {
  check(static_cast<int64_t>(grads.size()) == elements_, "data parallel: a gradient buffer of {} floats, expected {}",
        grads.size(), elements_);
  grads_ = grads;
  launched_ = 0;
  for (Bucket& b : buckets_) b.phase = Bucket::Phase::Waiting;
}

void GradientReducer::launch(size_t index) {
  Bucket& b = buckets_[index];
  const int n = group_.size(), me = group_.rank();
  const int tag = kBucketTag + 3 * static_cast<int>(index);
  const Range mine = b.chunk(me);
  b.sends.clear();
  b.receives.clear();
  if (options_.bf16_wire) {
    b.outgoing16.resize(b.range.size());
    kernels::float_to_bf16(b.outgoing16.data(), grads_.data() + b.range.begin, b.range.size());
    b.incoming16.resize(mine.size() * (n - 1));
  } else {
    b.incoming.resize(mine.size() * (n - 1));
  }
  for (int p = 0, slot = 0; p < n; ++p) {
    if (p == me) continue;
    const Range theirs = b.chunk(p);
    if (options_.bf16_wire) {
      b.sends.push_back(group_.send(
          p, std::as_bytes(std::span<const uint16_t>(b.outgoing16).subspan(theirs.begin - b.range.begin, theirs.size())), tag));
      b.receives.push_back(group_.receive(
          p, std::as_writable_bytes(std::span(b.incoming16).subspan(slot * mine.size(), mine.size())), tag));
    } else {
      b.sends.push_back(group_.send(p, std::as_bytes(std::span<const float>(grads_).subspan(theirs.begin, theirs.size())), tag));
      b.receives.push_back(
          group_.receive(p, std::as_writable_bytes(std::span(b.incoming).subspan(slot * mine.size(), mine.size())), tag));
    }
    stats_.bytes_sent += theirs.size() * (options_.bf16_wire ? 2 : 4);
    ++slot;
  }
  b.phase = Bucket::Phase::Reducing;
}

// My chunk = Σ_p contribution_p in rank order: acc = c₀, then acc += c₁, …, c_{N−1}, one pass over memory per
// contribution and no allocation (acc is my chunk itself when I am rank 0, else rank 0's received copy). On
// the bf16 wire every contribution (mine too) is its bf16 rounding, and the sum is rounded once more, as the
// others receive it.
void GradientReducer::sum_own_chunk(size_t index) {
  Bucket& b = buckets_[index];
  const int n = group_.size(), me = group_.rank();
  const Range mine = b.chunk(me);
  const int64_t len = mine.size();
  float* out = grads_.data() + mine.begin;
  auto add = [len](float* acc, const float* c) {
    for (int64_t i = 0; i < len; ++i) acc[i] += c[i];
  };
  if (!options_.bf16_wire) {
    // Contributions: mine is `out`; rank p's (p ≠ me) is slot p − (p > me) of incoming.
    auto contribution = [&](int p) { return p == me ? out : b.incoming.data() + (p - (p > me)) * len; };
    float* acc = contribution(0);
    for (int p = 1; p < n; ++p) add(acc, contribution(p));
    if (acc != out) std::copy(acc, acc + len, out);
    return;
  }
  b.acc.resize(len);
  b.widened.resize(len);
  auto widen = [&](int p, float* into) {
    const uint16_t* c = p == me ? b.outgoing16.data() + (mine.begin - b.range.begin)
                                : b.incoming16.data() + (p - (p > me)) * len;
    kernels::bf16_to_float(into, c, len);
  };
  widen(0, b.acc.data());
  for (int p = 1; p < n; ++p) {
    widen(p, b.widened.data());
    add(b.acc.data(), b.widened.data());
  }
  std::vector<uint16_t>& rounded = b.outgoing16;  // the reduce phase's sends are done: reused for the gather
  rounded.resize(len);
  kernels::float_to_bf16(rounded.data(), b.acc.data(), len);
  kernels::bf16_to_float(out, rounded.data(), len);
}

bool GradientReducer::advance(size_t index) {
  Bucket& b = buckets_[index];
  auto settle = [&](std::vector<Communicator::Request>& requests) {
    std::erase_if(requests, [&](Communicator::Request r) { return group_.test(r); });
    return requests.empty();
  };
  const int n = group_.size(), me = group_.rank();
  const int tag = kBucketTag + 3 * static_cast<int>(index) + 1;
  switch (b.phase) {
    case Bucket::Phase::Waiting: return false;
    case Bucket::Phase::Reducing: {
      // The gather writes into the chunks this rank is still sending: it starts when the sends are done.
      const bool received = settle(b.receives), sent = settle(b.sends);
      if (!received || !sent) return false;
      sum_own_chunk(index);
      if (options_.zero) {
        b.phase = Bucket::Phase::Done;
        return true;
      }
      const Range mine = b.chunk(me);
      if (options_.bf16_wire) b.incoming16.resize(b.range.size());  // outgoing16 holds my rounded sum
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        const Range theirs = b.chunk(p);
        if (options_.bf16_wire) {
          b.sends.push_back(group_.send(p, std::as_bytes(std::span<const uint16_t>(b.outgoing16)), tag));
          b.receives.push_back(group_.receive(
              p, std::as_writable_bytes(std::span(b.incoming16).subspan(theirs.begin - b.range.begin, theirs.size())), tag));
        } else {
          b.sends.push_back(group_.send(p, std::as_bytes(std::span<const float>(grads_).subspan(mine.begin, mine.size())), tag));
          b.receives.push_back(
              group_.receive(p, std::as_writable_bytes(grads_.subspan(theirs.begin, theirs.size())), tag));
        }
        stats_.bytes_sent += mine.size() * (options_.bf16_wire ? 2 : 4);
      }
      b.phase = Bucket::Phase::Gathering;
      return false;
    }
    case Bucket::Phase::Gathering: {
      const bool received = settle(b.receives), sent = settle(b.sends);
      if (!received || !sent) return false;
      if (options_.bf16_wire)
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          const Range theirs = b.chunk(p);
          kernels::bf16_to_float(grads_.data() + theirs.begin, b.incoming16.data() + (theirs.begin - b.range.begin),
                                 theirs.size());
        }
      b.phase = Bucket::Phase::Done;
      return true;
    }
    case Bucket::Phase::Done: return true;
  }
  return true;
}

void GradientReducer::ready(int64_t from) {
  if (group_.size() == 1) return;
  const auto start = std::chrono::steady_clock::now();
  while (launched_ < buckets_.size() && buckets_[launched_].range.begin >= from) launch(launched_++);
  for (size_t b = 0; b < launched_; ++b) advance(b);
  if (from > 0) stats_.overlap_s += seconds_since(start);
}

void GradientReducer::finish() {
  if (group_.size() == 1) return;
  const auto start = std::chrono::steady_clock::now();
  ready(0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    while (!advance(b)) {
      // Block on one transfer of this bucket rather than spin; the others move on meanwhile.
      Bucket& k = buckets_[b];
      std::vector<Communicator::Request>& pending = !k.receives.empty() ? k.receives : k.sends;
      if (!pending.empty()) {
        group_.wait(pending.back());
        pending.pop_back();
      }
    }
  }
  stats_.wait_s += seconds_since(start);
}

void GradientReducer::gather_values(std::span<float> values) {
  check(static_cast<int64_t>(values.size()) == elements_, "data parallel: a parameter buffer of {} floats, expected {}",
        values.size(), elements_);
  const int n = group_.size(), me = group_.rank();
  if (n == 1) return;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Communicator::Request> pending;
  for (size_t index = 0; index < buckets_.size(); ++index) {
    const Bucket& b = buckets_[index];
    const int tag = kBucketTag + 3 * static_cast<int>(index) + 2;
    const Range mine = b.chunk(me);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const Range theirs = b.chunk(p);
      pending.push_back(group_.send(p, std::as_bytes(std::span<const float>(values).subspan(mine.begin, mine.size())), tag));
      pending.push_back(group_.receive(p, std::as_writable_bytes(values.subspan(theirs.begin, theirs.size())), tag));
      stats_.bytes_sent += mine.size() * 4;
    }
  }
  for (Communicator::Request r : pending) group_.wait(r);
  stats_.wait_s += seconds_since(start);
}

ReducerStats GradientReducer::take_stats() {
  ReducerStats s = stats_;
  stats_ = {};
  return s;
}

}  // namespace attend::train

namespace attend {

void barrier(Communicator& group) {
  double nothing = 0.0;
  train::sum_in_rank_order(group, std::span(&nothing, 1));
}

}  // namespace attend
