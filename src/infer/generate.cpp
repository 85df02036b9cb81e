#include <attend/error.h>
#include <attend/generate.h>
#include <attend/rng.h>
#include <attend/tokenizer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace attend {

void SamplingOptions::validate() const {
  check(temperature > 0.0 && std::isfinite(temperature), "sampling: temperature must be positive, got {}", temperature);
  check(top_k >= 0, "sampling: top-k must be non-negative (0 keeps every token), got {}", top_k);
  check(top_p > 0.0 && top_p <= 1.0, "sampling: top-p must be in (0, 1], got {}", top_p);
}

std::vector<double> sampling_distribution(const float* logits, int64_t V, const SamplingOptions& o) {
  std::vector<double> p(V, 0.0);
  if (o.greedy) {
    p[std::max_element(logits, logits + V) - logits] = 1.0;
    return p;
  }
  // Tokens by decreasing logit (ties: the lower id first), then the softmax of the kept ones.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const double top = logits[order[0]] / o.temperature;
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) total += std::exp(logits[order[i]] / o.temperature - top);
  // The nucleus: the smallest prefix whose probability reaches top_p.
  double mass = 0.0;
  int64_t kept = 0;
  while (kept < k) {
    mass += std::exp(logits[order[kept]] / o.temperature - top) / total;
    ++kept;
    if (mass >= o.top_p - 1e-12) break;
  }
  double kept_total = 0.0;
  for (int64_t i = 0; i < kept; ++i) kept_total += std::exp(logits[order[i]] / o.temperature - top);
  for (int64_t i = 0; i < kept; ++i) p[order[i]] = std::exp(logits[order[i]] / o.temperature - top) / kept_total;
  return p;
}

int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& o, double u) {
  if (o.greedy) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const std::vector<double> p = sampling_distribution(logits, V, o);
  double cumulative = 0.0;
  int32_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (p[i] == 0.0) continue;
    cumulative += p[i];
    last = static_cast<int32_t>(i);
    if (u < cumulative) return last;
  }
  return last;  // u within rounding of 1
}

Generation generate(Model& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                    const GenerateOptions& options, const std::function<bool(int32_t)>& on_token) {
  options.sampling.validate();
  const int64_t context = model.config().max_seq_len;
  check(!prompt.empty(), "generate: the prompt has no tokens");
  check(static_cast<int64_t>(prompt.size()) < context,
        "generate: the prompt has {} tokens, which leaves no room in the model's context of {}", prompt.size(), context);
  check(options.max_new_tokens >= 1, "generate: max_new_tokens must be at least 1, got {}", options.max_new_tokens);
  const int64_t budget = std::min<int64_t>(options.max_new_tokens, context - static_cast<int64_t>(prompt.size()));
  Generation out;
  out.stopped_by = "length";
  model.start_decoding(1, static_cast<int64_t>(prompt.size()) + budget);
  auto start = std::chrono::steady_clock::now();
  const Tensor* logits = &model.decode(prompt, static_cast<int64_t>(prompt.size()));
  out.prompt_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  start = std::chrono::steady_clock::now();
  Rng rng(options.sampling.seed);
  const int64_t V = model.config().vocab_size;
  for (int64_t n = 0; n < budget; ++n) {
    const int32_t next = sample_token(logits->data(), V, options.sampling, rng.uniform_double());
    if (options.eos && next == *options.eos) {
      out.stopped_by = "eos";
      break;
    }
    out.ids.push_back(next);
    out.text = tokenizer.decode(out.ids);
    bool stop = false;
    for (const std::string& s : options.stop)
      if (const size_t at = out.text.find(s); !s.empty() && at != std::string::npos) {
        out.text.resize(at);
        stop = true;
      }
    if (stop) {
      out.stopped_by = "stop";
      break;
    }
    if (on_token && !on_token(next)) break;
    if (n + 1 < budget) logits = &model.decode({next}, 1);
  }
  out.generate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace attend
