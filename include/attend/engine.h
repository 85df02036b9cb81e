// The serving engine behind `attend serve`: many generation requests on one decoder model at once, with
// continuous batching over a paged KV cache and prefix caching.
//
// One thread runs the model. Each step it admits waiting requests while sequences and KV blocks allow, then
// runs one row-invariant step (attend/session.h) over every active sequence: a chunk of a new prompt (at most
// `chunk` positions, ending on a multiple of `chunk`) or the one token each decoding sequence sampled last.
// Sequences join and leave between steps; their blocks come from one KVBlockPool and go back the moment they
// end, are cancelled or pass their deadline. A prompt's whole chunks are published in the pool's prefix cache,
// so a request that starts like an earlier one (a shared system prompt, a conversation's history) runs only its
// new part.
//
// Determinism: a request's tokens depend only on its own parameters (prompt, sampling, seed), never on what runs
// beside it or on a prefix-cache hit, bit for bit: decoding rows go through per-row kernels, every prompt chunk
// through its own forward with chunk boundaries at fixed positions, and each request samples from its own
// random stream.
//
//   attend::Engine engine(model, &tokenizer, {.max_sequences = 8});
//   auto request = engine.submit({.prompt = ids, .max_tokens = 64});
//   for (attend::EngineEvent e; request->next(e);) std::cout << e.text;
#pragma once

#include <attend/generate.h>
#include <attend/model.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace attend {

class Tokenizer;

struct EngineOptions {
  int64_t max_sequences = 4;        // sequences decoded together (a request with n choices takes n)
  int64_t context = 0;              // positions per sequence; 0: the model's
  int64_t kv_blocks = 0;            // blocks of 32 positions in the pool; 0: enough for max_sequences × context
  CacheType cache = CacheType::F16; // the KV cache's storage
  int64_t chunk = 64;               // prompt positions per sequence and step (a multiple of 32); also the unit of
                                    // prefix sharing
  bool prefix_cache = true;
  int64_t max_queue = 64;           // requests waiting beyond which submit() refuses (QueueFull)
};

// A wake-up that several requests share (CompletionParams::signal): a reader of many requests (the prompts of one
// completions request) waits on it for an event of any of them.
class EngineSignal {
 public:
  uint64_t count() const;  // events so far
  // Waits until more than `seen` events have come, at most `timeout`; whether they had.
  bool wait_past(uint64_t seen, std::chrono::milliseconds timeout);
  void notify();

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

struct CompletionParams {
  std::vector<int32_t> prompt;      // at least one token
  int64_t max_tokens = 16;          // generated tokens at most
  int64_t n = 1;                    // choices: the prompt runs once, then each choice continues on its own
  SamplingOptions sampling;         // greedy, or temperature / top-k / top-p; sampling.seed seeds choice 0
  double presence_penalty = 0.0;    // OpenAI's: logit − presence·[count > 0] − frequency·count, over the tokens
  double frequency_penalty = 0.0;   // this choice generated so far
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to those tokens' logits
  std::vector<int32_t> eos;         // generating one of these ends the choice ("stop"); it is not returned
  std::vector<std::string> stop;    // the text reaching one of these ends the choice ("stop"), cut before it
  int64_t top_logprobs = -1;        // ≥ 0: each token's log-probability and this many alternatives (≤ 20)
  std::optional<std::chrono::steady_clock::time_point> deadline;  // unfinished then: ends with "deadline"
  // The LoRA adapter sets it runs with (SessionOptions::adapters: bit k for the model's slot k): requests with
  // different sets are decoded in the same steps, each with its own.
  uint64_t adapters = ~uint64_t{0};
  std::vector<std::optional<double>> adapter_scales;  // their multipliers by slot (SessionOptions::adapter_scales)
  std::shared_ptr<EngineSignal> signal;  // notified at each of its events too, when set
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// What a request's next() hands out: a generated token (with the text it completes, possibly empty while a
// character or a possible stop string is held back), or a choice's end.
struct EngineEvent {
  int64_t choice = 0;
  bool finished = false;
  // A token:
  int32_t token = -1;
  std::string text;                  // new text since the last event of this choice
  float logprob = 0.0f;              // log-probability of the token under the model (penalties and bias applied,
                                     // before temperature, top-k and top-p); set when top_logprobs ≥ 0
  std::vector<TokenLogprob> top;     // the top_logprobs most likely tokens
  // The end (finished):
  std::string finish_reason;         // "stop", "length", "cancelled", "deadline" or "error"
  std::string error;                 // for "error"
};

class EngineRequest {
 public:
  // Waits for the next event; false once every choice has finished and its events were taken.
  bool next(EngineEvent& event);
  // The same, waiting at most `timeout` (a server probes its client meanwhile).
  enum class Wait { Event, Timeout, Done };
  Wait next_for(EngineEvent& event, std::chrono::milliseconds timeout);
  // Ends every choice at the next step ("cancelled"), its blocks freed: a client that went away.
  void cancel();
  int64_t prompt_tokens() const;
  int64_t cached_tokens() const;      // of the prompt, taken from the prefix cache (known once it started)
  std::chrono::steady_clock::time_point submitted() const;

  struct State;
  explicit EngineRequest(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

// Counts of observations by upper bound (Prometheus's histogram, not cumulative here): counts[i] holds those
// in (bounds[i − 1], bounds[i]], the last one those above every bound.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;
  double sum = 0.0;
  int64_t count = 0;
  explicit Histogram(std::vector<double> upper = {}) : bounds(std::move(upper)), counts(bounds.size() + 1, 0) {}
  void add(double x);
};

// Counters and gauges for /metrics.
struct EngineStats {
  int64_t waiting = 0, running = 0;           // requests
  int64_t sequences = 0;                      // active sequences (choices)
  int64_t kv_blocks = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, cached_prompt_tokens = 0;
  int64_t last_batch_rows = 0, last_batch_sequences = 0, max_batch_sequences = 0;
  Histogram batch_sequences{{1, 2, 4, 8, 16, 32, 64, 128}};  // sequences per step
  Histogram time_to_first_token{{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};  // seconds from submission
  Histogram inter_token_latency{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};     // seconds between a choice's tokens
};

class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  // The model (a decoder) and tokenizer (nullable: ids only, no stop strings) must outlive the engine.
  Engine(const Model& model, const Tokenizer* tokenizer, const EngineOptions& options = {});
  ~Engine();  // ends every request ("cancelled") and stops the thread
  // The same now: every request ends ("cancelled"), and submit() refuses from then on.
  void stop();
  // Asks for the same and returns at once: the engine's thread ends the requests after the step under way, and
  // stop() (or the destructor) waits for it. For a caller that must not wait out a step, such as the server's
  // stop on the thread that takes signals (a second Ctrl-C ends the process there).
  void request_stop();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors (attend::Error) name a bad parameter: an empty prompt, an id outside the
  // vocabulary, a prompt and max_tokens past the context, n or top_logprobs out of range. QueueFull when
  // max_queue requests wait already.
  std::shared_ptr<EngineRequest> submit(CompletionParams params);
  // Runs `job` on the engine's thread between two steps (a forward that is not generation: embeddings) and
  // waits for it.
  void run(const std::function<void()>& job);

  EngineStats stats() const;
  const EngineOptions& options() const;
  int64_t context() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend
