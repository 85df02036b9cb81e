// Optimisers and schedules against steps worked out by hand (004 §9.1-9.3, 003 §4.1), β₂ warm-up's bias
// correction, weight-decay exclusions, and optimiser state saved and restored exactly.
#include "testing.h"
#include "train/optimizer.h"
#include <attend/schedule.h>

#include <attend/error.h>
#include <attend/plot.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/safetensors.h>
#include <attend/train.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

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
// micro-batch's mean is weighted by its share of the targets. Compared each step to 1e-6 of the largest
// gradient; with SGD, whose update is linear in the gradient, the weights agree to 1e-6 as well. (Under
// Adam, m/√v of a gradient that is zero up to rounding is ±1 either way, so weights are compared by SGD.)
TEST(Trainer, GradientAccumulationGivesTheBigBatchUpdate) {
  const auto tokens = pattern_tokens(1);
  LmDataset big(tokens, {}, {.batch_size = 4, .seq_len = 16, .seed = 3});
  LmDataset small(tokens, {}, {.batch_size = 2, .seq_len = 16, .seed = 3});
  for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::SGD}) {
    TrainConfig c = quick_config(3);
    c.optimizer.kind = kind;
    c.clip_norm = 0.0;
    Trainer a(Model(tiny_gpt()), big, c, run_dir("accum_a"));
    c.grad_accum = 2;
    Trainer b(Model(tiny_gpt()), small, c, run_dir("accum_b"));
    for (int i = 0; i < 3; ++i) {
      const StepReport ra = a.step(), rb = b.step();
      EXPECT_NEAR(ra.loss, rb.loss, 1e-6) << "step " << i + 1;
      EXPECT_EQ(ra.tokens, rb.tokens);
      const std::vector<float> ga = grads(a.model()), gb = grads(b.model());
      double largest = 0.0;
      for (float g : ga) largest = std::max(largest, double(std::abs(g)));
      for (size_t k = 0; k < ga.size(); ++k) ASSERT_NEAR(ga[k], gb[k], 1e-6 * largest) << "step " << i + 1 << " at " << k;
    }
    if (kind == OptimizerKind::SGD)
      testing::expect_all_close(weights(a.model()), weights(b.model()), 1e-6, "SGD weights after 3 steps");
  }
}

TEST(Trainer, ResumeContinuesBitForBit) {
  const auto tokens = pattern_tokens(2);
  LmDataset data(std::vector<int32_t>(tokens.begin(), tokens.begin() + 1600),
                 std::vector<int32_t>(tokens.begin() + 1600, tokens.end()), {.batch_size = 4, .seq_len = 16, .seed = 5});
  ModelConfig mc = tiny_gpt();
  mc.residual_dropout = mc.attention_dropout = 0.1f;  // the dropout stream must continue exactly too
  TrainConfig c = quick_config(6);
  const fs::path straight = run_dir("straight"), stopped = run_dir("stopped");
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
  EXPECT_EQ(Model::load(stopped / "checkpoint").config().to_json(), mc.to_json());
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

TEST(Trainer, TinyModelOverfitsATinyCorpusAndWritesMetrics) {
  const auto tokens = pattern_tokens(4, 600);
  LmDataset data(tokens, tokens, {.batch_size = 8, .seq_len = 16, .seed = 1});
  TrainConfig c;
  c.steps = 150;
  c.schedule = Schedule{.kind = ScheduleKind::Cosine, .lr = 1e-2, .warmup_steps = 10, .min_lr = 1e-3};
  c.eval_every = 50;
  c.checkpoint_every = 0;
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
                                        {"different model", "\"d_model\": 32", "\"d_model\": 64"});
  testing::expect_error_mentions<Error>(
      [&] { LmDataset(std::vector<int32_t>(10, 1), {}, {.batch_size = 2, .seq_len = 16}); }, {"10 tokens"});
}

}  // namespace
}  // namespace attend::train
