// Text generation through sessions (attend/session.h; 001 §10, §12): greedy decoding, temperature, top-k
// and top-p (nucleus) sampling and their combinations, stopping at EOS, at a stop string or at a token
// budget, and beam search. Reproducible with a seed. The model is only read: several generations may run
// on one model from several threads.
#pragma once

#include <attend/model.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace attend {

class Tokenizer;

struct SamplingOptions {
  bool greedy = false;       // argmax; the other options are then ignored
  double temperature = 1.0;  // softmax(z/τ): below 1 sharpens, above 1 flattens (002 §1.3)
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the smallest set whose probability reaches p, in (0, 1]
  uint64_t seed = 0;

  // Throws attend::Error naming the option that is out of range.
  void validate() const;
};

// The distribution sampling draws from: softmax(logits/τ), cut to the top k, then to the nucleus of
// mass p, renormalised (001 §12). Zero outside what is kept. Greedy gives one-hot at the argmax (the
// lower id wins a tie).
std::vector<double> sampling_distribution(const float* logits, int64_t V, const SamplingOptions& options);
// Draws from that distribution with the uniform number u ∈ [0, 1).
int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& options, double u);
// The ids of the k largest logits, largest first (the lower id first among equal ones), into `ids`; NaN logits
// never, so fewer than k where fewer are numbers (a server's top_logprobs; top-k sampling orders them so).
void largest_logits(const float* logits, int64_t V, int64_t k, std::vector<int32_t>& ids);

// The ids generation may produce: [0, the model's vocabulary), within the tokenizer's where one is given. A
// vocabulary can be padded past its tokenizer's (Qwen's 151,936 rows for 151,665 tokens): no text has those ids,
// and they are never drawn.
int64_t sampled_vocab(const Model& model, const Tokenizer* tokenizer);

// How much of a growing text may be shown while generation goes on under stop strings: `end` is where the first
// stop string begins (`stopped`), searched from where one could end past the first `shown` bytes (those before
// were searched as they came); else the text's length less its longest end that begins a stop string (which the
// next tokens may complete). A stream that shows text[0, end) never shows what a stop string later cuts.
struct StopScan {
  size_t end = 0;
  bool stopped = false;
};
StopScan scan_stops(const std::string& text, size_t shown, const std::vector<std::string>& stops);

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<int32_t> eos;            // stop after generating one of these (it is not returned); e.g. Llama 3
                                       // instruct's <|end_of_text|>, <|eom_id|>, <|eot_id|>
  std::vector<std::string> stop;       // stop once the generated text contains one of these (cut off)
  std::optional<int32_t> decoder_start;  // encoder-decoder models: the decoder's first token (BOS)
  CacheType cache = CacheType::F32;      // the sessions' KV cache storage
};

struct Generation {
  std::vector<int32_t> ids;  // the generated tokens only
  std::string text;          // their text (cut at a stop string); empty without a tokenizer
  std::string stopped_by;    // "eos", "stop", "length"
  double prompt_seconds = 0.0, generate_seconds = 0.0;
};

// Generates after each of several prompts of any lengths: one session per prompt, all stepped together (the
// prompts in one forward, then one forward per generated token over the sequences still open); each result
// equals generating from its prompt alone, and each prompt's budget is what its own length leaves. on_token
// receives (sequence, token) as tokens are made; returning false ends that sequence. The tokenizer (nullable:
// ids only) gives each Generation its text and finds the stop strings, which need one.
std::vector<Generation> generate_batch(const Model& model, const Tokenizer* tokenizer,
                                       const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                                       const std::function<bool(int64_t, int32_t)>& on_token = {});

// Generates after `prompt` (at least one token): a decoder-only model continues it; an encoder-decoder model
// reads it as the source and generates from decoder_start. on_token, when given, receives each token as it
// is made (return false to stop). A prompt that leaves no room in the context is an error.
Generation generate(const Model& model, const Tokenizer* tokenizer, const std::vector<int32_t>& prompt,
                    const GenerateOptions& options, const std::function<bool(int32_t)>& on_token = {});

struct BeamOptions {
  int64_t width = 4;            // beams kept at every step
  double length_penalty = 1.0;  // a finished beam scores Σ log p / length^α; α > 0 favours longer ones
  bool early_stopping = true;   // stop once `width` beams have finished
  int64_t n_best = 1;           // hypotheses returned, best first (at most width)
  std::optional<int32_t> decoder_start;  // encoder-decoder models: the decoder's first token (BOS)
  CacheType cache = CacheType::F32;      // the beams' KV cache storage
  int64_t vocab = 0;  // tokens the beams may take: [0, vocab), each step's softmax over them (0: the model's
                      // whole vocabulary; sampled_vocab for one padded past its tokenizer's)
};

struct Hypothesis {
  std::vector<int32_t> ids;  // generated tokens (EOS not included)
  double log_prob = 0.0;     // Σ log p of the tokens (and of EOS when it finished)
  double score = 0.0;        // log_prob / length^α
  bool finished = false;     // ended with EOS (otherwise stopped by the budget)
};

// Beam search (001 §12): keeps the `width` most likely prefixes, extends each by every token, and keeps
// the best `width` of the extensions; beams that produce an EOS token (any of `eos`) are set aside as finished hypotheses. Width 1
// is greedy decoding. Encoder-decoder models read `prompt` as the source. Each beam is a session; the
// survivors of a step continue from their source beams' sessions and step together. Returns the n-best list,
// best first.
std::vector<Hypothesis> beam_search(const Model& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                    std::span<const int32_t> eos, const BeamOptions& options);

}  // namespace attend
