// Optimisers and schedules against steps worked out by hand (004 §9.1-9.3, 003 §4.1), β₂ warm-up's bias
// correction, weight-decay exclusions, and optimiser state saved and restored exactly.
#include "fixtures.h"
#include "testing.h"
#include "train/optimizer.h"
#include <attend/schedule.h>

#include <attend/error.h>
#include <attend/plot.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/safetensors.h>
#include <attend/tokenizer.h>
#include <attend/train.h>
#include <attend/model_dir.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

namespace attend::train {
namespace {

using testing::expect_error_mentions;

// One scalar weight θ₀ = 1 (a matrix, so it is decayed) and one scalar bias, with the given gradients.
struct Scalars {
  Parameter w{"layer.weight", {1, 1}, Role::FfnIn}, b{"layer.bias", {1}, Role::FfnBias};
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
  EXPECT_TRUE(decays(Parameter("decoder.layers.0.attn.qkv.weight", {2, 2}, Role::AttentionQkv), c));
  EXPECT_FALSE(decays(Parameter("decoder.layers.0.attn.qkv.bias", {2}, Role::AttentionBias), c));
  EXPECT_FALSE(decays(Parameter("decoder.layers.0.ffn_norm.weight", {2}, Role::NormGain), c));
  EXPECT_FALSE(decays(Parameter("decoder.norm.weight", {2}, Role::NormGain), c));
  EXPECT_FALSE(decays(Parameter("mlm.bias", {2}, Role::HeadBias), c));
  EXPECT_FALSE(decays(Parameter("embed.tokens.weight", {2, 2}, Role::TokenEmbedding), c));
  EXPECT_FALSE(decays(Parameter("encoder.layers.0.attn.relative_attention_bias", {2, 2}, Role::RelativePositionBias), c));
  c.decay_embeddings = true;
  EXPECT_TRUE(decays(Parameter("embed.tokens.weight", {2, 2}, Role::TokenEmbedding), c));
  EXPECT_TRUE(decays(Parameter("lm_head.weight", {2, 2}, Role::HeadMatrix), c));
}

TEST(Optimizers, StateSavedAndRestoredContinuesBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::Momentum, OptimizerKind::AdamW}) {
    OptimizerConfig c;
    c.kind = kind;
    c.weight_decay = 0.05;
    c.beta2_initial = 0.95;
    c.beta2_warmup_steps = 5;
    Parameter a("w", {3, 5}, Role::FfnIn), b("w", {3, 5}, Role::FfnIn);
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

// A 100,000-step curve keeps at most four points per pixel column (first, lowest, highest, last), so the
// file stays small, and its extremes are still drawn.
TEST(Plot, LongSeriesAreThinnedPerPixelColumnKeepingTheExtremes) {
  Series noisy{"loss", {}, {}};
  for (int i = 0; i < 100000; ++i) noisy.x.push_back(i), noisy.y.push_back(std::sin(i * 0.37) + (i == 54321 ? 5.0 : 0.0));
  const std::string svg = line_plot_svg({noisy}, {.title = "long", .width = 800});
  const size_t p = svg.find("points=\"", svg.find("<polyline")) + 8;
  const std::string points = svg.substr(p, svg.find('"', p) - p);
  const auto n = std::count(points.begin(), points.end(), ',');
  EXPECT_GT(n, 800);
  EXPECT_LE(n, 4 * 801);
  // The one spike (y ≈ 5, the rest within ±1) stays: the highest point drawn stands far above the next.
  std::vector<double> ys;  // pixel rows: smaller is higher
  std::istringstream in(points);
  for (std::string xy; in >> xy;) ys.push_back(std::stod(xy.substr(xy.find(',') + 1)));
  std::sort(ys.begin(), ys.end());
  EXPECT_GT(ys[1] - ys[0], 0.5 * (ys.back() - ys[0])) << "the spike was dropped";
}

// ---- The trainer -----------------------------------------------------------------------------------

namespace fs = std::filesystem;

ModelConfig tiny_gpt() {
  ModelConfig c;
  c.vocab_size = 16, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.max_seq_len = 32;
  c.activation = FfnKind::GELUTanh;
  c.seed = 11;
  return c;
}

// A stream of 2000 tokens that repeats "1 2 … 9" with a random token between repeats.
std::vector<int32_t> pattern_tokens(uint64_t seed, int n = 2000) {
  Rng rng(seed);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    for (int32_t t = 1; t <= 9; ++t) out.push_back(t);
    out.push_back(10 + static_cast<int32_t>(rng.below(6)));
  }
  return out;
}

fs::path run_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attend_test_run_" + name);
  fs::remove_all(dir);
  return dir;
}

TrainConfig quick_config(int64_t steps) {
  TrainConfig c;
  c.steps = steps;
  c.schedule = Schedule{.kind = ScheduleKind::Cosine, .lr = 3e-3, .warmup_steps = 2, .total_steps = 8, .min_lr = 3e-4};
  c.optimizer.weight_decay = 0.1;
  c.clip_norm = 1.0;
  c.label_smoothing = 0.1f;
  c.eval_every = 2;
  c.checkpoint_every = 2;
  return c;
}

std::vector<float> weights(Model& m) {
  std::vector<float> out;
  for (Parameter* p : m.parameters()) out.insert(out.end(), p->value.span().begin(), p->value.span().end());
  return out;
}

std::vector<float> grads(Model& m) {
  std::vector<float> out;
  for (Parameter* p : m.parameters()) out.insert(out.end(), p->grad.span().begin(), p->grad.span().end());
  return out;
}

// Two micro-batches of 2 sequences give the gradient of one batch of 4 (the same sequences): each
// micro-batch's mean is weighted by its share of the targets, and the optimizer steps once per batch.
//
// Between the two runs only the order of the fp32 additions differs: each gradient is a sum over the
// batch's n = 64 target positions, added in one pass or as two halves. Two orders of a sum of n terms
// differ by at most 2·γ_n·Σ|terms| (γ_n = n·u/(1 − n·u), u = 2⁻²⁴); the terms' magnitudes are taken as the
// largest gradient's. That bound holds only from the same weights: under AdamW, m/√v of a gradient that is
// zero up to rounding is ±1 either way, so one step's rounding can move a weight by a whole learning rate.
// Each step therefore starts b from a's weights, and the gradients are compared at every step; with SGD,
// whose update is linear in the gradient, the weights themselves are compared after 3 unsynchronised steps.
TEST(Trainer, GradientAccumulationGivesTheBigBatchUpdate) {
  const auto tokens = pattern_tokens(1);
  LmDataset big(tokens, {}, {.batch_size = 4, .seq_len = 16, .seed = 3});
  LmDataset small(tokens, {}, {.batch_size = 2, .seq_len = 16, .seed = 3});
  constexpr double n = 64, u = 0x1p-24, gamma = n * u / (1 - n * u);
  for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::SGD}) {
    TrainConfig c = quick_config(3);
    c.optimizer.kind = kind;
    c.clip_norm = 0.0;
    Trainer a(Model(tiny_gpt()), big, c, run_dir("accum_a"));
    c.grad_accum = 2;
    Trainer b(Model(tiny_gpt()), small, c, run_dir("accum_b"));
    for (int i = 0; i < 3; ++i) {
      if (kind == OptimizerKind::AdamW) {
        const std::vector<Parameter*> from = a.model().parameters(), to = b.model().parameters();
        for (size_t k = 0; k < from.size(); ++k) std::ranges::copy(from[k]->value.span(), to[k]->value.span().begin());
      }
      const StepReport ra = a.step(), rb = b.step();
      EXPECT_NEAR(ra.loss, rb.loss, 2 * gamma * ra.loss) << "step " << i + 1;
      EXPECT_EQ(ra.tokens, rb.tokens);
      EXPECT_EQ(ra.lr, rb.lr) << "step " << i + 1 << ": one optimizer step per accumulated batch";
      const std::vector<float> ga = grads(a.model()), gb = grads(b.model());
      double largest = 0.0;
      for (float g : ga) largest = std::max(largest, double(std::abs(g)));
      for (size_t k = 0; k < ga.size(); ++k)
        ASSERT_NEAR(ga[k], gb[k], 2 * gamma * largest) << "step " << i + 1 << " at " << k;
    }
    if (kind == OptimizerKind::SGD)
      testing::expect_all_close(weights(a.model()), weights(b.model()), 1e-6, "SGD weights after 3 steps");
  }
}

// Also in mixed precision: f16's loss scale (here doubling every 2 clean steps) is part of the saved state.
class ResumeIn : public ::testing::TestWithParam<Precision> {};

TEST_P(ResumeIn, ContinuesBitForBit) {
  const auto tokens = pattern_tokens(2);
  LmDataset data(std::vector<int32_t>(tokens.begin(), tokens.begin() + 1600),
                 std::vector<int32_t>(tokens.begin() + 1600, tokens.end()), {.batch_size = 4, .seq_len = 16, .seed = 5});
  ModelConfig mc = tiny_gpt();
  mc.residual_dropout = mc.attention_dropout = 0.1f;  // the dropout stream must continue exactly too
  TrainConfig c = quick_config(6);
  c.precision = GetParam();
  c.loss_scale = 1024.0;
  c.loss_scale_window = 3;  // doubles after step 3 (saved at the step-4 checkpoint) and again after step 6
  // ctest runs the instances in parallel processes: each has its own directories.
  const std::string tag = std::to_string(static_cast<int>(GetParam()));
  const fs::path straight = run_dir("straight" + tag), stopped = run_dir("stopped" + tag);
  Trainer once(Model(mc), data, c, straight);
  once.run();
  {
    TrainConfig first = c;
    first.steps = 4;  // stops at a checkpoint ...
    Trainer part(Model(mc), data, first, stopped);
    part.run();
  }
  Trainer rest(Model(mc), data, c, stopped, /*resume=*/true);  // ... and carries on from it
  EXPECT_EQ(rest.steps_done(), 4);
  rest.run();
  const std::vector<float> a = weights(once.model()), b = weights(rest.model());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "weights differ after resuming";
  // The metrics agree loss for loss (timings aside).
  auto losses = [](const fs::path& dir) {
    std::vector<double> out;
    std::istringstream lines(read_file(dir / "metrics.jsonl"));
    std::string line;
    while (std::getline(lines, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    return out;
  };
  EXPECT_EQ(losses(straight), losses(stopped));
  EXPECT_EQ(losses(stopped).size(), 6u);
  // The checkpoint is a model directory.
  EXPECT_EQ(load_model(stopped / "checkpoint").config().to_json(), mc.to_json());
  if (GetParam() == Precision::F16) {
    EXPECT_EQ(nlohmann::json::parse(read_file(stopped / "checkpoint" / "trainer.json"))["loss_scale"], 4096.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ResumeIn, ::testing::Values(Precision::F32, Precision::BF16, Precision::F16),
                         [](const auto& info) {
                           return std::string(info.param == Precision::F32    ? "f32"
                                              : info.param == Precision::BF16 ? "bf16"
                                                                               : "f16");
                         });

// Mixed precision changes only the matmuls' operands: the loss and gradients follow fp32's to the format's
// precision (bf16 keeps 8 bits of mantissa, fp16 11), and the master weights stay fp32. fp16's gradients
// are taken with a loss scale of 2^10 and divided back, as the trainer does.
TEST(MixedPrecision, LossAndGradientsFollowFp32) {
  const auto tokens = pattern_tokens(7);
  LmDataset data(tokens, {}, {.batch_size = 4, .seq_len = 16, .seed = 2});
  const Batch batch = data.train_batch(0);
  Model fp32(tiny_gpt());
  const double loss32 = fp32.forward(batch).loss;
  fp32.backward();
  const std::vector<float> g32 = grads(fp32);
  for (auto [precision, name, tolerance] : {std::tuple{Precision::BF16, "bf16", 0.03}, {Precision::F16, "f16", 0.005}}) {
    Model mixed(tiny_gpt());
    const double loss = mixed.forward(batch, {.precision = precision}).loss;
    mixed.backward(1024.0);
    EXPECT_NEAR(loss, loss32, tolerance * loss32) << name;
    EXPECT_NE(loss, loss32) << name << ": the rounded path did not run";
    std::vector<float> g = grads(mixed);
    for (float& x : g) x /= 1024.0f;
    double dot = 0.0, n32 = 0.0, n = 0.0, err = 0.0;
    for (size_t i = 0; i < g32.size(); ++i) {
      dot += double(g32[i]) * g[i], n32 += double(g32[i]) * g32[i], n += double(g[i]) * g[i];
      err += (double(g32[i]) - g[i]) * (double(g32[i]) - g[i]);
    }
    EXPECT_GT(dot / std::sqrt(n32 * n), 0.999) << name;  // the same direction
    EXPECT_LT(std::sqrt(err / n32), tolerance) << name;  // and close in norm
    EXPECT_EQ(weights(mixed), weights(fp32)) << name << ": the master weights changed";
    EXPECT_EQ(mixed.forward(batch).loss, loss32) << name;  // f32 again: the numbers of a model never mixed
    ForwardState evaluation(/*for_backward=*/false);
    expect_error_mentions<Error>([&] { fp32.forward(batch, evaluation, {.precision = precision}); },
                                 {"mixed precision", "keeps activations"});
  }
}

// f16 loss scaling (003 §13.2): a scale far too large overflows fp16; each such step is skipped without
// touching a weight, halves the scale and is not counted by the divergence guard. Once the gradients fit,
// steps go through, and loss_scale_window clean steps in a row double the scale. The metrics record both.
TEST(MixedPrecision, F16LossScalingSkipsOverflowsAndAdaptsTheScale) {
  const auto tokens = pattern_tokens(8);
  LmDataset data(tokens, {}, {.batch_size = 4, .seq_len = 16, .seed = 2});
  TrainConfig c = quick_config(40);
  c.precision = Precision::F16;
  c.loss_scale = 0x1p40;
  c.loss_scale_window = 4;
  c.max_bad_steps = 2;  // overflow skips are not bad steps
  const fs::path dir = run_dir("loss_scale");
  Trainer t(Model(tiny_gpt()), data, c, dir);
  std::vector<StepReport> reports;
  std::vector<float> before = weights(t.model());
  t.run([&](const StepReport& r) {
    reports.push_back(r);
    const std::vector<float> now = weights(t.model());
    if (r.overflow) {
      EXPECT_TRUE(r.skipped && now == before) << "step " << r.step << " overflowed and changed weights";
    }
    before = now;
  });
  ASSERT_EQ(reports.size(), 40u);
  size_t first_clean = 0;
  while (first_clean < reports.size() && reports[first_clean].overflow) ++first_clean;
  EXPECT_GE(first_clean, 5u);  // 2^40 is far beyond fp16's 65504
  ASSERT_LT(first_clean, 30u) << "the scale never came down to fp16's range";
  for (size_t i = 1; i <= first_clean; ++i) EXPECT_EQ(reports[i].loss_scale, reports[i - 1].loss_scale / 2);
  // After the first clean step, the scale doubles after every 4 clean steps in a row and halves on overflow.
  int64_t clean = 0;
  for (size_t i = first_clean; i + 1 < reports.size(); ++i) {
    const StepReport &r = reports[i], &next = reports[i + 1];
    clean = r.overflow ? 0 : clean + 1;
    const double expected = r.overflow ? r.loss_scale / 2 : clean == 4 ? r.loss_scale * 2 : r.loss_scale;
    EXPECT_EQ(next.loss_scale, expected) << "step " << next.step;
    if (clean == 4) clean = 0;
  }
  int growths = 0;
  for (size_t i = first_clean + 1; i < reports.size(); ++i) growths += reports[i].loss_scale > reports[i - 1].loss_scale;
  EXPECT_GE(growths, 1);  // it probed upwards again
  std::istringstream lines(read_file(dir / "metrics.jsonl"));
  std::string line;
  std::getline(lines, line);
  const auto first = nlohmann::json::parse(line);
  EXPECT_EQ(first["loss_scale"], 0x1p40);
  EXPECT_EQ(first["overflow"], true);
  EXPECT_EQ(first["skipped"], true);
}

TEST(Trainer, GuardSkipsNonFiniteStepsAndStopsAfterTooMany) {
  const auto tokens = pattern_tokens(3);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  TrainConfig c = quick_config(20);
  c.max_bad_steps = 3;
  const fs::path dir = run_dir("guard");
  Trainer t(Model(tiny_gpt()), data, c, dir);
  t.step();
  t.save_checkpoint();
  Parameter* w = t.model().find("decoder.layers.0.ffn.up.weight");
  const float saved = w->value[0];
  const std::vector<float> before = weights(t.model());
  w->value[0] = NAN;  // an injected NaN: the loss and every gradient are NaN
  StepReport r = t.step();
  EXPECT_TRUE(r.skipped);
  w->value[0] = saved;
  EXPECT_EQ(weights(t.model()), before) << "a skipped step must not change any weight";
  EXPECT_FALSE(t.step().skipped);  // training goes on
  w->value[0] = NAN;
  EXPECT_TRUE(t.step().skipped);
  EXPECT_TRUE(t.step().skipped);
  testing::expect_error_mentions<Error>([&] { t.step(); }, {"training diverged", "3 steps in a row", "checkpoint"});
  EXPECT_EQ(nlohmann::json::parse(read_file(dir / "checkpoint" / "trainer.json"))["step"], 1);  // intact
}

// In fp32 and in both mixed precisions (bf16; f16 with loss scaling), training reaches the same floor.
TEST(Trainer, TinyModelOverfitsATinyCorpusAndWritesMetrics) {
  const auto tokens = pattern_tokens(4, 600);
  LmDataset data(tokens, tokens, {.batch_size = 8, .seq_len = 16, .seed = 1});
  TrainConfig c;
  c.steps = 150;
  c.schedule = Schedule{.kind = ScheduleKind::Cosine, .lr = 1e-2, .warmup_steps = 10, .min_lr = 1e-3};
  c.eval_every = 50;
  c.checkpoint_every = 0;
  for (Precision precision : {Precision::BF16, Precision::F16}) {
    TrainConfig mixed = c;
    mixed.precision = precision;
    Trainer t(Model(tiny_gpt()), data, mixed, run_dir("overfit_mixed"));
    double last = 0.0;
    t.run([&](const StepReport& r) { last = r.loss; });
    EXPECT_LT(last, 0.35) << (precision == Precision::BF16 ? "bf16" : "f16");
  }
  const fs::path dir = run_dir("overfit");
  Trainer t(Model(tiny_gpt()), data, c, dir);
  std::vector<StepReport> reports;
  t.run([&](const StepReport& r) { reports.push_back(r); });
  ASSERT_EQ(reports.size(), 150u);
  // The repeated digits are predictable, the random token between repeats is not: the floor is
  // (1/10)·ln 6 ≈ 0.18 nats per token. Random guessing is ln 16 ≈ 2.77.
  EXPECT_GT(reports.front().loss, 2.0);
  EXPECT_LT(reports.back().loss, 0.35);
  ASSERT_TRUE(reports.back().val_loss.has_value());
  EXPECT_LT(*reports.back().val_loss, 0.35);
  EXPECT_TRUE(reports[49].val_loss.has_value());
  EXPECT_FALSE(reports[50].val_loss.has_value());
  std::istringstream lines(read_file(dir / "metrics.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"], ++n);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"}) EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(n, 150);
  EXPECT_TRUE(fs::exists(dir / "checkpoint" / "model.safetensors"));
}

TEST(Trainer, MoERoutingIsReportedInTheMetrics) {
  const auto tokens = pattern_tokens(6);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  ModelConfig c = tiny_gpt();
  c.n_experts = 4, c.moe_top_k = 2, c.moe_capacity_factor = 1.0;
  const fs::path dir = run_dir("moe");
  TrainConfig t = quick_config(2);
  Trainer trainer(Model(c), data, t, dir);
  std::vector<StepReport> reports;
  trainer.run([&](const StepReport& r) { reports.push_back(r); });
  ASSERT_EQ(reports.back().moe.size(), 2u);  // two MoE blocks
  int64_t taken = 0;
  for (int64_t n : reports.back().moe[0].tokens_per_expert) taken += n;
  EXPECT_EQ(taken + reports.back().moe[0].refused, 2 * 16 * 2);  // 32 tokens, 2 choices each
  std::istringstream lines(read_file(dir / "metrics.jsonl"));
  std::string line;
  std::getline(lines, line);
  const auto j = nlohmann::json::parse(line);
  ASSERT_TRUE(j.contains("moe_tokens_per_expert"));
  EXPECT_EQ(j["moe_tokens_per_expert"].size(), 2u);
  EXPECT_EQ(j["moe_tokens_per_expert"][0].size(), 4u);
  EXPECT_TRUE(j.contains("moe_refused"));
}

// The inverse square-root schedule's d_model^(-1/2) is the model's width (32 here), whatever the config's
// schedule says: at step t ≤ warm-up, lr = η · 32^(-1/2) · t · 4^(-3/2).
TEST(Trainer, InverseSqrtScheduleUsesTheModelsWidth) {
  const auto tokens = pattern_tokens(7, 200);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  TrainConfig c = quick_config(2);
  c.schedule = Schedule{.kind = ScheduleKind::InverseSqrt, .lr = 1.0, .warmup_steps = 4, .d_model = 512};
  Trainer trainer(Model(tiny_gpt()), data, c, run_dir("inverse_sqrt"));
  std::vector<double> lr;
  trainer.run([&](const StepReport& r) { lr.push_back(r.lr); });
  ASSERT_EQ(lr.size(), 2u);
  for (int t = 1; t <= 2; ++t) EXPECT_NEAR(lr[t - 1], t / (std::sqrt(32.0) * 8.0), 1e-12) << "step " << t;
}

TEST(Trainer, RefusesToOverwriteOrResumeAnotherModel) {
  const auto tokens = pattern_tokens(5);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  const fs::path dir = run_dir("refuse");
  Trainer(Model(tiny_gpt()), data, quick_config(2), dir).run();
  testing::expect_error_mentions<Error>([&] { Trainer(Model(tiny_gpt()), data, quick_config(2), dir); },
                                        {"already holds a checkpoint"});
  ModelConfig other = tiny_gpt();
  other.d_model = 64;
  testing::expect_error_mentions<Error>([&] { Trainer(Model(other), data, quick_config(4), dir, true); },
                                        {"different model", "the checkpoint has d_model = 32", "the run d_model = 64"});
  testing::expect_error_mentions<Error>(
      [&] { LmDataset(std::vector<int32_t>(10, 1), {}, {.batch_size = 2, .seq_len = 16}); }, {"10 tokens"});
}

// What resume reads is checked: a damaged trainer.json or metrics.jsonl is an attend::Error naming the file,
// the line or the field. A metrics line that a crash cut short (the last, without its newline) is dropped:
// resume goes on and rewrites the file with whole lines only.
TEST(Trainer, ResumeChecksWhatItReadsAndDropsACutShortMetricsLine) {
  const auto tokens = pattern_tokens(6);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  const fs::path dir = run_dir("damaged");
  Trainer(Model(tiny_gpt()), data, quick_config(4), dir).run();
  const fs::path state = dir / "checkpoint" / "trainer.json", metrics = dir / "metrics.jsonl";
  const std::string good_state = read_file(state), good_metrics = read_file(metrics);
  auto resume_fails = [&](const fs::path& file, const std::string& text, std::vector<std::string> mentions) {
    write_file_atomic(file, text);
    mentions.push_back(file.filename().string());
    expect_error_mentions<Error>([&] { Trainer(Model(tiny_gpt()), data, quick_config(6), dir, true); }, mentions);
    write_file_atomic(state, good_state);
    write_file_atomic(metrics, good_metrics);
  };
  resume_fails(state, R"({"step": 4, "bad_streak": )", {"not valid JSON"});
  resume_fails(state, R"({"step": "four"})", {"'step'", "expected an integer"});
  resume_fails(state, R"({"bad_streak": 0})", {"no 'step'"});
  resume_fails(state, R"({"step": -1})", {"'step'", "non-negative"});
  resume_fails(state, R"({"step": 4, "loss_scale": 0.5})", {"'loss_scale'", "at least 1"});
  resume_fails(state, R"([4])", {"expected a JSON object"});
  resume_fails(metrics, "{\"step\": 1}\nnot json\n{\"step\": 3}\n", {"metrics.jsonl:2", "not valid JSON"});
  resume_fails(metrics, "{\"step\": 1}\n{\"loss\": 2}\n", {"metrics.jsonl:2", "\"step\""});
  resume_fails(metrics, "{\"step\": 1}\n{\"step\": 2.5}\n", {"metrics.jsonl:2", "'step'", "expected an integer"});

  // Steps 5 and 6 were trained past the checkpoint at 4 (their lines kept), the last cut mid-line.
  write_file_atomic(metrics, good_metrics + R"({"step": 5, "loss": 2.0})" + "\n" + R"({"step": 6, "lo)");
  Trainer resumed(Model(tiny_gpt()), data, quick_config(6), dir, true);
  EXPECT_EQ(resumed.steps_done(), 4);
  resumed.run();
  std::istringstream lines(read_file(metrics));
  int n = 0;
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(nlohmann::json::parse(line)["step"], ++n) << line;
  EXPECT_EQ(n, 6);
}

// A three-token WordPiece vocabulary and a two-document text in a fresh run directory, for the token cache.
struct CacheCase {
  Tokenizer tok = Tokenizer::from_json(
      R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1, "b": 2}}})", "ab");
  fs::path dir;
  DataConfig d;
  explicit CacheCase(const std::string& name) : dir(run_dir(name)) {
    fs::create_directories(dir);
    write_file_atomic(dir / "text.txt", "a b a\n\nb b a a\n");
    d.train = {(dir / "text.txt").string()};
  }
};

// The token cache is derived data: a damaged meta file (or one that disagrees with the token files) is
// rebuilt from the text, never trusted or thrown as a parser's exception.
TEST(Datasets, DamagedTokenCacheIsRebuilt) {
  const CacheCase c("token_cache");
  const Tokenizer& tok = c.tok;
  const fs::path& dir = c.dir;
  DataConfig d = c.d;
  d.valid_fraction = 0.0;
  const TokenStreams fresh = load_token_streams(d, tok, dir / "cache");
  ASSERT_FALSE(fresh.from_cache);
  EXPECT_TRUE(load_token_streams(d, tok, dir / "cache").from_cache);
  const std::string meta = read_file(dir / "cache" / "tokens.json");
  const nlohmann::json good = nlohmann::json::parse(meta);
  nlohmann::json wrong_count = good, wrong_type = good;
  wrong_count["train_tokens"] = 3;
  wrong_type["train_documents"] = "two";
  for (const std::string& damaged : {meta.substr(0, meta.size() / 2), std::string("[]"), wrong_count.dump(), wrong_type.dump()}) {
    write_file_atomic(dir / "cache" / "tokens.json", damaged);
    const TokenStreams again = load_token_streams(d, tok, dir / "cache");
    EXPECT_FALSE(again.from_cache) << damaged;
    EXPECT_EQ(again.train, fresh.train) << damaged;
    EXPECT_EQ(again.train_documents, fresh.train_documents) << damaged;
    EXPECT_TRUE(load_token_streams(d, tok, dir / "cache").from_cache) << "rebuilt after " << damaged;
  }
}

// Found by fuzz/fuzz_token_cache: the ids of a cache whose meta was intact were used unchecked (an id outside
// the vocabulary reached the model), and reading an empty valid.tokens passed memcpy a null pointer.
TEST(Datasets, TokenCacheIdsOutsideTheVocabularyAreRebuilt) {
  const CacheCase c("token_cache_ids");
  const Tokenizer& tok = c.tok;
  const fs::path& dir = c.dir;
  DataConfig d = c.d;
  d.valid_fraction = 0.0;  // valid.tokens is empty
  const TokenStreams fresh = load_token_streams(d, tok, dir / "cache");
  ASSERT_FALSE(fresh.from_cache);
  ASSERT_TRUE(fresh.valid.empty());
  EXPECT_TRUE(load_token_streams(d, tok, dir / "cache").from_cache);
  for (int32_t id : {3, -1, INT32_MAX}) {
    std::vector<int32_t> damaged = fresh.train;
    damaged[1] = id;
    write_file_atomic(dir / "cache" / "train.tokens",
                      std::string_view(reinterpret_cast<const char*>(damaged.data()), damaged.size() * sizeof(int32_t)));
    const TokenStreams again = load_token_streams(d, tok, dir / "cache");
    EXPECT_FALSE(again.from_cache) << id;
    EXPECT_EQ(again.train, fresh.train) << id;
  }
}

// The cache names the tokenizer it was made with: a tokenizer that encodes otherwise (a token added) or ends
// documents with another id (a role tokenizer_config.json gives, which tokenizer.json does not hold) rebuilds it.
TEST(Datasets, TokenCacheIsRebuiltForAnotherTokenizer) {
  const CacheCase c("token_cache_tokenizer");
  DataConfig d = c.d;
  d.valid_fraction = 0.0;
  const fs::path cache = c.dir / "cache";
  Tokenizer tok = Tokenizer::from_json(c.tok.to_json());
  EXPECT_EQ(tok.fingerprint(), c.tok.fingerprint());  // the same file
  ASSERT_FALSE(load_token_streams(d, tok, cache).from_cache);
  EXPECT_TRUE(load_token_streams(d, c.tok, cache).from_cache);

  const uint64_t before = tok.fingerprint();
  const int32_t added = tok.add_special_token("<doc>");
  EXPECT_NE(tok.fingerprint(), before);
  EXPECT_FALSE(load_token_streams(d, tok, cache).from_cache);
  EXPECT_TRUE(load_token_streams(d, tok, cache).from_cache);

  tok.set_special(SpecialRole::Eos, "<doc>");
  const TokenStreams rebuilt = load_token_streams(d, tok, cache);
  EXPECT_FALSE(rebuilt.from_cache);
  ASSERT_FALSE(rebuilt.train.empty());
  EXPECT_EQ(rebuilt.train.back(), added);  // the file's end, with the new id
  EXPECT_TRUE(load_token_streams(d, tok, cache).from_cache);
}

// Dropout's masks come from a window of the stream per forward (the trainer's: 2^32 numbers per micro-batch).
// A forward that would draw past its window is an error, not masks that silently repeat the next window's.
// The window's start may pass 2^32: Philox's counter takes the whole 64-bit index, so number 2^32 + i is not
// number i again.
TEST(Trainer, DropoutDrawsPastTheirWindowAreAnError) {
  ModelConfig mc = tiny_gpt();
  mc.residual_dropout = mc.attention_dropout = 0.1f;
  Model model(mc);
  const auto tokens = pattern_tokens(7);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  const Batch b = data.train_batch(0);
  // Attention dropout alone draws B·H·T² = 2·4·16² = 2048 numbers per layer; two layers and the residuals more.
  expect_error_mentions<Error>(
      [&] { model.forward(b, {.training = true, .seed = 1, .offset = 0, .rng_window = 2048}); },
      {"dropout", "window of 2048", "grad_accum"});
  const uint64_t window = uint64_t{1} << 32;
  const double loss = model.forward(b, {.training = true, .seed = 1, .offset = 3 * window, .rng_window = window}).loss;
  EXPECT_TRUE(std::isfinite(loss));
  // Evaluation draws nothing, whatever the window.
  EXPECT_NO_THROW(model.forward(b, {.training = false, .rng_window = 1}));
  int same = 0;
  for (uint64_t i = 0; i < 64; ++i) same += random_u32(1, i) == random_u32(1, window + i);
  EXPECT_LE(same, 1) << "numbers 2^32 apart repeat";
}

// Validation loss per byte: Σ nll over the bytes of the target tokens. With a vocabulary whose every token is
// two bytes of text (a Fuse decoder: nothing between tokens), it is exactly half the loss per token; models other
// than decoders get none.
TEST(Trainer, ValidationLossPerByteDividesByTheTargetsBytes) {
  std::string vocab = R"("[UNK]": 0)";
  for (int id = 1; id < 16; ++id) vocab += fmt::format(R"(, "{}{}": {})", char('a' + id), char('a' + id), id);
  const Tokenizer tok = Tokenizer::from_json(
      fmt::format(R"({{"model": {{"type": "WordPiece", "unk_token": "[UNK]", "vocab": {{{}}}}}, "decoder": {{"type": "Fuse"}}}})",
                  vocab),
      "two-byte");
  for (int32_t id = 1; id < 16; ++id) ASSERT_EQ(tok.text_bytes(id), 2) << id;
  const auto tokens = pattern_tokens(4, 600);
  LmDataset data(tokens, tokens, {.batch_size = 4, .seq_len = 16, .seed = 1, .max_valid_batches = 3});
  Trainer t(Model(tiny_gpt()), data, quick_config(1), run_dir("per_byte"), false, &tok);
  std::optional<double> per_byte;
  const double per_token = t.validation_loss(&per_byte);
  ASSERT_TRUE(per_byte.has_value());
  EXPECT_NEAR(*per_byte, per_token / 2.0, 1e-12 * per_token);
  std::optional<double> none;
  Trainer(Model(tiny_gpt()), data, quick_config(1), run_dir("per_byte_no_tokenizer")).validation_loss(&none);
  EXPECT_FALSE(none.has_value());
}

// Fine-tuning (train.init_from): the run starts from the checkpoint's parameters of the same names; a new
// classification head keeps its initialisation; a parameter of another shape is an error naming it.
TEST(Trainer, InitFromCopiesTheSharedParametersAndKeepsTheNewHead) {
  ModelConfig encoder;
  encoder.architecture = Architecture::Encoder;
  encoder.vocab_size = 16, encoder.d_model = 32, encoder.n_layers = 1, encoder.n_heads = 4, encoder.max_seq_len = 32;
  encoder.seed = 3;
  const Model pretrained(encoder);
  ModelConfig classifier = encoder;
  classifier.n_classes = 3, classifier.seed = 4;
  Model fine(classifier);
  const Model fresh(classifier);
  EXPECT_EQ(fine.copy_parameters_from(pretrained), (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  for (const Parameter* p : fine.parameters()) {
    const Parameter* want = (p->name.starts_with("classifier") ? fresh : pretrained).find(p->name);
    ASSERT_NE(want, nullptr) << p->name;
    EXPECT_TRUE(std::equal(p->value.span().begin(), p->value.span().end(), want->value.span().begin())) << p->name;
  }
  // Through the trainer: a decoder saved, a run started from it with another seed, and a wider one refused.
  const fs::path source = run_dir("init_from_source");
  save_model(Model(tiny_gpt()), source);
  const auto tokens = pattern_tokens(5);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  ModelConfig reseeded = tiny_gpt();
  reseeded.seed = 99;
  TrainConfig config = quick_config(2);
  config.init_from = source.string();
  Trainer trainer(Model(reseeded), data, config, run_dir("init_from"));
  Model saved = load_model(source);
  EXPECT_EQ(weights(trainer.model()), weights(saved));
  ModelConfig wider = tiny_gpt();
  wider.d_model = 64;
  testing::expect_error_mentions<Error>([&] { Trainer(Model(wider), data, config, run_dir("init_from_wide")); },
                                        {"train.init_from", "'embed.tokens.weight' is [16, 32] in the source model, [16, 64]"});
}

// ---- run.json -------------------------------------------------------------------------------------

TEST(RunConfigs, ExampleConfigsParseAndValidate) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ATTEND_DATA_DIR) / ".." / "configs")) {
    const RunConfig run = RunConfig::from_json(read_file(entry.path()), entry.path().string());
    EXPECT_NO_THROW(run.validate()) << entry.path();
    EXPECT_EQ(RunConfig::from_json(run.to_json()).to_json(), run.to_json()) << "round trip of " << entry.path();
    ++n;
  }
  EXPECT_GE(n, 3);  // a GPT, a BERT, a T5
  testing::expect_error_mentions<Error>([] { RunConfig::from_json(R"({"modle": {}})", "r.json"); },
                                        {"r.json", "unknown section 'modle'"});
  testing::expect_error_mentions<Error>([] { RunConfig::from_json(R"({"train": {"lr": "big"}})", "r.json"); },
                                        {"r.json: train: 'lr'", "expected a number"});
  testing::expect_error_mentions<Error>([] { RunConfig::from_json(R"({"data": {"bath_size": 4}})", "r.json"); },
                                        {"unknown option 'bath_size'"});
  RunConfig r;
  r.set("train.optimizer", "sgd");
  r.set("model.norm", "rmsnorm");
  r.set("out", "runs/x");
  EXPECT_EQ(r.train.optimizer.kind, OptimizerKind::SGD);
  EXPECT_EQ(r.model.norm, NormKind::RMSNorm);
  testing::expect_error_mentions<Error>([&] { r.set("training.lr", "1"); }, {"unknown option 'training.lr'"});
  r.set("train.precision", "bf16");
  EXPECT_EQ(r.train.precision, Precision::BF16);
  EXPECT_NE(r.to_json().find("\"precision\": \"bf16\""), std::string::npos);
  testing::expect_error_mentions<Error>([&] { r.set("train.precision", "fp8"); }, {"'precision'", "'fp8'", "f32, bf16, f16"});
  // train.zero: true, false, or "auto" (unset: ZeRO-1 where it applies), and written back as given.
  EXPECT_FALSE(r.train.zero.has_value());
  EXPECT_NE(r.to_json().find("\"zero\": \"auto\""), std::string::npos);
  r.set("train.zero", "false");
  EXPECT_EQ(r.train.zero, std::optional<bool>(false));
  EXPECT_EQ(RunConfig::from_json(r.to_json()).train.zero, std::optional<bool>(false));
  r.set("train.zero", "auto");
  EXPECT_FALSE(r.train.zero.has_value());
  testing::expect_error_mentions<Error>([&] { r.set("train.zero", "sometimes"); },
                                        {"'zero'", "\"sometimes\"", "expected true, false or \"auto\""});
  RunConfig scaled = RunConfig::from_json(read_file(fs::path(ATTEND_DATA_DIR) / ".." / "configs" / "gpt.json"));
  scaled.set("train.loss_scale", "0.5");
  testing::expect_error_mentions<Error>([&] { scaled.validate(); }, {"train.loss_scale must be at least 1"});
}

// ---- Datasets -------------------------------------------------------------------------------------

TEST(Datasets, MaskedLmChoosesFifteenPercentSplitEightyTenTen) {
  // A stream of ordinary tokens 5..99 with the special tokens 0 ([PAD]), 1 ([CLS]) and 2 ([MASK]) sprinkled in.
  std::vector<int32_t> tokens;
  Rng rng(9);
  for (int i = 0; i < 200000; ++i) tokens.push_back(i % 50 == 0 ? 1 : 5 + static_cast<int32_t>(rng.below(95)));
  MlmDataset data(tokens, {}, {.batch_size = 16, .seq_len = 64, .seed = 4, .mask_id = 2, .vocab_size = 100,
                               .special_ids = {0, 1, 2}});
  int64_t ordinary = 0, chosen = 0, masked = 0, random = 0, kept = 0;
  for (int64_t i = 0; i < 150; ++i) {
    const Batch b = data.train_batch(i);
    ASSERT_EQ(b.ids.size(), 16u * 64);
    for (size_t k = 0; k < b.ids.size(); ++k) {
      const int32_t target = b.targets[k];
      if (target == Batch::kIgnore) {
        if (b.ids[k] >= 5) ++ordinary;
        continue;
      }
      ++ordinary, ++chosen;
      ASSERT_NE(target, 1) << "special tokens are never masked";
      if (b.ids[k] == 2) {
        ++masked;
      } else if (b.ids[k] == target) {
        ++kept;
      } else {
        ++random;
        ASSERT_GE(b.ids[k], 3) << "the random replacement is an ordinary token";
      }
    }
  }
  // ~150k ordinary positions: the binomial standard deviations are 0.1% of the share chosen and about 0.4%
  // of the 80/10/10 shares, so these bounds are 5σ or more.
  EXPECT_NEAR(double(chosen) / ordinary, 0.15, 0.005);
  EXPECT_NEAR(double(masked) / chosen, 0.8, 0.02);
  EXPECT_NEAR(double(random) / chosen, 0.1, 0.015);
  EXPECT_NEAR(double(kept) / chosen, 0.1, 0.015);
  // The same micro-batch index gives the same batch (resume), another index another one.
  EXPECT_EQ(data.train_batch(7).ids, data.train_batch(7).ids);
  EXPECT_NE(data.train_batch(7).ids, data.train_batch(8).ids);
}

TEST(Datasets, Seq2SeqAndClassificationBatchesByHand) {
  std::vector<Example> pairs = {{{10, 11, 12}, {20, 21}, 0}, {{13}, {22, 23, 24, 25}, 0}};
  ExampleDataset s2s(ExampleDataset::Kind::Seq2Seq, pairs, pairs,
                     {.batch_size = 2, .max_target_len = 4, .bos_id = 1, .eos_id = 2, .bucket_batches = 1});
  const Batch b = s2s.valid_batch(0);
  // Sources padded to 3; targets cut to 3 tokens (max_target_len 4 leaves room for EOS); the decoder reads
  // [BOS] y and predicts y [EOS] (teacher forcing).
  EXPECT_EQ(b.src_T, 3);
  EXPECT_EQ(b.src_ids, (std::vector<int32_t>{10, 11, 12, 13, 0, 0}));
  EXPECT_EQ(b.src_lengths, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(b.T, 4);
  EXPECT_EQ(b.ids, (std::vector<int32_t>{1, 20, 21, 0, 1, 22, 23, 24}));
  const int32_t X = Batch::kIgnore;
  EXPECT_EQ(b.targets, (std::vector<int32_t>{20, 21, 2, X, 22, 23, 24, 2}));
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{3, 4}));
  std::vector<Example> labelled = {{{5, 6}, {}, 1}, {{7, 8, 9}, {}, 0}};
  ExampleDataset cls(ExampleDataset::Kind::Classify, labelled, {}, {.batch_size = 2, .bucket_batches = 1});
  const Batch c = cls.train_batch(0);
  EXPECT_EQ(c.T, 3);
  EXPECT_EQ(c.labels.size(), 2u);
  EXPECT_EQ(c.lengths.size(), 2u);
  EXPECT_EQ(cls.valid_batches(), 0);
  // A named validation file takes every validation line; the training files are not split as well.
  const auto dir = fs::temp_directory_path();
  write_file_atomic(dir / "attend_train_split.tsv", "a\tx y\nb\ty z\nc\tz x\nd\tx x\n");
  write_file_atomic(dir / "attend_valid_split.tsv", "e\tx\n");
  const Tokenizer t = Tokenizer::train_from_text("a b c d e x y z a b c d e x y z",
                                                 {.kind = TokenizerKind::WordPiece, .vocab_size = 40, .min_frequency = 1});
  DataConfig d{.task = Task::Seq2Seq, .train = {(dir / "attend_train_split.tsv").string()},
               .valid = (dir / "attend_valid_split.tsv").string(), .valid_fraction = 0.99};
  const ExampleSets sets = load_examples(d, t);
  EXPECT_EQ(sets.train.size(), 4u);
  EXPECT_EQ(sets.valid.size(), 1u);
  // Every example appears once per epoch.
  std::vector<int32_t> seen;
  for (int64_t i = 0; i < 2; ++i) seen.push_back(cls.train_batch(i).labels[0]), seen.push_back(cls.train_batch(i).labels[1]);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int32_t>{0, 0, 1, 1}));
}

// A classifier's labels are numbered by its classes (config.json's class_names) when it has them: a label
// outside them is an error naming the file, the line and the label, not a new class numbered silently.
TEST(Datasets, ClassifierLabelsFollowTheModelsClasses) {
  const auto dir = fs::temp_directory_path();
  write_file_atomic(dir / "attend_classes.tsv", "spam\tx y\nham\ty z\nham\tz x\n");
  const Tokenizer t = Tokenizer::train_from_text("x y z x y z", {.kind = TokenizerKind::WordPiece, .vocab_size = 20, .min_frequency = 1});
  DataConfig d{.task = Task::Classify, .train = {(dir / "attend_classes.tsv").string()}, .valid_fraction = 0.0};
  const ExampleSets sorted = load_examples(d, t);
  EXPECT_EQ(sorted.labels, (std::vector<std::string>{"ham", "spam"}));
  EXPECT_EQ(sorted.train[0].label, 1);
  const std::vector<std::string> classes = {"spam", "ham", "eggs"};
  const ExampleSets named = load_examples(d, t, classes);
  EXPECT_EQ(named.labels, classes);
  EXPECT_EQ(named.train[0].label, 0);
  EXPECT_EQ(named.train[1].label, 1);
  expect_error_mentions<Error>([&] { load_examples(d, t, std::vector<std::string>{"ham", "other"}); },
                               {"attend_classes.tsv:1", "label 'spam'", "ham, other"});
  // The config keeps them, one per class.
  ModelConfig m;
  m.architecture = Architecture::Encoder, m.n_classes = 2, m.class_names = {"ham", "spam"};
  EXPECT_EQ(ModelConfig::from_json(m.to_json()).class_names, m.class_names);
  m.class_names = {"ham"};
  expect_error_mentions<Error>([&] { m.validate(); }, {"class_names has 1 names", "n_classes is 2"});
  m.class_names = {"ham", "ham"};
  expect_error_mentions<Error>([&] { m.validate(); }, {"'ham' twice"});
}

// Length bucketing: 8 batches of 4 cover 32 examples of lengths 1..32 exactly once (one epoch), and each
// batch spans a narrow range of lengths instead of about the whole range.
TEST(Datasets, LengthBucketingKeepsEachExampleOnceAndNarrowsBatches) {
  std::vector<Example> examples;
  for (int32_t n = 1; n <= 32; ++n) examples.push_back({std::vector<int32_t>(n, 5), {6}, 0});
  ExampleDataset bucketed(ExampleDataset::Kind::Seq2Seq, examples, {}, {.batch_size = 4, .seed = 3, .bucket_batches = 8});
  std::vector<int64_t> lengths;
  int64_t widest = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const Batch b = bucketed.train_batch(i);
    widest = std::max<int64_t>(widest, *std::max_element(b.src_lengths.begin(), b.src_lengths.end()) -
                                           *std::min_element(b.src_lengths.begin(), b.src_lengths.end()));
    lengths.insert(lengths.end(), b.src_lengths.begin(), b.src_lengths.end());
  }
  std::sort(lengths.begin(), lengths.end());
  for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(lengths[k], k + 1);
  EXPECT_EQ(widest, 3);  // sorted, then cut in fours: 1-4, 5-8, ...
  EXPECT_EQ(bucketed.train_batch(5).src_ids, bucketed.train_batch(5).src_ids);  // a pure function of i
}

// ---- Against PyTorch: 10 AdamW steps ------------------------------------------------------------------

// The same batch at every step (tools/make_training_fixtures.py trains on it in PyTorch).
class FixedBatch : public Dataset {
 public:
  explicit FixedBatch(Batch b) : batch_(std::move(b)) {}
  Batch train_batch(int64_t) const override { return batch_; }
  int64_t valid_batches() const override { return 0; }
  Batch valid_batch(int64_t) const override { return batch_; }

 private:
  Batch batch_;
};

// Ten steps of warm-up + cosine, clipping at 1, label smoothing 0.1 and AdamW with decoupled decay that
// skips biases, norms and embeddings, against PyTorch's AdamW in float64 from the same fp32 weights.
// Losses and gradient norms agree to 2e-5 (fp32 forward and backward), weights after ten steps to 1e-4.
// One exception: the key bias has an exactly zero gradient (adding the same vector to every key shifts each
// score row by a constant, which softmax ignores). In fp64 it comes out at 1e-17 and in fp32 at 1e-9, and
// Adam's m̂/√v̂ turns either into steps of up to lr, so those entries are only held to lr = 1e-2.
TEST(TrainerGolden, TenAdamWStepsMatchPyTorch) {
  for (const std::string name : {"gpt", "t5"}) {
    const fs::path dir = testing::kModels / name;
    ASSERT_TRUE(fs::exists(dir / "training.json")) << "run tools/make_training_fixtures.py";
    const auto golden = nlohmann::json::parse(read_file(dir / "training.json"));
    const auto cases = nlohmann::json::parse(read_file(dir / "golden.json"))["cases"];
    Batch batch;
    for (const auto& c : cases)
      if (c["name"] == golden["case"]) batch = testing::batch_from_json(c["batch"]);
    FixedBatch data(batch);
    TrainConfig c;
    c.steps = golden["steps"];
    c.schedule = Schedule{.kind = ScheduleKind::Cosine, .lr = golden["lr"], .warmup_steps = golden["warmup_steps"],
                          .total_steps = golden["total_steps"], .min_lr = golden["min_lr"]};
    c.optimizer.beta1 = golden["beta1"], c.optimizer.beta2 = golden["beta2"], c.optimizer.eps = golden["eps"];
    c.optimizer.weight_decay = golden["weight_decay"];
    c.clip_norm = golden["clip_norm"];
    c.label_smoothing = golden["label_smoothing"];
    Trainer t(load_model(dir), data, c, run_dir("golden_" + name));
    for (int64_t step = 0; step < c.steps; ++step) {
      const StepReport r = t.step();
      EXPECT_NEAR(r.lr, golden["lrs"][step].get<double>(), 1e-12) << name << " step " << step + 1;
      EXPECT_TRUE(testing::close(r.loss, golden["losses"][step].get<double>(), 2e-5))
          << name << " step " << step + 1 << ": loss " << r.loss << ", PyTorch " << golden["losses"][step];
      EXPECT_TRUE(testing::close(r.grad_norm, golden["grad_norms"][step].get<double>(), 2e-5))
          << name << " step " << step + 1 << ": gradient norm " << r.grad_norm << ", PyTorch " << golden["grad_norms"][step];
    }
    const SafetensorsReader trained(dir / "trained_10.safetensors");
    const ModelConfig& mc = t.model().config();
    const int64_t key_begin = mc.n_heads * mc.d_head(), key_end = key_begin + mc.kv_heads() * mc.d_head();
    // The keys' bias has a gradient of exactly zero (softmax ignores a shift shared by all keys), so both
    // sides update it by Adam's normalised rounding noise, m̂/√v̂ ∈ [−1, 1] per step: they can differ by up to
    // 2·Σ η_t. That is the bound for those entries; every other entry is held to 1e-4.
    double lr_sum = 0.0;
    for (const auto& lr : golden["lrs"]) lr_sum += lr.get<double>();
    for (Parameter* p : t.model().parameters()) {
      const Tensor expected = trained.load(p->name);
      const bool key_bias = p->name.ends_with(".attn.qkv.bias");
      int64_t bad = 0;
      for (int64_t i = 0; i < p->numel(); ++i) {
        const double tolerance = key_bias && i >= key_begin && i < key_end ? 2.0 * lr_sum : 1e-4;
        if (std::abs(double(p->value[i]) - double(expected[i])) > tolerance && bad++ == 0)
          ADD_FAILURE() << name << ": " << p->name << "[" << i << "] after 10 steps: " << p->value[i] << ", PyTorch "
                        << expected[i];
      }
      EXPECT_EQ(bad, 0) << name << ": " << p->name;
    }
  }
}

}  // namespace
}  // namespace attend::train

namespace attend::train {
namespace {

// A model with frozen parameters trains only the others: the frozen values stay as they were, the optimizer
// holds state for the trainable ones alone (so does its checkpoint), and a resumed run keeps them frozen.
TEST(Trainer, FrozenParametersStayAsTheyWereAndHaveNoOptimizerState) {
  const auto tokens = pattern_tokens(4);
  LmDataset data(tokens, {}, {.batch_size = 2, .seq_len = 16});
  auto frozen = [](const Parameter& p) { return p.name.find(".ffn.") == std::string::npos; };
  Model model(tiny_gpt());
  model.freeze(frozen);
  const std::vector<float> before = weights(model);
  const fs::path dir = run_dir("frozen");
  TrainConfig c = quick_config(4);
  {
    Trainer t(std::move(model), data, c, dir);
    t.run();
    const std::vector<Parameter*> params = t.model().parameters();
    const std::vector<float> after = weights(t.model());
    int64_t at = 0, changed = 0;
    for (const Parameter* p : params) {
      for (int64_t k = 0; k < p->numel(); ++k, ++at) {
        if (p->frozen) {
          ASSERT_EQ(after[at], before[at]) << p->name << " moved";
        }
        changed += after[at] != before[at];
      }
    }
    EXPECT_GT(changed, 0) << "the FFN weights trained";
  }
  const SafetensorsReader state(dir / "checkpoint" / "optimizer.safetensors");
  EXPECT_FALSE(state.tensors().empty());
  for (const TensorInfo& info : state.tensors())
    EXPECT_NE(info.name.find(".ffn."), std::string::npos) << info.name << ": state for a frozen parameter";
  // Resume: the loaded checkpoint's parameters are frozen as the run's model says.
  Model again(tiny_gpt());
  again.freeze(frozen);
  c.steps = 6;
  Trainer resumed(std::move(again), data, c, dir, /*resume=*/true);
  const std::vector<float> at_resume = weights(resumed.model());
  resumed.run();
  const std::vector<float> end = weights(resumed.model());
  int64_t at = 0;
  for (const Parameter* p : resumed.model().parameters())
    for (int64_t k = 0; k < p->numel(); ++k, ++at) {
      if (p->frozen) {
        ASSERT_EQ(end[at], at_resume[at]) << p->name << " moved after the resume";
      }
    }
}

}  // namespace
}  // namespace attend::train
