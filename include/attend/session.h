// Decoding sessions (001 §10): one sequence being generated, with its own KV cache and position, on a model
// that many sessions share read-only. Sessions on one model may run from several threads at once, and one
// batched step advances several sessions at different positions and lengths in a single forward: the
// projections and FFNs multiply all their rows together; each session attends to its own cache.
//
//   attend::Session a(model), b(model);                 // decoder-only: empty sequences
//   auto logits = a.step(prompt_a);                      // the prompt's last position: (V)
//   attend::step({&a, &b}, {{next_a}, prompt_b});       // one forward for both; a.logits(), b.logits()
//
// A step's logits for a session equal those of stepping it alone: bit for bit when every session of the step
// adds one token (the matmuls then take the same per-row path), and within the matmul's rounding otherwise.
// step_row_invariant gives bit-for-bit equality always, at some cost (below).
//
// Sessions of a server share one KVBlockPool: each takes blocks of 32 positions as it grows and gives them
// back when it ends, and a session whose prompt starts with tokens another session published reuses their
// blocks instead of computing them again (prefix caching).
//
//   attend::KVBlockPool pool(model, 512, attend::CacheType::F16);
//   attend::Session s(model, {.pool = &pool});
//   int64_t reused = s.reuse_prefix(prompt, 64);         // positions taken from the pool's prefix cache
//   s.step(std::span(prompt).subspan(reused));
//   s.share_prefix(prompt.size() / 64 * 64);             // publish the whole 64-position chunks
#pragma once

#include <attend/model.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace attend {

class Session;

// KV-cache blocks of 32 positions for many sessions of one model, with a prefix cache (see above). Copies
// share the pool; it lives while a copy or a session on it does. Thread-safe.
class KVBlockPool {
 public:
  static constexpr int64_t kBlockPositions = 32;

  KVBlockPool(const Model& model, int64_t blocks, CacheType cache = CacheType::F32);
  // Bytes of one block: 32 positions' keys and values in every layer.
  static int64_t block_bytes(const Model& model, CacheType cache);

  const Model& model() const;
  CacheType cache() const;
  int64_t blocks() const;
  int64_t available() const;  // blocks a session can take now: free ones, and cached ones no session holds
  int64_t in_use() const;     // held by sessions
  int64_t cached() const;     // in the prefix cache
  int64_t memory_bytes() const;

  struct Impl;  // src/nn/session.cpp

 private:
  std::shared_ptr<Impl> impl_;
  friend class Session;
};

struct SessionOptions {
  int64_t max_T = 0;                   // positions the cache holds; 0: the model's context (max_seq_len)
  CacheType cache = CacheType::F32;    // the KV cache's storage (a pool's own when pool is set)
  const KVBlockPool* pool = nullptr;   // decoder-only models: take the cache's blocks from this pool
  // LoRA adapter sets the session runs with, bit k for slot k of Model::adapters(): all of them by default, 0 for
  // the bare model. Sessions with different sets step together, each with its own (a server's requests); the
  // prefix cache shares blocks only between sessions of the same set.
  uint64_t adapters = ~uint64_t{0};
  // Multipliers for those sets by slot, each in place of the one the set was loaded with (--lora DIR:SCALE's SCALE,
  // LoraConfig::multiplier; nullopt, or past the end: that one), as a request's own LoRA scales ask (llama-server's
  // per-request "lora"): set k then runs as it runs loaded with adapter_scales[k], bit for bit. Sessions with other
  // multipliers step together too, and share prefix-cache blocks only with sessions of the same ones.
  std::vector<std::optional<double>> adapter_scales;
};

class Session {
 public:
  // A decoder-only model's empty sequence. The model must outlive the session.
  explicit Session(const Model& model, const SessionOptions& options = {});
  // An encoder-decoder model's: encodes `source` once (at least one token, at most the context) and keeps
  // every decoder block's cross-attention keys and values of it; step() then runs the decoder.
  Session(const Model& model, std::span<const int32_t> source, const SessionOptions& options = {});
  ~Session();
  // A copy continues independently from the same point (beam search forks hypotheses this way).
  Session(const Session& other);
  Session& operator=(const Session& other);
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  const Model& model() const;
  int64_t position() const;   // tokens run so far
  int64_t capacity() const;   // positions the cache holds
  int64_t cache_bytes() const;
  uint64_t adapters() const;  // SessionOptions::adapters, of the slots the model has
  // SessionOptions::adapter_scales, one per slot of the model; empty where none is given.
  std::vector<std::optional<double>> adapter_scales() const;

  // Runs `tokens` (at least one) at the next positions and returns the logits after the last (V). Errors
  // name what does not fit: an id outside the vocabulary, more tokens than the cache has room for.
  std::span<const float> step(std::span<const int32_t> tokens);
  // The logits of the last step (empty before the first).
  std::span<const float> logits() const;

  // Continues from `other`'s point: copies its cache's filled positions into this session's cache (same
  // model and capacity), without reallocating. Beam search reorders its hypotheses with this. On a pool, both
  // then share the full blocks (the last one is copied).
  void assign(const Session& other);

  // The token ids run so far, in order (the decoder's, for an encoder-decoder model).
  std::span<const int32_t> tokens() const;
  // On a pool: blocks that running `more` further tokens would take from it (0 without a pool).
  int64_t blocks_needed(int64_t more) const;
  // On a pool, with nothing run yet: takes the blocks that the pool's prefix cache holds for the longest start
  // of `tokens` that is a multiple of `multiple` positions (a multiple of 32) and leaves at least one token to
  // run (its logits are the next step's). Returns the positions taken: the session continues after them as if
  // it had run them (logits() stays empty until the next step).
  int64_t reuse_prefix(std::span<const int32_t> tokens, int64_t multiple = KVBlockPool::kBlockPositions);
  // On a pool: publishes the blocks of positions [0, positions) (a multiple of 32, at most position()) in the
  // pool's prefix cache under the tokens that filled them. Publish only what a prompt step computed, in steps
  // that another session with the same tokens would also take (step_row_invariant), so that a reuse gives the
  // same numbers as a computation.
  void share_prefix(int64_t positions);

  struct State;  // src/nn/session.cpp

 private:
  std::unique_ptr<State> state_;
  friend void step(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens);
  friend void step_row_invariant(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens);
};

// Advances sessions[i] by tokens[i] (each at least one token) in one forward over all of them; the sessions
// share one model and may be at different positions. Each session's logits() are then those of its own step.
// An error in any session's tokens (named by its index), or a pool without the blocks they need, leaves every
// session as it was.
void step(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens);

// The same with every session's numbers independent of the others in the step, bit for bit, whatever their
// number and lengths: sessions that add one token go through the model together on the matmuls' per-row
// kernels, and so do sessions that add several where the model multiplies that many rows on those kernels anyway
// (16-bit and quantized weights' short prompts); otherwise each session that adds several runs its own forward
// (its own GEMM shapes). A server uses it so that a request's tokens do not depend on the requests beside it.
void step_row_invariant(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens);

}  // namespace attend
