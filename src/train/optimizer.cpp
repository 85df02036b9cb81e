#include "train/optimizer.h"

#include "core/json_fields.h"
#include "kernels/optimizer.h"

#include <attend/error.h>

#include <charconv>
#include <cmath>

namespace attend::train {

namespace {
constexpr EnumName<OptimizerKind> kOptimizers[] = {{OptimizerKind::SGD, "sgd"},
                                                   {OptimizerKind::Momentum, "momentum"},
                                                   {OptimizerKind::Adam, "adam"},
                                                   {OptimizerKind::AdamW, "adamw"}};
}  // namespace

}  // namespace attend::train

namespace attend {
template <>
std::span<const EnumName<train::OptimizerKind>> names_of() {
  return train::kOptimizers;
}
}  // namespace attend

namespace attend::train {

const char* optimizer_name(OptimizerKind kind) { return enum_name<OptimizerKind>(kOptimizers, kind); }
OptimizerKind parse_optimizer(std::string_view name) { return parse_enum<OptimizerKind>(kOptimizers, name, "optimizer"); }

bool decays(const Parameter& p, const OptimizerConfig& config) {
  if (is_bias(p.role) || is_norm_gain(p.role)) return false;
  if (part_of(p.role) == Part::Embeddings || p.role == Role::RelativePositionBias) return config.decay_embeddings;
  return true;
}

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<Parameter*> params)
    : config_(config), params_(std::move(params)) {
  const auto& c = config_;
  check(c.beta1 >= 0.0 && c.beta1 < 1.0 && c.beta2 >= 0.0 && c.beta2 < 1.0 && c.momentum >= 0.0 && c.momentum < 1.0,
        "optimizer: beta1, beta2 and momentum must be in [0, 1), got {}, {}, {}", c.beta1, c.beta2, c.momentum);
  check(c.eps > 0.0 && c.weight_decay >= 0.0, "optimizer: eps must be positive and weight_decay non-negative");
  check(c.beta2_initial == 0.0 || (c.beta2_initial > 0.0 && c.beta2_initial < 1.0 && c.beta2_warmup_steps > 0),
        "optimizer: beta2 warm-up needs beta2_initial in (0, 1) and beta2_warmup_steps > 0, got {} and {}",
        c.beta2_initial, c.beta2_warmup_steps);
  const bool two_moments = c.kind == OptimizerKind::Adam || c.kind == OptimizerKind::AdamW;
  for (const Parameter* p : params_) {
    m_.emplace_back(c.kind == OptimizerKind::SGD ? Shape{0} : p->value.shape());
    v_.emplace_back(two_moments ? p->value.shape() : Shape{0});
  }
}

double Optimizer::beta2_at(int64_t t) const {
  const auto& c = config_;
  if (c.beta2_initial <= 0.0 || t >= c.beta2_warmup_steps) return c.beta2;
  const double f = double(t) / double(c.beta2_warmup_steps);
  return c.beta2_initial + f * (c.beta2 - c.beta2_initial);
}

void Optimizer::step(double lr) {
  const auto& c = config_;
  ++step_;
  const double beta2 = beta2_at(step_);
  beta2_product_ *= beta2;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    const float decay = decays(p, c) ? static_cast<float>(c.weight_decay) : 0.0f;
    const int64_t n = p.numel();
    switch (c.kind) {
      case OptimizerKind::SGD:
        kernels::sgd_update(p.value.data(), p.grad.data(), n, static_cast<float>(lr), decay);
        break;
      case OptimizerKind::Momentum:
        kernels::momentum_update(p.value.data(), m_[i].data(), p.grad.data(), n, static_cast<float>(lr),
                                 static_cast<float>(c.momentum),
                                 c.momentum_ema ? static_cast<float>(1.0 - c.momentum) : 1.0f, decay);
        break;
      case OptimizerKind::Adam:
      case OptimizerKind::AdamW: {
        kernels::AdamStep s{static_cast<float>(lr),
                            static_cast<float>(c.beta1),
                            static_cast<float>(beta2),
                            static_cast<float>(c.eps),
                            static_cast<float>(1.0 - c.beta1),
                            static_cast<float>(1.0 - beta2),
                            1.0 - std::pow(c.beta1, double(step_)),
                            1.0 - beta2_product_};
        (c.kind == OptimizerKind::AdamW ? s.decoupled : s.l2) = decay;
        kernels::adam_update(p.value.data(), m_[i].data(), v_[i].data(), p.grad.data(), n, s);
        break;
      }
    }
  }
}

template <typename F>
void Optimizer::for_each_state(F&& f) {
  const bool adam = config_.kind == OptimizerKind::Adam || config_.kind == OptimizerKind::AdamW;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (config_.kind == OptimizerKind::Momentum) f(params_[i]->name + ".velocity", m_[i]);
    if (adam) {
      f(params_[i]->name + ".m", m_[i]);
      f(params_[i]->name + ".v", v_[i]);
    }
  }
}

std::vector<NamedTensor> Optimizer::state_tensors() {
  std::vector<NamedTensor> out;
  for_each_state([&](std::string name, Tensor& t) { out.push_back({std::move(name), &t}); });
  return out;
}

std::map<std::string, std::string> Optimizer::state_metadata() const {
  // %.17g round-trips a double exactly.
  return {{"optimizer", optimizer_name(config_.kind)},
          {"optimizer.step", std::to_string(step_)},
          {"optimizer.beta2_product", fmt::format("{:.17g}", beta2_product_)}};
}

void Optimizer::load_state(const SafetensorsReader& reader) {
  const auto& meta = reader.metadata();
  auto field = [&](const char* key) {
    const auto it = meta.find(key);
    check(it != meta.end(), "{}: no '{}' in the metadata (not an optimizer state?)", reader.origin(), key);
    return it->second;
  };
  check(field("optimizer") == optimizer_name(config_.kind), "{}: holds {} state, the run uses {}", reader.origin(),
        field("optimizer"), optimizer_name(config_.kind));
  // The scalars are strings: each must be a whole number in range (std::stoll threw std::invalid_argument).
  auto number = [&](const char* key, auto& out) {
    const std::string text = field(key);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    check(ec == std::errc() && end == text.data() + text.size(), "{}: metadata '{}' is '{}', expected a number",
          reader.origin(), key, text);
  };
  int64_t step = 0;
  double beta2_product = 0.0;
  number("optimizer.step", step);
  number("optimizer.beta2_product", beta2_product);
  check(step >= 0, "{}: metadata 'optimizer.step' is {}, expected a non-negative step", reader.origin(), step);
  check(beta2_product >= 0.0 && beta2_product <= 1.0, "{}: metadata 'optimizer.beta2_product' is {}, expected a "
        "product of betas in [0, 1]", reader.origin(), beta2_product);
  step_ = step;
  beta2_product_ = beta2_product;
  for_each_state([&](const std::string& name, Tensor& t) { reader.load_into(name, t.view()); });
}

}  // namespace attend::train
