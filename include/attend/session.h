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
#pragma once

#include <attend/model.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace attend {

struct SessionOptions {
  int64_t max_T = 0;                   // positions the cache holds; 0: the model's context (max_seq_len)
  CacheType cache = CacheType::F32;    // the KV cache's storage
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

  // Runs `tokens` (at least one) at the next positions and returns the logits after the last (V). Errors
  // name what does not fit: an id outside the vocabulary, more tokens than the cache has room for.
  std::span<const float> step(std::span<const int32_t> tokens);
  // The logits of the last step (empty before the first).
  std::span<const float> logits() const;

  // Continues from `other`'s point: copies its cache's filled positions into this session's cache (same
  // model and capacity), without reallocating. Beam search reorders its hypotheses with this.
  void assign(const Session& other);

  struct State;  // src/nn/session.cpp

 private:
  std::unique_ptr<State> state_;
  friend void step(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens);
};

// Advances sessions[i] by tokens[i] (each at least one token) in one forward over all of them; the sessions
// share one model and may be at different positions. Each session's logits() are then those of its own step.
// An error in any session's tokens (named by its index) leaves every session as it was.
void step(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens);

}  // namespace attend
