// Reading the model fixtures of tests/data/models (made by tools/make_model_fixtures.py), and checking a model's
// gradients against finite differences of its loss.
#pragma once

#include <attend/model.h>
#include <attend/rng.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace attend::testing {

inline const std::filesystem::path kModels = std::filesystem::path(ATTEND_TEST_DATA) / "models";

inline std::vector<int32_t> flatten_ids(const nlohmann::json& rows) {
  std::vector<int32_t> out;
  for (const auto& row : rows)
    for (const auto& v : row) out.push_back(v.get<int32_t>());
  return out;
}

// A golden.json "batch" object: ids, lengths, targets, labels, and src_ids/src_lengths for encoder-decoders.
inline Batch batch_from_json(const nlohmann::json& j) {
  Batch b;
  b.B = static_cast<int64_t>(j["ids"].size());
  b.T = static_cast<int64_t>(j["ids"][0].size());
  b.ids = flatten_ids(j["ids"]);
  b.lengths = j["lengths"].get<std::vector<int32_t>>();
  b.targets = flatten_ids(j["targets"]);
  b.labels = j.value("labels", std::vector<int32_t>{});
  if (j.contains("src_ids")) {
    b.src_T = static_cast<int64_t>(j["src_ids"][0].size());
    b.src_ids = flatten_ids(j["src_ids"]);
    b.src_lengths = j["src_lengths"].get<std::vector<int32_t>>();
  }
  return b;
}

// Central differences of the fp32 model's loss (summed in double). With h = 1e-2 the truncation error is
// O(h²) ≈ 1e-5 and the rounding error about 1e-6/h = 1e-4 on a loss of O(5), so a right gradient agrees to
// ~2e-4 and a wrong one is off by its own size. Every trainable parameter tensor is probed at three entries, and
// the whole gradient along one random direction (where the errors of all entries would add up); frozen
// parameters (a LoRA model's base) keep no gradient and are left alone.
// `hd` is the step along the random direction; a sharply curved loss (T5's unscaled scores) needs a smaller one.
inline void expect_finite_differences(Model& model, const Batch& batch, const RunOptions& options, const std::string& what,
                               double hd = 1e-2) {
  model.zero_grad();
  model.forward(batch, options);
  model.backward();
  const double h = 1e-2;
  auto loss_at = [&](float* x, float value) {
    const float saved = *x;
    *x = value;
    const double l = model.forward(batch, options).loss;
    *x = saved;
    return l;
  };
  Rng rng(7);
  for (Parameter* p : model.trainable_parameters()) {
    for (int probe = 0; probe < 3; ++probe) {
      const auto i = static_cast<int64_t>(rng.below(static_cast<uint64_t>(p->numel())));
      float* x = p->value.data() + i;
      const float x0 = *x;
      const double numeric = (8 * (loss_at(x, x0 + float(h)) - loss_at(x, x0 - float(h))) -
                              (loss_at(x, x0 + float(2 * h)) - loss_at(x, x0 - float(2 * h)))) /
                             (12 * h);
      EXPECT_NEAR(p->grad[i], numeric, 3e-4 + 2e-2 * std::abs(numeric)) << what << ": " << p->name << "[" << i << "]";
    }
  }
  // Along a random direction u: ⟨∇L, u⟩ = (L(θ + hu) − L(θ − hu)) / 2h.
  std::vector<std::vector<float>> saved, direction;
  double analytic = 0.0;
  for (Parameter* p : model.trainable_parameters()) {
    saved.emplace_back(p->value.span().begin(), p->value.span().end());
    direction.emplace_back(p->numel());
    for (int64_t i = 0; i < p->numel(); ++i) {
      direction.back()[i] = rng.uniform() - 0.5f;
      analytic += double(p->grad[i]) * direction.back()[i];
    }
  }
  auto shifted_loss = [&](double step) {
    auto params = model.trainable_parameters();
    for (size_t k = 0; k < params.size(); ++k)
      for (int64_t i = 0; i < params[k]->numel(); ++i)
        params[k]->value[i] = saved[k][i] + static_cast<float>(step) * direction[k][i];
    return model.forward(batch, options).loss;
  };
  const double numeric =
      (8 * (shifted_loss(hd) - shifted_loss(-hd)) - (shifted_loss(2 * hd) - shifted_loss(-2 * hd))) / (12 * hd);
  shifted_loss(0.0);
  EXPECT_NEAR(analytic, numeric, 1e-3 + 1e-2 * std::abs(numeric)) << what << ": directional derivative";
}

}  // namespace attend::testing
