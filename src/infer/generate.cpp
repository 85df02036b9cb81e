#include <attend/error.h>
#include <attend/generate.h>
#include <attend/rng.h>
#include <attend/session.h>
#include <attend/tokenizer.h>

#include "kernels/elementwise.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

namespace attend {

void SamplingOptions::validate() const {
  // Not subnormal: 1/τ overflowed, and the largest logit's weight became 0·∞ = NaN.
  check(temperature >= std::numeric_limits<double>::min() && std::isfinite(temperature),
        "sampling: temperature must be positive and at least {:g}, got {}", std::numeric_limits<double>::min(),
        temperature);
  check(top_k >= 0, "sampling: top-k must be non-negative (0 keeps every token), got {}", top_k);
  check(top_p > 0.0 && top_p <= 1.0, "sampling: top-p must be in (0, 1], got {}", top_p);
}

namespace {

// The largest of x[0, n) that is not NaN (−∞ where there is none), in sixteen independent running maxima without
// a branch per value (the same value whatever the order): std::max_element's compare and branch per value took
// about 40 µs over 50,257 logits, this 17-25.
float largest(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lane[kLanes];
  std::fill_n(lane, kLanes, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], x[i + l]);
  float best = *std::max_element(lane, lane + kLanes);
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// Orders token ids by decreasing logit, the lower id first among equal logits (no NaN logits among them).
struct ByLogit {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// The ids of the logits that are numbers, in order.
void numbers(const float* logits, int64_t V, std::vector<int32_t>& ids) {
  int32_t nans = 0;  // a count rather than a flag: GCC vectorizes the sum, not a bool's or
  for (int64_t i = 0; i < V; ++i) nans += logits[i] != logits[i];
  ids.resize(static_cast<size_t>(V));
  if (nans == 0) {
    std::iota(ids.begin(), ids.end(), 0);
    return;
  }
  int64_t kept = 0;
  for (int64_t i = 0; i < V; ++i) ids[kept] = static_cast<int32_t>(i), kept += !std::isnan(logits[i]);
  ids.resize(static_cast<size_t>(kept));
}

// The tokens sampling keeps and their probabilities: softmax(logits/τ) over the k largest logits (all of them
// without top-k), then the nucleus, the smallest prefix by decreasing logit (ties: the lower id first) whose
// probability reaches top_p, renormalised. Only as much of the vocabulary is sorted as the nucleus needs: the
// largest 64 logits, then four times as many, and so on (a full sort of 50,257 ids and four exponentials of each
// took 30-55 ms a sampled token, on the server's one engine thread for every sequence; now 0.2-4 ms); without
// top-k and top-p nothing is sorted. `ids` and `p` come out in the order of decreasing logit, or by id where
// nothing was sorted. NaN logits are never kept.
void kept_tokens(const float* logits, int64_t V, const SamplingOptions& o, std::vector<int32_t>& ids,
                 std::vector<double>& p) {
  ids.clear(), p.clear();
  const ByLogit by_logit{logits};
  thread_local std::vector<int32_t> order;
  const float top = largest(logits, V);
  numbers(logits, V, order);
  if (order.empty()) {  // nothing to draw from: the first id, as greedy's argmax gives
    ids.push_back(0), p.push_back(1.0);
    return;
  }
  const auto n = static_cast<int64_t>(order.size());
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, n) : n;
  if (k < n) {  // the k largest, sorted; the rest never counts
    std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
    order.resize(static_cast<size_t>(k));
  }
  // Each candidate's e^{(z − max)/τ}, worked out once: the whole vocabulary in the kernels' vector pass (NaNs get
  // no weight), or only the k kept.
  const double inv_t = 1.0 / o.temperature;
  thread_local std::vector<double> weights;
  weights.resize(static_cast<size_t>(V));
  double total = 0.0;
  if (k == n) {
    total = kernels::exp_weights(weights.data(), logits, V, top, inv_t);
  } else {
    for (const int32_t id : order) total += weights[id] = std::exp((static_cast<double>(logits[id]) - top) * inv_t);
  }
  if (o.top_p >= 1.0) {  // every one of the k, in decreasing order when top-k sorted them, else by id
    ids.assign(order.begin(), order.end());
    p.resize(ids.size());
    if (static_cast<int64_t>(ids.size()) == V) {  // every id, in order
      for (int64_t i = 0; i < V; ++i) p[i] = weights[i] / total;
    } else {
      for (size_t i = 0; i < ids.size(); ++i) p[i] = weights[ids[i]] / total;
    }
    return;
  }
  // The nucleus, sorting a growing prefix of the candidates until it holds top_p of the mass.
  double mass = 0.0, kept_total = 0.0;
  int64_t sorted = k < n ? k : 0;
  for (int64_t at = 0; at < k;) {
    if (at == sorted) {
      const int64_t next = std::min(k, std::max<int64_t>(64, sorted * 4));
      std::nth_element(order.begin() + sorted, order.begin() + next - 1, order.end(), by_logit);
      std::sort(order.begin() + sorted, order.begin() + next, by_logit);
      sorted = next;
    }
    const double w = weights[order[at++]];
    ids.push_back(order[at - 1]), p.push_back(w);
    mass += w / total;
    kept_total += w;
    if (mass >= o.top_p - 1e-12) break;
  }
  for (double& q : p) q /= kept_total;
}

}  // namespace

std::vector<double> sampling_distribution(const float* logits, int64_t V, const SamplingOptions& o) {
  std::vector<double> p(V, 0.0);
  if (o.greedy) {
    p[std::max_element(logits, logits + V) - logits] = 1.0;
    return p;
  }
  std::vector<int32_t> ids;
  std::vector<double> kept;
  kept_tokens(logits, V, o, ids, kept);
  for (size_t i = 0; i < ids.size(); ++i) p[ids[i]] = kept[i];
  return p;
}

void largest_logits(const float* logits, int64_t V, int64_t k, std::vector<int32_t>& ids) {
  numbers(logits, V, ids);
  const auto kept = static_cast<std::ptrdiff_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(ids.size())));
  std::partial_sort(ids.begin(), ids.begin() + kept, ids.end(), ByLogit{logits});
  ids.resize(static_cast<size_t>(kept));
}

namespace {

// The first index of the largest logit, as std::max_element finds it, in two passes: the largest value (`largest`),
// then the first place that holds it. NaN logits are passed over (all NaN: index 0, as std::max_element).
int32_t argmax(const float* x, int64_t n) {
  const float best = largest(x, n);
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == best) return static_cast<int32_t>(j);
  return static_cast<int32_t>(std::max_element(x, x + n) - x);  // NaNs: no value equals the maximum found
}

}  // namespace

int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& o, double u) {
  if (o.greedy) return argmax(logits, V);
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<double> p;
  kept_tokens(logits, V, o, ids, p);
  // The draw walks the kept tokens by id, as the cumulative distribution over the vocabulary runs.
  double cumulative = 0.0;
  int32_t last = 0;
  auto walk = [&](size_t i) {
    if (p[i] == 0.0) return false;
    cumulative += p[i];
    last = ids[i];
    return u < cumulative;
  };
  if (std::is_sorted(ids.begin(), ids.end())) {  // without top-k and top-p: every token, by id
    for (size_t i = 0; i < ids.size(); ++i)
      if (walk(i)) return last;
    return last;  // u within rounding of 1
  }
  thread_local std::vector<int32_t> by_id;
  by_id.resize(ids.size());
  std::iota(by_id.begin(), by_id.end(), 0);
  std::sort(by_id.begin(), by_id.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  for (const int32_t i : by_id)
    if (walk(static_cast<size_t>(i))) return last;
  return last;
}

namespace {

// How decoding begins for one prompt: a decoder-only model's session runs the prompt; an encoder-decoder
// model's encodes it as the source and runs the decoder's start token. Returns the session (not yet stepped)
// and, in *first, the tokens its first step runs; *budget becomes the new tokens the context leaves room for
// (at most `wanted`).
Session open_session(const Model& model, const std::vector<int32_t>& prompt, std::optional<int32_t> decoder_start,
                     int64_t wanted, CacheType cache, int64_t* budget, std::vector<int32_t>* first, const char* who) {
  const int64_t context = model.config().max_seq_len, P = static_cast<int64_t>(prompt.size());
  check(P >= 1, "{}: the prompt has no tokens", who);
  check(wanted >= 1, "{}: max_new_tokens must be at least 1, got {}", who, wanted);
  if (model.config().architecture == Architecture::EncoderDecoder) {
    check(decoder_start.has_value(), "{}: an encoder-decoder model needs the decoder's start token (BOS)", who);
    check(P <= context, "{}: the source has {} tokens, more than the model's context of {}", who, P, context);
    *budget = std::min<int64_t>(wanted, context - 1);
    *first = {*decoder_start};
    return Session(model, prompt, {.max_T = 1 + *budget, .cache = cache});
  }
  check(P < context, "{}: the prompt has {} tokens, which leaves no room in the model's context of {}", who, P, context);
  *budget = std::min<int64_t>(wanted, context - P);
  *first = prompt;
  return Session(model, {.max_T = P + *budget, .cache = cache});
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<Generation> generate_batch(const Model& model, const Tokenizer* tokenizer,
                                       const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                                       const std::function<bool(int64_t, int32_t)>& on_token) {
  options.sampling.validate();
  check(tokenizer != nullptr || options.stop.empty(), "generate: stop strings need a tokenizer to find them");
  const auto B = static_cast<int64_t>(prompts.size());
  check(B >= 1, "generate: no prompts");
  std::vector<Generation> out(B);
  std::vector<Session> sessions;
  std::vector<int64_t> budgets(B);
  std::vector<std::vector<int32_t>> first(B);
  for (int64_t b = 0; b < B; ++b)
    sessions.push_back(open_session(model, prompts[b], options.decoder_start, options.max_new_tokens, options.cache,
                                    &budgets[b], &first[b], "generate"));
  std::vector<Session*> all;
  for (Session& s : sessions) all.push_back(&s);
  auto start = std::chrono::steady_clock::now();
  step(all, first);  // every prompt in one forward
  const double prompt_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();

  // Each sequence draws from its own stream of the seed: a prompt samples the same tokens alone or in a batch.
  std::vector<Rng> rngs(B, Rng(options.sampling.seed));
  std::vector<bool> open(B, true);
  const int64_t V = sampled_vocab(model, tokenizer);
  for (Generation& g : out) g.stopped_by = "length";
  while (true) {
    std::vector<Session*> running;
    std::vector<std::vector<int32_t>> next;
    for (int64_t b = 0; b < B; ++b) {
      if (!open[b]) continue;
      Generation& g = out[b];
      const int32_t token = sample_token(sessions[b].logits().data(), V, options.sampling, rngs[b].uniform_double());
      if (std::find(options.eos.begin(), options.eos.end(), token) != options.eos.end()) {
        g.stopped_by = "eos", open[b] = false;
        continue;
      }
      g.ids.push_back(token);
      if (tokenizer != nullptr) g.text = tokenizer->decode(g.ids);
      for (const std::string& s : options.stop)
        if (const size_t at = g.text.find(s); !s.empty() && at != std::string::npos) {
          g.text.resize(at);
          g.stopped_by = "stop", open[b] = false;
        }
      if (open[b] && on_token && !on_token(b, token)) open[b] = false;
      if (open[b] && static_cast<int64_t>(g.ids.size()) == budgets[b]) open[b] = false;  // "length"
      if (!open[b]) continue;
      running.push_back(&sessions[b]);
      next.push_back({token});
    }
    if (running.empty()) break;
    step(running, next);  // the sequences still open, each at its own position
  }
  const double generate_seconds = seconds_since(start);
  for (Generation& g : out) g.prompt_seconds = prompt_seconds, g.generate_seconds = generate_seconds;
  return out;
}

StopScan scan_stops(const std::string& text, size_t shown, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const std::string& s : stops)
    if (!s.empty()) first = std::min(first, text.find(s, shown >= s.size() ? shown - s.size() + 1 : 0));
  if (first != std::string::npos) return {first, true};
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(s.empty() ? 0 : s.size() - 1, text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return {text.size() - hold, false};
}

int64_t sampled_vocab(const Model& model, const Tokenizer* tokenizer) {
  const int64_t V = model.config().vocab_size;
  return tokenizer != nullptr ? std::min<int64_t>(V, tokenizer->vocab_size()) : V;
}

Generation generate(const Model& model, const Tokenizer* tokenizer, const std::vector<int32_t>& prompt,
                    const GenerateOptions& options, const std::function<bool(int32_t)>& on_token) {
  std::function<bool(int64_t, int32_t)> each;
  if (on_token) each = [&](int64_t, int32_t token) { return on_token(token); };
  return generate_batch(model, tokenizer, {prompt}, options, each)[0];
}

std::vector<Hypothesis> beam_search(const Model& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                    std::span<const int32_t> eos, const BeamOptions& o) {
  const int64_t V = o.vocab > 0 ? o.vocab : model.config().vocab_size, W = o.width;
  check(W >= 1, "beam search: width must be at least 1, got {}", W);
  check(V <= model.config().vocab_size, "beam search: vocab {} is more than the model's {}", V, model.config().vocab_size);
  check(o.n_best >= 1 && o.n_best <= W, "beam search: n_best must be in [1, width = {}], got {}", W, o.n_best);
  auto score_of = [&](double log_prob, int64_t length) {
    return log_prob / std::pow(static_cast<double>(std::max<int64_t>(length, 1)), o.length_penalty);
  };

  // The prompt runs once; every beam starts as a copy of its session, and only beam 0 is extended at the
  // first step. `spare` holds the sessions the next step's beams are copied into.
  int64_t budget = 0;
  std::vector<int32_t> first;
  Session opened = open_session(model, prompt, o.decoder_start, max_new_tokens, o.cache, &budget, &first, "beam search");
  opened.step(first);
  std::vector<Session> sessions(W, opened), spare(W, opened);
  std::vector<Hypothesis> beams(W), finished;
  std::vector<double> beam_score(W, -INFINITY);
  beam_score[0] = 0.0;

  for (int64_t step_index = 0; step_index < budget; ++step_index) {
    // Candidates (beam, token, log prob): log_softmax of each beam's logits added to its score.
    struct Candidate {
      double log_prob;
      int64_t beam;
      int32_t token;
    };
    std::vector<Candidate> candidates;
    for (int64_t b = 0; b < W; ++b) {
      if (beam_score[b] == -INFINITY) continue;
      const float* z = sessions[b].logits().data();
      const double top = *std::max_element(z, z + V);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - top);
      const double lse = top + std::log(sum);
      for (int64_t v = 0; v < V; ++v) candidates.push_back({beam_score[b] + z[v] - lse, b, static_cast<int32_t>(v)});
    }
    // The best 2·width: enough that width survive even if all EOS candidates are among them.
    const auto keep = std::min<size_t>(candidates.size(), static_cast<size_t>(2 * W));
    std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), [](const auto& a, const auto& b) {
      return a.log_prob > b.log_prob || (a.log_prob == b.log_prob && (a.beam < b.beam || (a.beam == b.beam && a.token < b.token)));
    });
    std::vector<Hypothesis> next;
    std::vector<int64_t> source;
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < keep && static_cast<int64_t>(next.size()) < W; ++i) {
      const Candidate& c = candidates[i];
      if (std::find(eos.begin(), eos.end(), c.token) != eos.end()) {
        Hypothesis h{beams[c.beam].ids, c.log_prob, 0.0, true};
        h.score = score_of(h.log_prob, static_cast<int64_t>(h.ids.size()) + 1);
        finished.push_back(std::move(h));
        continue;
      }
      Hypothesis h{beams[c.beam].ids, c.log_prob, 0.0, false};
      h.ids.push_back(c.token);
      next.push_back(std::move(h));
      source.push_back(c.beam);
      tokens.push_back(c.token);
    }
    if (o.early_stopping && static_cast<int64_t>(finished.size()) >= W) break;
    if (next.empty()) break;
    // Fewer survivors than beams (everything else ended): the rest score −∞ and are not run.
    const auto survivors = static_cast<int64_t>(next.size());
    next.resize(W);
    beams = std::move(next);
    for (int64_t b = 0; b < W; ++b) beam_score[b] = b < survivors ? beams[b].log_prob : -INFINITY;
    if (step_index + 1 == budget) break;
    // Beam b continues from the session of its source beam, then every survivor steps in one forward.
    std::vector<Session*> running;
    std::vector<std::vector<int32_t>> next_tokens;
    for (int64_t b = 0; b < survivors; ++b) {
      spare[b].assign(sessions[source[b]]);
      running.push_back(&spare[b]);
      next_tokens.push_back({tokens[b]});
    }
    std::swap(sessions, spare);
    step(running, next_tokens);
  }
  // Beams still open at the budget compete with the finished ones.
  for (int64_t b = 0; b < W; ++b)
    if (beam_score[b] != -INFINITY && !beams[b].ids.empty()) {
      Hypothesis h = beams[b];
      h.score = score_of(h.log_prob, static_cast<int64_t>(h.ids.size()));
      finished.push_back(std::move(h));
    }
  std::stable_sort(finished.begin(), finished.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  // The same token sequence can appear twice: keep the first.
  std::vector<Hypothesis> out;
  for (auto& h : finished) {
    bool seen = false;
    for (const auto& k : out) seen |= k.ids == h.ids && k.finished == h.finished;
    if (!seen) out.push_back(std::move(h));
    if (static_cast<int64_t>(out.size()) == o.n_best) break;
  }
  return out;
}

}  // namespace attend
