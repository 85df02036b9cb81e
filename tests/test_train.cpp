// Optimisers and schedules against steps worked out by hand (004 §9.1-9.3, 003 §4.1), β₂ warm-up's bias
// correction, weight-decay exclusions, and optimiser state saved and restored exactly.
#include "testing.h"
#include "train/optimizer.h"
#include <attend/schedule.h>

#include <attend/error.h>
#include <attend/plot.h>
#include <attend/safetensors.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace attend::train {
namespace {

using testing::expect_error_mentions;

// One scalar weight θ₀ = 1 (a matrix, so it is decayed) and one scalar bias, with the given gradients.
struct Scalars {
  Parameter w{"layer.weight", {1, 1}}, b{"layer.bias", {1}};
  Scalars() { w.value[0] = b.value[0] = 1.0f; }
  std::vector<Parameter*> all() { return {&w, &b}; }
  void grad(float g) { w.grad[0] = b.grad[0] = g; }
};

// Runs the optimiser over the gradients and returns θ after each step (of the weight, then of the bias).
std::vector<std::pair<double, double>> run(const OptimizerConfig& config, std::vector<float> grads, double lr) {
  Scalars s;
  Optimizer opt(config, s.all());
  std::vector<std::pair<double, double>> out;
  for (float g : grads) {
    s.grad(g);
    opt.step(lr);
    out.emplace_back(s.w.value[0], s.b.value[0]);
  }
  return out;
}

constexpr double kStep = 1e-7;  // float weights after one or two updates of size 0.1

TEST(Optimizers, SgdAndMomentumByHand) {
  OptimizerConfig c;
  c.kind = OptimizerKind::SGD;
  EXPECT_NEAR(run(c, {0.5f}, 0.1)[0].first, 0.95, kStep);  // θ − ηg = 1 − 0.1·0.5
  c.weight_decay = 0.1;
  auto r = run(c, {0.5f}, 0.1);
  EXPECT_NEAR(r[0].first, 0.94, kStep);   // L2: g + λθ = 0.6
  EXPECT_NEAR(r[0].second, 0.95, kStep);  // biases are never decayed
  c.weight_decay = 0.0;
  c.kind = OptimizerKind::Momentum;
  c.momentum = 0.9;
  // EMA form (004 eq. 5-6): v₁ = 0.1·1 = 0.1, θ₁ = 0.99; v₂ = 0.9·0.1 + 0.1 = 0.19, θ₂ = 0.99 − 0.019 = 0.971.
  r = run(c, {1.0f, 1.0f}, 0.1);
  EXPECT_NEAR(r[0].first, 0.99, kStep);
  EXPECT_NEAR(r[1].first, 0.971, kStep);
  // Classic form: v₁ = 1, θ₁ = 0.9; v₂ = 1.9, θ₂ = 0.9 − 0.19 = 0.71.
  c.momentum_ema = false;
  r = run(c, {1.0f, 1.0f}, 0.1);
  EXPECT_NEAR(r[0].first, 0.9, kStep);
  EXPECT_NEAR(r[1].first, 0.71, kStep);
}

TEST(Optimizers, AdamAndAdamWByHand) {
  // β₁ = 0.9, β₂ = 0.999, ε = 1e-8, η = 0.1; g₁ = 0.5, g₂ = −0.25.
  // Step 1: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25: the step is η·0.5/(0.5 + ε) ≈ η, so θ₁ = 0.9.
  // Step 2: m = 0.02, v = 0.00031225, m̂ = 0.02/0.19 = 0.10526, v̂ = 0.00031225/0.001999 = 0.15620,
  //         step = 0.1·0.10526/0.39522 = 0.026634, θ₂ = 0.873366.
  OptimizerConfig c;
  c.kind = OptimizerKind::Adam;
  auto r = run(c, {0.5f, -0.25f}, 0.1);
  EXPECT_NEAR(r[0].first, 0.9, kStep);
  EXPECT_NEAR(r[1].first, 0.8733662987, kStep);
  // Adam with L2 (λ = 0.1): g' = g + λθ, so g'₁ = 0.6 (still a step of η) and g'₂ = −0.25 + 0.09 = −0.16.
  c.weight_decay = 0.1;
  r = run(c, {0.5f, -0.25f}, 0.1);
  EXPECT_NEAR(r[1].first, 0.8544413675, kStep);
  EXPECT_NEAR(r[1].second, 0.8733662987, kStep);  // the bias is not decayed
  // AdamW (λ = 0.1, decoupled): θ₁ = (1 − ηλ)·1 − η = 0.89; θ₂ = 0.999·0.89 − 0.026634 = 0.854466.
  c.kind = OptimizerKind::AdamW;
  r = run(c, {0.5f, -0.25f}, 0.1);
  EXPECT_NEAR(r[0].first, 0.89, kStep);
  EXPECT_NEAR(r[1].first, 0.8544662987, kStep);
  EXPECT_NEAR(r[1].second, 0.8733662987, kStep);
}

TEST(Optimizers, Beta2WarmupKeepsTheBiasCorrectionExact) {
  // The notes (004 §9.2) give β₂ from 0.99 to 0.999 over the first steps (and say "decrease", though the
  // values increase; we follow the values). With a varying β₂ the second moment's weights sum to
  // 1 − Π_s β₂(s), not 1 − β₂ᵗ: with that correction a constant gradient gives v̂ = g² exactly, so every
  // step is η·g/(|g| + ε) = η. With 1 − β₂ᵗ the steps would drift.
  OptimizerConfig c;
  c.kind = OptimizerKind::Adam;
  c.beta2_initial = 0.99;
  c.beta2_warmup_steps = 4;
  Scalars s;
  Optimizer opt(c, s.all());
  EXPECT_DOUBLE_EQ(opt.beta2_at(1), 0.99 + 0.25 * 0.009);
  EXPECT_DOUBLE_EQ(opt.beta2_at(4), 0.999);
  for (int t = 1; t <= 8; ++t) {
    s.grad(0.3f);
    opt.step(0.01);
    EXPECT_NEAR(s.w.value[0], 1.0 - 0.01 * t, 1e-6) << "step " << t;
  }
}

TEST(Optimizers, WeightDecaySkipsNormsBiasesAndOptionallyEmbeddings) {
  OptimizerConfig c;
  EXPECT_TRUE(decays(Parameter("decoder.layers.0.attn.qkv.weight", {2, 2}), c));
  EXPECT_FALSE(decays(Parameter("decoder.layers.0.attn.qkv.bias", {2}), c));
  EXPECT_FALSE(decays(Parameter("decoder.layers.0.ffn_norm.weight", {2}), c));
  EXPECT_FALSE(decays(Parameter("decoder.norm.weight", {2}), c));
  EXPECT_FALSE(decays(Parameter("mlm.bias", {2}), c));
  EXPECT_FALSE(decays(Parameter("embed.tokens.weight", {2, 2}), c));
  EXPECT_FALSE(decays(Parameter("encoder.layers.0.attn.relative_attention_bias", {2, 2}), c));
  c.decay_embeddings = true;
  EXPECT_TRUE(decays(Parameter("embed.tokens.weight", {2, 2}), c));
  EXPECT_TRUE(decays(Parameter("lm_head.weight", {2, 2}), c));
}

TEST(Optimizers, StateSavedAndRestoredContinuesBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::Momentum, OptimizerKind::AdamW}) {
    OptimizerConfig c;
    c.kind = kind;
    c.weight_decay = 0.05;
    c.beta2_initial = 0.95;
    c.beta2_warmup_steps = 5;
    Parameter a("w", {3, 5}), b("w", {3, 5});
    Rng rng(3);
    for (int64_t i = 0; i < 15; ++i) a.value[i] = b.value[i] = rng.normal();
    Optimizer first(c, {&a});
    auto grads = [&](int step) {
      for (int64_t i = 0; i < 15; ++i) a.grad[i] = b.grad[i] = random_uniform(step, i) - 0.5f;
    };
    for (int step = 0; step < 3; ++step) grads(step), first.step(1e-2);
    const auto path = std::filesystem::temp_directory_path() / "attend_test_optimizer.safetensors";
    write_safetensors(path, first.state_tensors(), first.state_metadata());
    std::memcpy(b.value.data(), a.value.data(), 15 * 4);
    Optimizer second(c, {&b});
    second.load_state(SafetensorsReader(path));
    EXPECT_EQ(second.steps(), 3);
    for (int step = 3; step < 6; ++step) {
      grads(step);
      first.step(1e-2);
      second.step(1e-2);
    }
    EXPECT_EQ(std::memcmp(a.value.data(), b.value.data(), 15 * 4), 0) << optimizer_name(kind);
    OptimizerConfig other = c;
    other.kind = kind == OptimizerKind::AdamW ? OptimizerKind::SGD : OptimizerKind::AdamW;
    Optimizer wrong(other, {&b});
    expect_error_mentions<Error>([&] { wrong.load_state(SafetensorsReader(path)); }, {"holds", "state"});
    std::filesystem::remove(path);
  }
}

TEST(Schedules, EachByHand) {
  Schedule s{.kind = ScheduleKind::Cosine, .lr = 1.0, .warmup_steps = 10, .total_steps = 110, .min_lr = 0.1};
  s.validate();
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);               // warm-up: η·t/T_w
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_DOUBLE_EQ(s.at(60), 0.1 + 0.9 * 0.5);  // half way: cos(π/2) = 0
  EXPECT_NEAR(s.at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);             // the floor after T
  s.kind = ScheduleKind::Warmup;
  EXPECT_DOUBLE_EQ(s.at(3), 0.3);
  EXPECT_DOUBLE_EQ(s.at(500), 1.0);
  s.kind = ScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(s.at(1), 1.0);
  // The original Transformer (d_model 512, 4000 warm-up steps): the peak 512^−½·4000^−½ at t = T_w.
  Schedule t{.kind = ScheduleKind::InverseSqrt, .lr = 1.0, .warmup_steps = 4000, .d_model = 512};
  t.validate();
  EXPECT_NEAR(t.at(4000), 6.987712429686843e-4, 1e-18);
  EXPECT_NEAR(t.at(1), 1.746928107421711e-7, 1e-20);
  EXPECT_NEAR(t.at(16000), 6.987712429686843e-4 / 2, 1e-18);  // t^−½: four times later, half the rate
  expect_error_mentions<Error>(
      [] { Schedule{.kind = ScheduleKind::Cosine, .warmup_steps = 10, .total_steps = 5}.validate(); },
      {"total_steps (5) above warmup_steps (10)"});
  expect_error_mentions<Error>([] { parse_schedule("linear_decay"); }, {"constant, warmup, cosine, inverse_sqrt"});
}

TEST(Plot, SvgHasOneLinePerSeriesWithEveryFinitePoint) {
  Series train{"train <loss>", {1, 2, 3, 4}, {4.0, 3.0, NAN, 2.0}};
  Series val{"validation", {2, 4}, {3.5, 2.5}, true};
  const std::string svg = line_plot_svg({train, val}, {.title = "a & b", .x_label = "step", .y_label = "loss"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u);
  // The first polyline has three points: the NaN is skipped. Names and the title are escaped.
  const size_t p = svg.find("points=\"", svg.find("<polyline")) + 8;
  const std::string points = svg.substr(p, svg.find('"', p) - p);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 3);
  EXPECT_NE(svg.find("train &lt;loss&gt;"), std::string::npos);
  EXPECT_NE(svg.find("a &amp; b"), std::string::npos);
  size_t markers = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++markers;
  EXPECT_EQ(markers, 2u);  // only the validation series asked for markers
  expect_error_mentions<Error>([] { line_plot_svg({Series{"x", {1}, {NAN}}}, {.title = "empty"}); },
                               {"plot 'empty'", "no finite points"});
}

}  // namespace
}  // namespace attend::train
