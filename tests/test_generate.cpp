// Generation (001 §10, §12): decoding through a session's KV cache equals the full forward; sessions on one
// model run side by side (from two threads, or in one batched step) as each would alone; and the sampling
// strategies draw from the distributions they promise.
#include "fixtures.h"
#include "formats/hf_gpt2.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "nn/layers.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/generate.h>
#include <attend/io.h>
#include <attend/safetensors.h>
#include <attend/session.h>
#include <attend/tokenizer.h>
#include <attend/model_dir.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

namespace attend {
namespace {

using testing::expect_error_mentions;

// The prompt (5 tokens) at once, then one token at a time: each step's logits must equal the full forward's
// at that position. Learned positions (gpt) and RoPE with GQA (llama); the decode kernel sums the keys in
// another order than the full forward's tiles, so fp32 agreement is to 2e-5. An fp16 cache rounds each key
// and value to 11 significant bits (relative 2⁻¹¹) and int8 each by up to 1/254 of its row's largest, so
// their logits move by about that share of the logits' scale: largest |Δ| measured 9.5e-7 (fp32), 8.2e-4
// (fp16) and 9.5e-3 (int8).
TEST(Decoding, IncrementalLogitsEqualTheFullForward) {
  for (const std::string name : {"gpt", "llama"}) {
    Model model = load_model(testing::kModels / name);
    const Batch golden = testing::batch_from_json(
        nlohmann::json::parse(read_file(testing::kModels / name / "golden.json"))["cases"][0]["batch"]);
    const int64_t T = golden.lengths[0], V = model.config().vocab_size;
    const std::vector<int32_t> ids(golden.ids.begin(), golden.ids.begin() + T);
    Batch full;
    full.B = 1, full.T = T, full.ids = ids;
    model.forward(full);
    const std::vector<float> reference(model.logits().span().begin(), model.logits().span().end());
    const std::pair<CacheType, double> caches[] = {{CacheType::F32, 2e-5}, {CacheType::F16, 2e-3}, {CacheType::Int8, 3e-2}};
    for (const auto& [type, tolerance] : caches) {
      const std::string what = name + " with a " + cache_type_name(type) + " cache";
      Session session(model, {.max_T = T, .cache = type});
      const int64_t prompt = 5;
      std::span<const float> step = session.step(std::span(ids.data(), prompt));
      double largest = 0.0;
      for (int64_t t = prompt - 1; t < T; ++t) {
        const std::vector<float> got(step.begin(), step.end());
        const std::vector<float> want(reference.begin() + t * V, reference.begin() + (t + 1) * V);
        testing::expect_all_close(got, want, tolerance, what + ": logits at position " + std::to_string(t));
        for (int64_t i = 0; i < V; ++i) largest = std::max(largest, double(std::abs(got[i] - want[i])));
        if (t + 1 < T) step = session.step(std::span(&ids[t + 1], 1));
      }
      if (type != CacheType::F32) {
        EXPECT_GT(largest, 1e-6) << what << ": the cache's rounding must show";
      }
      EXPECT_EQ(session.position(), T);
      const int32_t one[] = {1};
      expect_error_mentions<Error>([&] { session.step(one); }, {"do not fit the context"});
      EXPECT_EQ(session.position(), T);  // the failed step changed nothing
    }
  }
  EXPECT_EQ(parse_cache_type("f16"), CacheType::F16);
  expect_error_mentions<Error>([] { parse_cache_type("int4"); }, {"KV cache type", "'int4'", "f32, f16, int8"});
}

// Encoder-decoder: the encoder runs once, cross-attention keys and values are projected once, and the
// decoder extends its own KV cache; every step equals the full forward (T5 fixture: relative position bias
// with causal buckets at the cached position, padded source).
TEST(Decoding, EncoderDecoderIncrementalLogitsEqualTheFullForward) {
  Model model = load_model(testing::kModels / "t5");
  const Batch golden = testing::batch_from_json(
      nlohmann::json::parse(read_file(testing::kModels / "t5" / "golden.json"))["cases"][0]["batch"]);
  const int64_t V = model.config().vocab_size;
  for (int64_t b = 0; b < golden.B; ++b) {  // the second source is padded (length 3 of 6)
    Batch one;
    one.B = 1, one.src_T = golden.src_T, one.T = golden.lengths[b];
    one.src_ids.assign(golden.src_ids.begin() + b * golden.src_T, golden.src_ids.begin() + (b + 1) * golden.src_T);
    one.src_lengths = {golden.src_lengths[b]};
    one.ids.assign(golden.ids.begin() + b * golden.T, golden.ids.begin() + b * golden.T + one.T);
    model.forward(one);
    const std::vector<float> reference(model.logits().span().begin(), model.logits().span().end());
    Session session(model, std::span(one.src_ids.data(), one.src_lengths[0]), {.max_T = one.T});
    std::span<const float> step = session.step(std::span(one.ids.data(), 2));
    for (int64_t t = 1; t < one.T; ++t) {
      const std::vector<float> got(step.begin(), step.end());
      const std::vector<float> want(reference.begin() + t * V, reference.begin() + (t + 1) * V);
      testing::expect_all_close(got, want, 2e-5, "t5 sequence " + std::to_string(b) + " position " + std::to_string(t));
      if (t + 1 < one.T) step = session.step(std::span(&one.ids[t + 1], 1));
    }
  }
  expect_error_mentions<Error>([&] { Session s(model); }, {"decodes from a source"});
}

TEST(Sampling, TheNotesDistributionsByHand) {
  const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  // softmax = e^{2,1,0,−1}/Σ = [0.6439, 0.2369, 0.0871, 0.0321].
  auto p = sampling_distribution(logits, 4, {});
  EXPECT_NEAR(p[0], 0.6439142598, 1e-9);
  EXPECT_NEAR(p[3], 0.0320586033, 1e-9);
  // Nucleus p = 0.8: 0.6439 < 0.8, 0.6439 + 0.2369 = 0.8808 ≥ 0.8, so tokens 0 and 1, renormalised: e/(e+1).
  p = sampling_distribution(logits, 4, {.top_p = 0.8});
  EXPECT_NEAR(p[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-12);
  EXPECT_EQ(p[2], 0.0);
  // Top-k = 3 at temperature 2: softmax of {1, 0.5, 0} over the three kept.
  p = sampling_distribution(logits, 4, {.temperature = 2.0, .top_k = 3});
  const double z = std::exp(1.0) + std::exp(0.5) + 1.0;
  EXPECT_NEAR(p[1], std::exp(0.5) / z, 1e-12);
  EXPECT_EQ(p[3], 0.0);
  // A NaN logit is never kept: the others' softmax.
  const float with_nan[4] = {2.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, -1.0f};
  p = sampling_distribution(with_nan, 4, {.top_p = 0.99});
  EXPECT_EQ(p[1], 0.0);
  EXPECT_NEAR(p[0], std::exp(2.0) / (std::exp(2.0) + 1.0 + std::exp(-1.0)), 1e-12);
  // Greedy and top-k = 1 are the argmax (the lower id wins a tie).
  const float tie[3] = {1.0f, 3.0f, 3.0f};
  EXPECT_EQ(sample_token(tie, 3, {.greedy = true}, 0.99), 1);
  EXPECT_EQ(sample_token(tie, 3, {.top_k = 1}, 0.99), 1);
  // A vocabulary's length (past the sixteen-lane passes, with a tail): the first of the maxima wherever it lies,
  // as std::max_element; NaNs passed over; all −∞ gives id 0.
  std::vector<float> many(50257, -1.0f);
  for (const int64_t at : {int64_t{0}, int64_t{15}, int64_t{16}, int64_t{31337}, int64_t{50240}, int64_t{50256}}) {
    many.assign(50257, -1.0f);
    many[at] = 5.0f;
    many[50256 - at / 2] = 5.0f;  // a tie after it (or at it)
    EXPECT_EQ(sample_token(many.data(), 50257, {.greedy = true}, 0.5), std::min(at, 50256 - at / 2)) << at;
  }
  many.assign(50257, -1.0f);
  many[3] = std::numeric_limits<float>::quiet_NaN(), many[7] = 2.0f;
  EXPECT_EQ(sample_token(many.data(), 50257, {.greedy = true}, 0.5), 7);
  many.assign(50257, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sample_token(many.data(), 50257, {.greedy = true}, 0.5), 0);
  expect_error_mentions<Error>([] { SamplingOptions{.top_p = 1.5}.validate(); }, {"top-p must be in (0, 1]"});
  expect_error_mentions<Error>([] { SamplingOptions{.temperature = 0}.validate(); }, {"temperature"});
  expect_error_mentions<Error>([] { SamplingOptions{.temperature = 1e-310}.validate(); }, {"temperature", "at least"});
}

// The k largest logits by hand: largest first, the lower id first among equal ones, NaNs never; fewer than k where
// fewer are numbers; none for k = 0.
TEST(Sampling, LargestLogitsByHand) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float logits[7] = {0.5f, 2.0f, nan, 2.0f, -1.0f, 3.0f, -std::numeric_limits<float>::infinity()};
  std::vector<int32_t> ids;
  largest_logits(logits, 7, 3, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 1, 3}));
  largest_logits(logits, 7, 100, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 1, 3, 0, 4, 6}));
  largest_logits(logits, 7, 0, ids);
  EXPECT_TRUE(ids.empty());
  const float all_nan[2] = {nan, nan};
  largest_logits(all_nan, 2, 1, ids);
  EXPECT_TRUE(ids.empty());
}

// A vocabulary's length: the distribution (sorting only as much as the nucleus needs, in growing prefixes) equals
// the definition worked out with a full sort, for nuclei of a few tokens to most of the vocabulary, with and
// without top-k; and a draw lands on the token whose cumulative interval (by id) holds u.
TEST(Sampling, ALargeVocabularyMatchesTheFullSortDefinition) {
  const int64_t V = 50257;
  std::vector<float> logits(V);
  Rng rng(7);
  for (float& z : logits) z = static_cast<float>(6.0 * rng.uniform_double() - 3.0);
  logits[123] = logits[456];  // a tie
  for (const SamplingOptions o : {SamplingOptions{.temperature = 0.7, .top_p = 0.9},
                                  SamplingOptions{.temperature = 1.3, .top_p = 0.999},
                                  SamplingOptions{.temperature = 0.2, .top_p = 0.3}, SamplingOptions{.top_k = 40, .top_p = 0.5},
                                  SamplingOptions{.temperature = 0.8}, SamplingOptions{.top_k = 1000}}) {
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    const int64_t k = o.top_k > 0 ? o.top_k : V;
    auto w = [&](int32_t id) { return std::exp((double{logits[id]} - logits[order[0]]) / o.temperature); };
    double total = 0.0;
    for (int64_t i = 0; i < k; ++i) total += w(order[i]);
    int64_t kept = 0;
    for (double mass = 0.0; kept < k;) {
      mass += w(order[kept++]) / total;
      if (mass >= o.top_p - 1e-12) break;
    }
    double kept_total = 0.0;
    for (int64_t i = 0; i < kept; ++i) kept_total += w(order[i]);
    std::vector<double> want(V, 0.0);
    for (int64_t i = 0; i < kept; ++i) want[order[i]] = w(order[i]) / kept_total;
    const std::vector<double> got = sampling_distribution(logits.data(), V, o);
    const std::string what = fmt::format("T={} k={} p={}", o.temperature, o.top_k, o.top_p);
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_EQ(got[v] == 0.0, want[v] == 0.0) << what << " token " << v;
      ASSERT_NEAR(got[v], want[v], 1e-12 + 1e-9 * want[v]) << what << " token " << v;
    }
    for (const double u : {0.0, 0.3, 0.77, 0.999999}) {
      double cumulative = 0.0;
      int32_t expected = 0;
      for (int64_t v = 0; v < V; ++v)
        if (want[v] > 0.0) {
          expected = static_cast<int32_t>(v);
          if (u < (cumulative += want[v])) break;
        }
      EXPECT_EQ(sample_token(logits.data(), V, o, u), expected) << what << " u=" << u;
    }
  }
}

// Sampling frequencies match the truncated distribution: 20,000 draws, each share within 4 binomial
// standard deviations (√(p(1−p)/n) ≤ 0.0036), so a fixed seed passes by a wide margin and a wrong
// distribution (off by 0.05 or more) fails.
TEST(Sampling, TopPFrequenciesMatchTheTruncatedDistribution) {
  const float logits[5] = {1.5f, 1.2f, 0.3f, -0.5f, -2.0f};
  const SamplingOptions options{.temperature = 0.9, .top_p = 0.85};
  const auto p = sampling_distribution(logits, 5, options);
  EXPECT_EQ(p[4], 0.0);
  Rng rng(2024);
  const int n = 20000;
  std::vector<int> counts(5);
  for (int i = 0; i < n; ++i) ++counts[sample_token(logits, 5, options, rng.uniform_double())];
  for (int v = 0; v < 5; ++v) {
    const double sigma = std::sqrt(p[v] * (1 - p[v]) / n);
    EXPECT_NEAR(double(counts[v]) / n, p[v], 4 * sigma + 1e-12) << "token " << v;
  }
}

TEST(Generate, TopKOneIsGreedyAndBudgetsAndErrorsHold) {
  Model model = load_model(testing::kModels / "gpt");
  // The stop strings and streaming decode text: a byte-level tokenizer decodes the fixture's 37 ids (bytes).
  std::string text;
  for (int i = 0; i < 2000; ++i) text += static_cast<char>('a' + i % 26), text += i % 7 == 0 ? " " : "";
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300});
  GenerateOptions greedy{.max_new_tokens = 6, .sampling = {.greedy = true}};
  GenerateOptions top1{.max_new_tokens = 6, .sampling = {.top_k = 1, .seed = 9}};
  const std::vector<int32_t> prompt = {5, 2, 1};
  const Generation a = generate(model, &tok, prompt, greedy), b = generate(model, &tok, prompt, top1);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.ids.size(), 6u);
  EXPECT_EQ(a.stopped_by, "length");
  // Sampling with a seed is reproducible.
  GenerateOptions sampled{.max_new_tokens = 8, .sampling = {.temperature = 1.3, .seed = 4}};
  EXPECT_EQ(generate(model, &tok, prompt, sampled).ids, generate(model, &tok, prompt, sampled).ids);
  // The context bounds the budget: 16 positions, so 13 new tokens after 3.
  EXPECT_EQ(generate(model, &tok, prompt, {.max_new_tokens = 100, .sampling = {.greedy = true}}).ids.size(), 13u);
  // EOS stops generation and is not returned.
  // EOS stops generation and is not returned: take the last token of the greedy run as EOS; generation
  // stops where it first appears.
  GenerateOptions eos = greedy;
  eos.eos = {a.ids.back()};
  const auto first = std::find(a.ids.begin(), a.ids.end(), a.ids.back());
  const Generation e = generate(model, &tok, prompt, eos);
  EXPECT_EQ(e.stopped_by, "eos");
  EXPECT_EQ(e.ids, std::vector<int32_t>(a.ids.begin(), first));
  expect_error_mentions<Error>([&] { generate(model, &tok, std::vector<int32_t>(16, 1), greedy); },
                               {"16 tokens", "context of 16"});
  expect_error_mentions<Error>([&] { generate(model, &tok, {}, greedy); }, {"no tokens"});
  expect_error_mentions<Error>([&] { generate(model, &tok, {99}, greedy); }, {"99", "vocabulary"});
}

// Log-probabilities of every next token after `prefix`, by a full forward.
std::vector<double> next_log_probs(Model& model, const std::vector<int32_t>& prefix) {
  Batch b;
  b.B = 1, b.T = static_cast<int64_t>(prefix.size()), b.ids = prefix;
  model.forward(b);
  const int64_t V = model.config().vocab_size;
  const float* z = model.logits().data() + (b.T - 1) * V;
  const double top = *std::max_element(z, z + V);
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - top);
  std::vector<double> out(V);
  for (int64_t v = 0; v < V; ++v) out[v] = z[v] - top - std::log(sum);
  return out;
}

TEST(BeamSearch, WidthOneIsGreedyAndFullWidthFindsTheBestPair) {
  Model model = load_model(testing::kModels / "gpt");
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> prompt = {5, 2, 1};
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + i % 26);
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300});
  const Generation greedy = generate(model, &tok, prompt, {.max_new_tokens = 5, .sampling = {.greedy = true}});
  const auto one = beam_search(model, prompt, 5, {}, {.width = 1});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].ids, greedy.ids);
  // Exhaustive over two tokens: 37² continuations. A beam as wide as the vocabulary keeps every first token,
  // so it must find the pair of largest log p(t₁) + log p(t₂ | t₁) (length penalty 0: the plain sum).
  const auto first = next_log_probs(model, prompt);
  double best = -INFINITY;
  std::vector<int32_t> best_pair;
  for (int32_t a = 0; a < V; ++a) {
    std::vector<int32_t> prefix = prompt;
    prefix.push_back(a);
    const auto second = next_log_probs(model, prefix);
    for (int32_t b = 0; b < V; ++b)
      if (first[a] + second[b] > best) best = first[a] + second[b], best_pair = {a, b};
  }
  const auto wide = beam_search(model, prompt, 2, {}, {.width = V, .length_penalty = 0.0, .n_best = 3});
  ASSERT_EQ(wide.size(), 3u);
  EXPECT_EQ(wide[0].ids, best_pair);
  EXPECT_NEAR(wide[0].log_prob, best, 1e-4);
  EXPECT_GE(wide[0].score, wide[1].score);
  EXPECT_GE(wide[1].score, wide[2].score);
  // With an end token, finished hypotheses leave it out and are scored with it.
  const auto with_eos = beam_search(model, prompt, 4, std::vector<int32_t>{greedy.ids[0]}, {.width = 3, .n_best = 3});
  for (const Hypothesis& h : with_eos) {
    if (h.finished) {
      EXPECT_EQ(std::find(h.ids.begin(), h.ids.end(), greedy.ids[0]), h.ids.end());
    }
  }
  testing::expect_error_mentions<Error>([&] { beam_search(model, prompt, 2, {}, {.width = 2, .n_best = 3}); },
                                        {"n_best must be in [1, width = 2]"});
}

// A vocabulary padded past its tokenizer's (Qwen's 151,936 rows for 151,665 tokens): generation never draws the
// ids no text has (attend generate printed nothing and failed on such an id), and beam search with `vocab`
// searches the tokenizer's ids under their own softmax.
TEST(Generate, APaddedVocabularyDrawsOnlyTheTokenizersIds) {
  Model model = load_model(testing::kModels / "gpt");  // 37 ids
  std::string text;
  for (int i = 0; i < 400; ++i) text += "abcde ";
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::WordPiece, .vocab_size = 20});
  const int64_t V = tok.vocab_size();
  ASSERT_LT(V, model.config().vocab_size);
  EXPECT_EQ(sampled_vocab(model, &tok), V);
  EXPECT_EQ(sampled_vocab(model, nullptr), model.config().vocab_size);
  // Nearly uniform draws: 13 of 13 + 4 × 6 tokens without a padded id would happen with odds of (V/37)^13 each
  // run, never for the three seeds together (≤ 1e-9).
  for (uint64_t seed : {1, 2, 3}) {
    const Generation g = generate(model, &tok, {1, 2}, {.max_new_tokens = 13, .sampling = {.temperature = 100.0, .seed = seed}});
    ASSERT_EQ(g.ids.size(), 13u);
    for (int32_t id : g.ids) EXPECT_LT(id, V) << "seed " << seed;
  }
  // Beam search over the tokenizer's ids: as wide as they are and two tokens long, it finds the best pair under
  // the softmax over those ids alone.
  const std::vector<int32_t> prompt = {1, 2};
  auto restricted = [&](std::vector<int32_t> prefix) {
    const std::vector<double> all = next_log_probs(model, prefix);
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(all[v]);
    std::vector<double> out(V);
    for (int64_t v = 0; v < V; ++v) out[v] = all[v] - std::log(sum);
    return out;
  };
  const auto first = restricted(prompt);
  double best = -INFINITY;
  std::vector<int32_t> best_pair;
  for (int32_t a = 0; a < V; ++a) {
    std::vector<int32_t> prefix = prompt;
    prefix.push_back(a);
    const auto second = restricted(prefix);
    for (int32_t b = 0; b < V; ++b)
      if (first[a] + second[b] > best) best = first[a] + second[b], best_pair = {a, b};
  }
  const auto beams = beam_search(model, prompt, 2, {}, {.width = V, .length_penalty = 0.0, .n_best = V, .vocab = V});
  EXPECT_EQ(beams[0].ids, best_pair);
  EXPECT_NEAR(beams[0].log_prob, best, 1e-4);
  for (const Hypothesis& h : beams)
    for (int32_t id : h.ids) EXPECT_LT(id, V);
  testing::expect_error_mentions<Error>([&] { beam_search(model, prompt, 2, {}, {.width = 2, .vocab = 38}); },
                                        {"vocab 38", "model's 37"});
}

// What a stream may show under stop strings: up to a stop string once one came, else all but the end that begins
// one (hand-worked).
TEST(Generate, StopScansHoldBackWhatAStopStringMayCut) {
  const std::vector<std::string> stops = {"world", "", "lo!"};
  auto scan = [&](const std::string& text, size_t shown = 0) {
    const StopScan s = scan_stops(text, shown, stops);
    return std::pair{s.end, s.stopped};
  };
  EXPECT_EQ(scan("hello"), (std::pair<size_t, bool>{3, false}));         // "lo" may begin "lo!"
  EXPECT_EQ(scan("hello wor"), (std::pair<size_t, bool>{6, false}));     // "wor" may begin "world"
  EXPECT_EQ(scan("hello world!"), (std::pair<size_t, bool>{6, true}));
  EXPECT_EQ(scan("hello!"), (std::pair<size_t, bool>{3, true}));          // "lo!" at 3
  EXPECT_EQ(scan("hello w"), (std::pair<size_t, bool>{6, false}));
  EXPECT_EQ(scan("hello x"), (std::pair<size_t, bool>{7, false}));       // nothing to hold
  // The search starts where a stop string could end past what was shown (those before were searched).
  EXPECT_EQ(scan("a world and a world", 12), (std::pair<size_t, bool>{14, true}));
  EXPECT_EQ(scan("a world", 6), (std::pair<size_t, bool>{2, true}));       // ends past the 6 shown: found
  EXPECT_EQ(scan("a world", 7), (std::pair<size_t, bool>{7, false}));      // within what was shown: searched then
  EXPECT_EQ(scan_stops("abc", 0, {}).end, 3u);
}

TEST(Generate, EncoderDecoderGreedyIsTheArgmaxOfFullForwardsAndBeamOneAgrees) {
  Model model = load_model(testing::kModels / "t5");
  const int64_t V = model.config().vocab_size;
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + i % 26);
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300});
  const std::vector<int32_t> source = {4, 9, 3, 7};
  const int32_t bos = 1;
  const Generation g = generate(model, &tok, source, {.max_new_tokens = 5, .sampling = {.greedy = true}, .decoder_start = bos});
  ASSERT_EQ(g.ids.size(), 5u);
  // Brute force: the full encoder-decoder forward on [BOS] + the tokens so far, argmax at the last position.
  std::vector<int32_t> decoder = {bos};
  for (int step = 0; step < 5; ++step) {
    Batch b;
    b.B = 1, b.src_T = static_cast<int64_t>(source.size()), b.src_ids = source;
    b.T = static_cast<int64_t>(decoder.size()), b.ids = decoder;
    model.forward(b);
    const float* z = model.logits().data() + (b.T - 1) * V;
    const auto next = static_cast<int32_t>(std::max_element(z, z + V) - z);
    EXPECT_EQ(g.ids[step], next) << "step " << step;
    decoder.push_back(next);
  }
  const auto beam = beam_search(model, source, 5, {}, {.width = 1, .decoder_start = bos});
  EXPECT_EQ(beam[0].ids, g.ids);
  expect_error_mentions<Error>([&] { generate(model, &tok, source, {.sampling = {.greedy = true}}); },
                               {"decoder's start token"});
}

// Prompts of lengths 3, 6 and 2 in one batch: every sequence generates what it generates alone, greedy and
// sampled (each sequence draws from its own stream of the seed); the first step's logits agree to fp32 rounding.
TEST(Generate, BatchedEqualsOneByOne) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + i % 26);
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300});
  const std::vector<std::vector<int32_t>> prompts = {{5, 2, 1}, {7, 3, 9, 4, 4, 1}, {11, 6}};
  for (const std::string name : {"gpt", "llama", "t5"}) {
    Model model = load_model(testing::kModels / name);
    const std::optional<int32_t> start = name == "t5" ? std::optional<int32_t>(1) : std::nullopt;
    for (const SamplingOptions sampling : {SamplingOptions{.greedy = true}, SamplingOptions{.temperature = 1.2, .seed = 8}}) {
      const GenerateOptions options{.max_new_tokens = 6, .sampling = sampling, .decoder_start = start};
      const auto batched = generate_batch(model, &tok, prompts, options);
      ASSERT_EQ(batched.size(), prompts.size());
      for (size_t b = 0; b < prompts.size(); ++b)
        EXPECT_EQ(batched[b].ids, generate(model, &tok, prompts[b], options).ids)
            << name << " prompt " << b << (sampling.greedy ? " greedy" : " sampled");
    }
  }
}

// The tokens run so far, into a fresh session of `model` (decoder-only: the prompt; t5: the source, then the
// decoder's tokens).
Session session_after(const Model& model, const std::vector<int32_t>& source, const std::vector<int32_t>& tokens) {
  Session s = model.config().architecture == Architecture::EncoderDecoder ? Session(model, source, {.max_T = 16})
                                                                          : Session(model, {.max_T = 16});
  if (!tokens.empty()) s.step(tokens);
  return s;
}

std::vector<float> copy(std::span<const float> x) { return {x.begin(), x.end()}; }

// One step over sessions at different positions and lengths equals each session stepped alone: bit for bit
// when each adds one token (every row takes the same matmul path as alone, and each sequence attends on its
// own), and to fp32 rounding when one of them runs a prompt (its rows then share a GEMM with the others, which
// tiles the sums differently from the one-row path).
TEST(Sessions, ABatchedStepEqualsEachSessionAlone) {
  const std::vector<int32_t> source = {3, 8, 2, 5};
  for (const std::string name : {"gpt", "llama", "t5"}) {
    const Model model = load_model(testing::kModels / name);
    const std::vector<std::vector<int32_t>> before = {{5, 2, 1, 7, 3}, {9}, {4, 4, 6, 1, 2, 8, 7}};
    const std::vector<std::vector<int32_t>> next_one = {{6}, {2}, {3}};
    const std::vector<std::vector<int32_t>> mixed = {{6}, {2, 7, 1, 9}, {3}};
    for (const auto* tokens : {&next_one, &mixed}) {
      std::vector<Session> together, alone;
      for (size_t i = 0; i < before.size(); ++i) {
        together.push_back(session_after(model, source, before[i]));
        alone.push_back(session_after(model, source, before[i]));
      }
      step({&together[0], &together[1], &together[2]}, *tokens);
      const bool one_token_each = tokens == &next_one;
      for (size_t i = 0; i < before.size(); ++i) {
        const std::vector<float> want = copy(alone[i].step((*tokens)[i]));
        const std::vector<float> got = copy(together[i].logits());
        const std::string what = name + " session " + std::to_string(i) + (one_token_each ? "" : " (with a prompt)");
        EXPECT_EQ(together[i].position(), alone[i].position()) << what;
        if (one_token_each)
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what << ": not bit for bit";
        else
          testing::expect_all_close(got, want, 2e-5, what);
      }
    }
  }
}

// Two threads generate on one model at once, each through its own sessions: every thread gets the tokens its
// prompt gets alone, greedy and sampled (several rounds, so that a race has chances to show).
TEST(Sessions, TwoThreadsOnOneModelGiveTheTokensOfEachAlone) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + i % 26);
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300});
  for (const std::string name : {"llama", "t5"}) {
    const Model model = load_model(testing::kModels / name);
    const std::optional<int32_t> start = name == "t5" ? std::optional<int32_t>(1) : std::nullopt;
    const std::vector<std::vector<int32_t>> prompts = {{5, 2, 1, 7}, {9, 3}};
    for (const SamplingOptions sampling : {SamplingOptions{.greedy = true}, SamplingOptions{.temperature = 1.5, .seed = 4}}) {
      const GenerateOptions options{.max_new_tokens = 10, .sampling = sampling, .decoder_start = start};
      std::vector<std::vector<int32_t>> alone;
      for (const auto& p : prompts) alone.push_back(generate(model, &tok, p, options).ids);
      for (int round = 0; round < 5; ++round) {
        std::vector<std::vector<int32_t>> threaded(prompts.size());
        std::vector<std::thread> threads;
        for (size_t i = 0; i < prompts.size(); ++i)
          threads.emplace_back([&, i] { threaded[i] = generate(model, &tok, prompts[i], options).ids; });
        for (auto& t : threads) t.join();
        for (size_t i = 0; i < prompts.size(); ++i)
          EXPECT_EQ(threaded[i], alone[i]) << name << " prompt " << i << " round " << round
                                           << (sampling.greedy ? " greedy" : " sampled");
      }
    }
  }
}

// A copied or assigned session continues from the same point on its own; steps check every session before
// changing any, and name the one at fault.
TEST(Sessions, CopiesContinueAloneAndBadStepsChangeNothing) {
  const Model model = load_model(testing::kModels / "gpt");
  const Model other = load_model(testing::kModels / "llama");
  Session a(model, {.max_T = 8});
  a.step(std::vector<int32_t>{5, 2, 1});
  Session b = a;  // a fork
  const std::vector<float> a4 = copy(a.step(std::vector<int32_t>{7}));
  const std::vector<float> b4 = copy(b.step(std::vector<int32_t>{7}));
  EXPECT_EQ(a4, b4);
  b.step(std::vector<int32_t>{9});  // b moves on; a is untouched
  EXPECT_EQ(a.position(), 4);
  EXPECT_EQ(b.position(), 5);
  Session c(model, {.max_T = 8});
  c.assign(a);
  EXPECT_EQ(copy(c.step(std::vector<int32_t>{3})), copy(a.step(std::vector<int32_t>{3})));

  Session d(model, {.max_T = 8});
  expect_error_mentions<Error>([&] { step({&a, &d}, {{1}, {2, 999999}}); }, {"session 1", "999999", "vocabulary"});
  expect_error_mentions<Error>([&] { step({&a, &d}, {{1}, {}}); }, {"session 1", "no tokens"});
  expect_error_mentions<Error>([&] { step({&a, &a}, {{1}, {1}}); }, {"session 1", "session 0"});
  expect_error_mentions<Error>([&] { step({&a, &d}, {{1, 2, 3, 4}, {1}}); }, {"session 0", "do not fit", "8"});
  Session e(other, {.max_T = 8});
  expect_error_mentions<Error>([&] { step({&a, &e}, {{1}, {1}}); }, {"session 1", "another model"});
  EXPECT_EQ(a.position(), 5);  // none of the failed steps moved anything
  EXPECT_EQ(d.position(), 0);
  expect_error_mentions<Error>([&] { Session(model, {.max_T = 100000}); }, {"max_T", "100000"});
  expect_error_mentions<Error>([&] { c.assign(Session(model, {.max_T = 4})); }, {"same model, capacity"});
}

// Decoding with 16-bit storage (bf16, f16) computes with what the model saved as a checkpoint of that dtype and
// loaded holds: the same values bit for bit, so the same logits; the prompt's matmuls (more than kGemvRows rows)
// take inputs rounded to that type as in mixed precision, each decoded token's stay fp32. A visible difference
// from fp32 (bf16 keeps 8 bits of mantissa, f16 11).
TEST(Decoding, SixteenBitStorageEqualsTheCheckpointOfThatType) {
  kernels::set_bf16_kernel_enabled(true);  // where oneDNN has one, even if this CPU does not take it by default
  const std::vector<int32_t> prompt = {5, 2, 1, 7, 3};
  ASSERT_GT(static_cast<int64_t>(prompt.size()), kernels::kGemvRows);  // the prompt takes the GEMM path
  auto decode_all = [&](const Model& m) {
    Session session(m, {.max_T = 8});
    std::vector<float> out = copy(session.step(prompt));
    for (int32_t next : {4, 9, 1}) {
      const int32_t one[] = {next};
      const std::span<const float> logits = session.step(one);
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  };
  for (const auto& [type, name, from_fp32, from_inputs] :
       {std::tuple{WeightType::BF16, "bf16", 0.2, 0.05}, std::tuple{WeightType::F16, "f16", 0.03, 0.0 /* unused: below */}}) {
    Model model = load_model(testing::kModels / "llama");
    const auto dir = std::filesystem::temp_directory_path() / "attend_test_16bit_decode";
    std::filesystem::remove_all(dir);
    save_model(model, dir, nullptr, type);
    Model rounded = load_model(dir);
    std::filesystem::remove_all(dir);
    const std::vector<float> fp32 = decode_all(model);
    model.set_storage(type);
    const std::vector<float> stored = decode_all(model);
    // The values are the checkpoint's, bit for bit; so decoding either model in that storage is one function.
    for (const Parameter* p : model.parameters()) {
      const Parameter* q = rounded.find(p->name);
      ASSERT_EQ(0, std::memcmp(p->value.data(), q->value.data(), p->numel() * sizeof(float))) << name << " " << p->name;
      const bool multiplied = is_projection(p->role) || (p->role == Role::TokenEmbedding && model.config().tie_embeddings);
      EXPECT_EQ(p->storage, multiplied ? type : WeightType::F32) << name << " " << p->name;
    }
    rounded.set_storage(type);
    EXPECT_EQ(decode_all(rounded), stored) << name;
    rounded.set_storage(WeightType::F32);  // the rounded values without the packed copies
    const std::vector<float> rounded_fp32 = decode_all(rounded);
    double largest = 0.0, from_rounding_inputs = 0.0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      largest = std::max(largest, double(std::abs(fp32[i] - stored[i])));
      from_rounding_inputs = std::max(from_rounding_inputs, double(std::abs(rounded_fp32[i] - stored[i])));
    }
    EXPECT_GT(largest, 1e-5) << name << ": 16 bits are not the fp32 model";
    EXPECT_LT(largest, from_fp32) << name;
    // The same rounded weights in fp32 differ only where the prompt's matmuls rounded their inputs: bf16's (as the
    // bf16 GEMM rounds them). fp16's stay fp32 (no fp16 GEMM runs them), so there the two differ by the order of
    // the sums alone (decoding's fp16 and fp32 gemv).
    if (type == WeightType::BF16) {
      EXPECT_GT(from_rounding_inputs, 1e-6) << name;
      EXPECT_LT(from_rounding_inputs, from_inputs) << name;
    } else {
      EXPECT_LT(from_rounding_inputs, 1e-5) << name << ": the prompt's inputs are not rounded to fp16";
    }
    // Without bf16 dot products (an AVX2 CPU, or the kernel turned off) the prompt's GEMMs run sgemm on the
    // weights' fp32 values and the rounded inputs: the same products of the same numbers, summed in another order
    // (a few ulps of sums over 16-32 terms, ~1e-6 of logits of size ~1).
    kernels::set_bf16_kernel_enabled(false);
    const std::vector<float> widened = decode_all(model);
    kernels::set_bf16_kernel_enabled(true);
    testing::expect_all_close(widened, stored, 1e-5, std::string(name) + ": sgemm on the 16-bit values");
    // Held as stored alone (Model::hold_as_stored: no fp32 copy of the packed matrices): decoding reads the same
    // 16-bit rows, lookups widen the table's rows exactly, and the prompt's sgemm (fp16; bf16 without bf16 dot
    // products) widens a piece of rows at a time: the same products, summed in another order at most.
    const size_t before = model.parameter_buffer().size();
    int64_t packed = 0;
    for (const Parameter* p : model.parameters()) packed += p->packed.empty() ? 0 : p->numel();
    model.hold_as_stored();
    EXPECT_EQ(model.parameter_buffer().size(), before - static_cast<size_t>(packed)) << name;
    for (const Parameter* p : model.parameters()) EXPECT_EQ(p->has_values(), p->packed.empty()) << name << " " << p->name;
    testing::expect_all_close(decode_all(model), stored, 1e-5, std::string(name) + ": held as stored");
    kernels::set_bf16_kernel_enabled(false);
    testing::expect_all_close(decode_all(model), widened, 1e-5, std::string(name) + ": held as stored, sgemm");
    kernels::set_bf16_kernel_enabled(true);
    model.ensure_values();  // back: the widened values are the rounded checkpoint's
    for (const Parameter* p : model.parameters())
      ASSERT_EQ(0, std::memcmp(p->value.data(), rounded.find(p->name)->value.data(), p->numel() * sizeof(float)))
          << name << " " << p->name;
  }
  kernels::set_bf16_kernel_enabled(kernels::bf16_kernel_preferred());
}

// Quantized storage: the multiplied matrices become ggml blocks and every value the blocks' values, so the model
// is the fp32 model of those values but for the int8 rounding of the inputs of the few-row matmuls (each decoded
// token, and a prompt's last position through the LM head); a prompt's other matmuls run sgemm on those values. A width that is not whole blocks of a K type takes the
// nearest type that fits, as llama.cpp does.
TEST(Decoding, QuantizedStorageIsTheDequantizedModel) {
  ModelConfig c;
  c.architecture = Architecture::Decoder, c.vocab_size = 64, c.d_model = 256, c.n_layers = 2, c.n_heads = 4;
  c.n_kv_heads = 2, c.activation = FfnKind::SwiGLU, c.d_ff = 320, c.position = PositionKind::RoPE;
  c.norm = NormKind::RMSNorm, c.max_seq_len = 16, c.bias = false;
  const std::vector<int32_t> prompt = {5, 2, 1, 7, 3};
  ASSERT_GT(static_cast<int64_t>(prompt.size()), kernels::kGemvRows);
  auto decode_all = [&](const Model& m, std::vector<float>* prompt_logits) {
    Session session(m, {.max_T = 8});
    *prompt_logits = copy(session.step(prompt));
    std::vector<float> out;
    for (int32_t next : {4, 9, 1}) {
      const int32_t one[] = {next};
      const std::span<const float> logits = session.step(one);
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  };
  for (const WeightType type : {WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1,
                                WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K}) {
    Model model(c);
    model.initialize(7);
    std::vector<float> original_prompt;
    decode_all(model, &original_prompt);
    model.set_storage(type);
    for (const Parameter* p : model.parameters()) {
      const bool multiplied = is_projection(p->role) || (p->role == Role::TokenEmbedding && c.tie_embeddings);
      if (!multiplied) {
        EXPECT_EQ(p->storage, WeightType::F32) << p->name;
        continue;
      }
      // FFN down's rows are 320 values: whole blocks of 32, not of 256.
      const bool k_type = type == WeightType::Q4_K || type == WeightType::Q5_K || type == WeightType::Q6_K;
      const WeightType fallback = type == WeightType::Q4_K ? WeightType::Q5_0 : type == WeightType::Q5_K ? WeightType::Q5_1 : WeightType::Q8_0;
      EXPECT_EQ(p->storage, k_type && p->value.size(-1) % 256 != 0 ? fallback : type)
          << weight_type_name(type) << " " << p->name;
    }
    std::vector<float> quant_prompt, dense_prompt;
    const std::vector<float> quantized = decode_all(model, &quant_prompt);
    Model dense(c);  // the same values in fp32: quantized, then the blocks dropped
    dense.initialize(7);
    dense.set_storage(type);
    dense.set_storage(WeightType::F32);
    const std::vector<float> reference = decode_all(dense, &dense_prompt);
    double largest = 0, scale = 0, moved = 0;
    for (size_t i = 0; i < quant_prompt.size(); ++i) largest = std::max(largest, double(std::abs(quant_prompt[i] - dense_prompt[i])));
    for (size_t i = 0; i < reference.size(); ++i) {
      largest = std::max(largest, double(std::abs(quantized[i] - reference[i])));
      scale = std::max(scale, double(std::abs(reference[i])));
    }
    for (size_t i = 0; i < original_prompt.size(); ++i) moved = std::max(moved, double(std::abs(quant_prompt[i] - original_prompt[i])));
    // int8 inputs (half a step of max/127 each) against the weights' own 4-8 bits: a few percent at most.
    EXPECT_GT(largest, 0.0) << weight_type_name(type) << ": the decoded tokens should take the int8 path";
    EXPECT_LT(largest, 0.03 * scale) << weight_type_name(type);
    EXPECT_GT(moved, 0.0) << weight_type_name(type) << ": quantizing changes the weights";
  }
}

// A quantized matrix multiplies a prompt by dequantizing its blocks a few MiB at a time (in bf16 where the CPU
// has bf16 products): a matrix of two segments of different types, big enough to take several pieces, against
// the fp64 product of its blocks' values. Each output within the rounding of both operands to bf16 (2^-8 each)
// plus fp32's sums; decoding's rows (int8 inputs, each within half a step of its block's max/127) too, one row
// written straight into the output and three interleaved.
TEST(Decoding, QuantizedMatmulInPiecesIsTheProductOfTheBlocksValues) {
  const int64_t C = 256, OC = 33600;  // pieces of at most 16 MiB: 32768 rows of bf16, 16384 of fp32
  Parameter w("w", {OC, C}, Role::FfnIn);
  Rng rng(11);
  for (float& v : w.value.span()) v = static_cast<float>(rng.normal()) * 0.05f;
  const std::pair<int64_t, WeightType> plan[] = {{600, WeightType::Q4_K}, {OC - 600, WeightType::Q8_0}};
  ASSERT_TRUE(nn::quantize_parameter(w, plan));
  ASSERT_EQ(w.quantized.size(), 2u);
  std::vector<float> values(static_cast<size_t>(OC * C)), bias(static_cast<size_t>(OC));
  nn::dequantize_values(w, values.data());
  for (float& b : bias) b = static_cast<float>(rng.normal());
  for (const int64_t N : {int64_t{1}, int64_t{3}, kernels::kGemvRows + 5}) {
    std::vector<float> x(static_cast<size_t>(N * C)), out(static_cast<size_t>(N * OC), NAN);
    for (float& v : x) v = static_cast<float>(rng.normal());
    nn::linear_forward(out.data(), x.data(), w, bias.data(), N, C, OC);
    for (int64_t n = 0; n < N; ++n) {
      const float* xn = x.data() + n * C;
      float amax = 0;
      for (int64_t j = 0; j < C; ++j) amax = std::max(amax, std::abs(xn[j]));
      for (int64_t o = 0; o < OC; ++o) {
        double want = bias[o], magnitude = 0, weights = 0;
        for (int64_t j = 0; j < C; ++j) {
          const double wj = values[o * C + j];
          want += wj * xn[j], magnitude += std::abs(wj * xn[j]), weights += std::abs(wj);
        }
        const double bound = (N > kernels::kGemvRows ? std::ldexp(1.0, -7) * magnitude : weights * amax / 254.0) +
                              1e-5 * (magnitude + std::abs(bias[o]));
        ASSERT_NEAR(out[n * OC + o], want, bound) << "N " << N << " row " << n << " output " << o;
      }
    }
  }
}

// ---- Hugging Face GPT-2 checkpoints ---------------------------------------------------------------

// tests/data/hf-gpt2 (tools/make_gpt2_fixtures.py): a tiny GPT-2 in the published layout (Conv1D [in, out],
// the attn.bias / masked_bias buffers, tied LM head), once with hub names and once with "transformer." names
// and an explicit lm_head. Logits at every prompt position against GPT-2 written in plain torch (fp64).
TEST(HfGpt2, LoadsBothLayoutsWithPyTorchsLogitsAndExportsBack) {
  const std::filesystem::path dir = std::filesystem::path(ATTEND_TEST_DATA) / "hf-gpt2";
  const auto golden = nlohmann::json::parse(read_file(dir / "golden.json"));
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = golden["logits"].get<std::vector<double>>();
  auto logits_of = [&](Model& model) {
    Batch b;
    b.B = 1, b.T = static_cast<int64_t>(prompt.size()), b.ids = prompt;
    model.forward(b);
    return std::vector<float>(model.logits().span().begin(), model.logits().span().end());
  };
  Model hub = load_model(dir);
  EXPECT_EQ(hub.config().activation, FfnKind::GELUTanh);
  EXPECT_TRUE(hub.config().tie_embeddings);
  testing::expect_all_close(logits_of(hub), expected, 2e-5, "hub layout");
  Model prefixed = load_model(dir / "prefixed");
  testing::expect_all_close(logits_of(prefixed), expected, 2e-5, "transformer. layout");
  // Greedy continuation through the KV cache.
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + i % 26);
  const Tokenizer tok = Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300});
  const Generation g = generate(hub, &tok, prompt, {.max_new_tokens = 8, .sampling = {.greedy = true}});
  EXPECT_EQ(g.ids, golden["greedy_ids"].get<std::vector<int32_t>>());
  // Export to the same layout and read it back: the same function, bit for bit.
  const auto out = std::filesystem::temp_directory_path() / "attend_test_hf_export";
  std::filesystem::remove_all(out);
  export_hf_gpt2(hub, out);
  Model again = load_model(out);
  EXPECT_EQ(logits_of(again), logits_of(hub));
  const auto exported = nlohmann::json::parse(read_file(out / "config.json"));
  EXPECT_EQ(exported["model_type"], "gpt2");
  EXPECT_EQ(exported["n_embd"], 32);
  EXPECT_EQ(SafetensorsReader(out / "model.safetensors").find("h.1.attn.c_attn.weight")->shape, Shape({32, 96}));
  // An unexpected tensor, and a model GPT-2 cannot express.
  std::vector<NamedTensor> tensors;
  const SafetensorsReader reader(out / "model.safetensors");
  std::vector<Tensor> kept;
  kept.reserve(reader.tensors().size() + 1);
  for (const TensorInfo& t : reader.tensors()) kept.push_back(reader.load(t.name)), tensors.push_back({t.name, &kept.back()});
  kept.emplace_back(Shape{2});
  tensors.push_back({"h.0.attn.rotary", &kept.back()});
  write_safetensors(out / "model.safetensors", tensors);
  expect_error_mentions<Error>([&] { load_model(out); }, {"unexpected tensor 'h.0.attn.rotary'"});
  Model llama = load_model(testing::kModels / "llama");
  expect_error_mentions<Error>([&] { export_hf_gpt2(llama, out); }, {"export hf-gpt2: position", "GPT-2 has learned positions"});
  std::filesystem::remove_all(out);
}

// Found by fuzz/fuzz_model_config: "model_type": [] (or an optional key of the wrong type) threw nlohmann's
// type_error out of the loader instead of an error naming the key.
TEST(HfGpt2, ConfigKeysOfTheWrongTypeAreNamed) {
  const auto config = [](const char* key, const char* value) {
    auto j = nlohmann::json::parse(R"({"model_type": "gpt2", "vocab_size": 50, "n_embd": 32, "n_layer": 2, "n_head": 4,
                                       "n_positions": 16, "n_inner": null})");
    j[key] = nlohmann::json::parse(value);
    return j;
  };
  auto no_gpt2_keys = config("model_type", R"(["gpt2"])");
  no_gpt2_keys.erase("n_embd");
  EXPECT_FALSE(formats::is_hf_gpt2_config(no_gpt2_keys));
  EXPECT_TRUE(formats::is_hf_gpt2_config(config("model_type", "[]")));  // GPT-2's own keys still say so
  EXPECT_FALSE(formats::is_hf_gpt2_config(config("model_type", R"("llama")")));
  EXPECT_EQ(formats::config_from_hf_gpt2(config("n_inner", "64"), "c.json").d_ff, 64);
  EXPECT_EQ(formats::config_from_hf_gpt2(config("n_inner", "null"), "c.json").d_ff, 128);
  const std::vector<std::pair<const char*, const char*>> bad = {{"activation_function", "3"},
                                                                 {"layer_norm_epsilon", R"("1e-5")"},
                                                                 {"tie_word_embeddings", "1"},
                                                                 {"n_inner", "[]"},
                                                                 {"attn_pdrop", "{}"}};
  for (const auto& [key, value] : bad)
    expect_error_mentions<Error>([&] { formats::config_from_hf_gpt2(config(key, value), "c.json"); },
                                 {"c.json", fmt::format("'{}'", key), "expected"});
}

}  // namespace
}  // namespace attend
