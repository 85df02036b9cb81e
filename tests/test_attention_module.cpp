// The MultiHeadAttention layer against PyTorch 1.13 (tests/data/attention_golden.json from
// tools/make_attention_fixtures.py): outputs and every gradient, with the tiled and the reference
// kernel; generation through the KV cache; and bad configurations and shapes.
#include "nn/kv_cache.h"
#include "nn/attention.h"
#include "testing.h"

#include <attend/error.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace attend::nn {
namespace {

void expect_error_mentions(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  testing::expect_error_mentions<Error>(fn, needles);
}

// fp32 layer against float64 PyTorch: a few float ulps through two projections and a softmax.
constexpr double kGoldenTolerance = 2e-5;

const nlohmann::json& fixture() {
  static const nlohmann::json all = [] {
    std::ifstream in(ATTEND_TEST_DATA "/attention_golden.json");
    if (!in) throw std::runtime_error("cannot open " ATTEND_TEST_DATA "/attention_golden.json");
    return nlohmann::json::parse(in);
  }();
  return all;
}

std::vector<float> floats(const nlohmann::json& j) {
  auto d = j.get<std::vector<double>>();
  return std::vector<float>(d.begin(), d.end());
}

void set(Parameter& p, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), p.numel()) << p.name;
  std::copy(values.begin(), values.end(), p.value.data());
}

Parameter& find(MultiHeadAttention& m, const std::string& suffix) {
  for (Parameter* p : m.parameters())
    if (p->name.size() >= suffix.size() && p->name.compare(p->name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return *p;
  throw std::runtime_error("no parameter " + suffix);
}

std::vector<float> concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

void expect_close(const float* actual, const std::vector<float>& expected, const std::string& what) {
  testing::expect_all_close(std::vector<float>(actual, actual + expected.size()), expected, kGoldenTolerance, what);
}

struct GoldenCase {
  const char* name;
  AttentionKernel kernel;
};

class AttentionGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AttentionGolden, OutputAndEveryGradientMatchPyTorch) {
  const auto [name, kernel] = GetParam();
  const auto& f = fixture();
  const auto& c = f.at("cases").at(name);
  const int64_t B = f.at("B"), T = f.at("T"), C = f.at("C"), H = f.at("H");
  const std::string case_name = name;
  AttentionConfig config;
  config.d_model = C, config.n_heads = H, config.kernel = kernel;
  config.causal = c.at("causal").get<bool>();
  config.bias = c.at("weights").contains("o.bias");
  if (case_name == "gqa_rope_causal") config.n_kv_heads = c.at("n_kv_heads"), config.position = PositionScheme::RoPE;
  if (case_name == "alibi_padding") config.position = PositionScheme::ALiBi;
  if (case_name == "t5_cross") {
    config.cross = true, config.position = PositionScheme::T5, config.scale = 1.0;
    config.t5_num_buckets = 8, config.t5_max_distance = 16;
  }
  MultiHeadAttention attention("attn", config);
  const auto& w = c.at("weights");
  for (auto it = w.begin(); it != w.end(); ++it) {
    if (it.key() == "wq" || it.key() == "wk" || it.key() == "wv") continue;
    set(find(attention, it.key()), floats(it.value()));
  }
  if (case_name == "gqa_rope_causal") set(find(attention, "qkv.weight"), concat({floats(w["wq"]), floats(w["wk"]), floats(w["wv"])}));

  Tensor x({B, T, C}, floats(c.at("inputs").at("x")));
  Tensor context;
  const bool cross = c.at("inputs").contains("context");
  if (cross) context = Tensor({B, c.at("Tk").get<int64_t>(), C}, floats(c.at("inputs").at("context")));
  std::vector<int32_t> lengths;
  AttentionCall call;
  if (c.contains("key_lengths")) {
    lengths = c.at("key_lengths").get<std::vector<int32_t>>();
    call.key_lengths = lengths.data();
  }
  MultiHeadAttention::Saved saved;
  Tensor out = attention.forward(x, cross ? &context : nullptr, call, &saved);
  expect_close(out.data(), floats(c.at("out")), "output");
  Tensor dout({B, T, C}, floats(c.at("up")));
  Tensor dcontext;
  Tensor dx = attention.backward(dout, saved, cross ? &dcontext : nullptr);
  const auto& g = c.at("grads");
  expect_close(dx.data(), floats(g.at("x")), "dx");
  if (cross) expect_close(dcontext.data(), floats(g.at("context")), "dcontext");
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::string key = it.key();
    if (key == "x" || key == "context" || key == "wq" || key == "wk" || key == "wv") continue;
    expect_close(find(attention, key).grad.data(), floats(it.value()), "d" + key);
  }
  if (case_name == "gqa_rope_causal")
    expect_close(find(attention, "qkv.weight").grad.data(), concat({floats(g["wq"]), floats(g["wk"]), floats(g["wv"])}),
                 "dqkv.weight");
}

INSTANTIATE_TEST_SUITE_P(
    PyTorch, AttentionGolden,
    ::testing::Values(GoldenCase{"mha_causal_padding", AttentionKernel::Flash},
                      GoldenCase{"mha_causal_padding", AttentionKernel::Reference},
                      GoldenCase{"gqa_rope_causal", AttentionKernel::Flash},
                      GoldenCase{"gqa_rope_causal", AttentionKernel::Reference},
                      GoldenCase{"alibi_padding", AttentionKernel::Flash},
                      GoldenCase{"alibi_padding", AttentionKernel::Reference},
                      GoldenCase{"t5_cross", AttentionKernel::Flash}, GoldenCase{"t5_cross", AttentionKernel::Reference}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) {
      return std::string(info.param.name) + "_" + attention_kernel_name(info.param.kernel);
    });

void randomize(MultiHeadAttention& m, uint64_t seed) {
  Rng rng(seed);
  for (Parameter* p : m.parameters())
    for (float& v : p->value.span()) v = rng.normal(0.0f, 0.3f);
}

// Generation: feeding the tokens one at a time through each sequence's KV cache, both sequences in one step,
// gives the full causal forward's output at every position (RoPE positions and GQA included).
TEST(AttentionLayer, DecodingThroughTheCacheEqualsTheFullForward) {
  AttentionConfig config{.d_model = 32, .n_heads = 4, .n_kv_heads = 2, .bias = true, .causal = true};
  config.position = PositionScheme::RoPE;
  MultiHeadAttention attention("attn", config);
  randomize(attention, 3);
  const int64_t B = 2, T = 9, C = 32;
  Tensor x({B, T, C}, testing::cast<float>(testing::random_vector(B * T * C, 4)));
  Tensor full = attention.forward(x, nullptr, {}, nullptr);
  std::vector<nn::KVCache> caches(B, nn::KVCache({.n_layers = 1, .batch = 1, .max_T = 16, .n_kv_heads = 2, .d_head = 8}));
  for (int64_t t = 0; t < T; ++t) {
    Tensor tokens({B, C});  // row b: sequence b's token t
    std::vector<CachedSequence> sequences;
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(x.data() + (b * T + t) * C, C, tokens.data() + b * C);
      sequences.push_back({.cache = &caches[b], .position = t, .rows = 1});
    }
    Tensor out = attention.step(tokens, sequences, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < C; ++e)
        ASSERT_NEAR(out[b * C + e], full[(b * T + t) * C + e], 1e-5) << "position " << t << " batch " << b;
  }
  // Backward needs a forward that saved its state.
  expect_error_mentions([&] { attention.backward(Tensor({B, 1, C}), MultiHeadAttention::Saved{}, nullptr); },
                        {"attn", "saved"});
}

// A step over sequences at different positions and lengths (one runs a 4-token prompt while the other decodes
// its 6th token) gives each sequence the rows it gets when stepped alone.
TEST(AttentionLayer, AStepOverSequencesAtDifferentPositionsEqualsEachAlone) {
  AttentionConfig config{.d_model = 32, .n_heads = 4, .n_kv_heads = 2, .bias = true, .causal = true};
  config.position = PositionScheme::RoPE;
  MultiHeadAttention attention("attn", config);
  randomize(attention, 5);
  const int64_t C = 32;
  const nn::KVCacheConfig cc{.n_layers = 1, .batch = 1, .max_T = 16, .n_kv_heads = 2, .d_head = 8};
  const std::vector<float> rows = testing::cast<float>(testing::random_vector(10 * C, 6));
  auto run = [&](nn::KVCache& cache, int64_t first, int64_t n, int64_t position) {  // rows [first, first + n)
    Tensor x({n, C}, std::vector<float>(rows.begin() + first * C, rows.begin() + (first + n) * C));
    const CachedSequence seq{.cache = &cache, .position = position, .rows = n};
    return attention.step(x, std::span(&seq, 1), 0);
  };
  nn::KVCache alone_a(cc), alone_b(cc), together_a(cc), together_b(cc);
  run(alone_b, 0, 5, 0);  // sequence b's first five tokens: rows 0-4
  run(together_b, 0, 5, 0);
  const Tensor a = run(alone_a, 5, 4, 0);  // sequence a's prompt: rows 5-8
  const Tensor b = run(alone_b, 9, 1, 5);  // sequence b's sixth token: row 9
  Tensor x({5, C}, std::vector<float>(rows.begin() + 5 * C, rows.end()));
  const std::vector<CachedSequence> both{{.cache = &together_a, .position = 0, .rows = 4},
                                         {.cache = &together_b, .position = 5, .rows = 1}};
  const Tensor y = attention.step(x, both, 0);
  for (int64_t e = 0; e < 4 * C; ++e) ASSERT_NEAR(y[e], a[e], 1e-5) << "sequence a, element " << e;
  for (int64_t e = 0; e < C; ++e) ASSERT_NEAR(y[4 * C + e], b[e], 1e-5) << "sequence b, element " << e;
  // A step whose sequences do not cover the input is an error naming both counts.
  expect_error_mentions([&] { attention.step(x, std::span(both.data(), 1), 0); }, {"4 rows", "5"});
}

TEST(AttentionLayer, DropoutIsReproducibleAndTheKernelsAgree) {
  AttentionConfig config{.d_model = 16, .n_heads = 2, .dropout = 0.2f};
  MultiHeadAttention flash("a", config);
  config.kernel = AttentionKernel::Reference;
  MultiHeadAttention reference("a", config);
  randomize(flash, 9);
  randomize(reference, 9);
  Tensor x({1, 6, 16}, testing::cast<float>(testing::random_vector(96, 10)));
  Rng r1(77), r2(77);
  AttentionCall call;
  call.training = true;
  call.rng = &r1;
  MultiHeadAttention::Saved saved;
  Tensor a = flash.forward(x, nullptr, call, &saved);
  call.rng = &r2;
  Tensor b = reference.forward(x, nullptr, call, &saved);
  testing::expect_all_close(std::vector<float>(a.span().begin(), a.span().end()),
                            std::vector<float>(b.span().begin(), b.span().end()), 1e-5, "dropout outputs");
  Tensor eval = flash.forward(x, nullptr, {}, nullptr);  // evaluation: no dropout, a different output
  double diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) diff += std::abs(a[i] - eval[i]);
  EXPECT_GT(diff, 1e-3);
}

TEST(AttentionLayer, BadConfigurationsAreClearErrors) {
  expect_error_mentions([] { MultiHeadAttention("a", {.d_model = 770, .n_heads = 12}); }, {"770", "12"});
  expect_error_mentions([] { MultiHeadAttention("a", {.d_model = 768, .n_heads = 12, .n_kv_heads = 5}); },
                        {"n_heads 12", "n_kv_heads 5"});
  AttentionConfig odd{.d_model = 12, .n_heads = 4};  // d_head 3
  odd.position = PositionScheme::RoPE;
  expect_error_mentions([&] { MultiHeadAttention("a", odd); }, {"d_head must be even", "d_head 3"});
  expect_error_mentions([] { parse_position_scheme("sinusoid"); }, {"sinusoid", "rope"});
  AttentionConfig linear{.d_model = 16, .n_heads = 2, .kernel = AttentionKernel::Linear};
  linear.position = PositionScheme::ALiBi;
  expect_error_mentions([&] { MultiHeadAttention("a", linear); }, {"linear", "alibi"});
}

TEST(AttentionLayer, BadShapesNameBothShapes) {
  MultiHeadAttention self("layer.0.attn", {.d_model = 16, .n_heads = 2});
  expect_error_mentions([&] { self.forward(Tensor({2, 5, 15}), nullptr, {}, nullptr); },
                        {"layer.0.attn", "[2, 5, 15]", "16"});
  AttentionConfig cross_config{.d_model = 16, .n_heads = 2, .cross = true};
  MultiHeadAttention cross("dec.cross", cross_config);
  Tensor ctx({3, 7, 16});
  expect_error_mentions([&] { cross.forward(Tensor({2, 5, 16}), &ctx, {}, nullptr); }, {"[2, 5, 16]", "[3, 7, 16]"});
  expect_error_mentions([&] { cross.forward(Tensor({2, 5, 16}), nullptr, {}, nullptr); }, {"context"});
  std::vector<int32_t> lengths = {5, 9};
  AttentionCall call;
  call.key_lengths = lengths.data();
  expect_error_mentions([&] { self.forward(Tensor({2, 5, 16}), nullptr, call, nullptr); }, {"key length 9", "[0, 5]"});
  std::vector<uint8_t> mask(2 * 5 * 4, 1);
  AttentionCall masked;
  masked.mask = mask.data(), masked.mask_shape = Shape{2, 5, 4};
  expect_error_mentions([&] { self.forward(Tensor({2, 5, 16}), nullptr, masked, nullptr); },
                        {"mask", "[2, 5, 4]", "[2, 5, 5]"});
  mask.resize(2 * 5 * 5, 1);
  masked.mask = mask.data(), masked.mask_shape = Shape{2, 5, 5};
  self.forward(Tensor({2, 5, 16}), nullptr, masked, nullptr);  // the right shape is accepted
  MultiHeadAttention::Saved saved;
  self.forward(Tensor({2, 5, 16}), nullptr, {}, &saved);
  expect_error_mentions([&] { self.backward(Tensor({2, 4, 16}), saved, nullptr); }, {"[2, 4, 16]", "[2, 5, 16]"});
}

}  // namespace
}  // namespace attend::nn
