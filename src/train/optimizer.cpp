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

namespace {
std::vector<Segment> whole_parameters(const std::vector<Parameter*>& params) {
  std::vector<Segment> out;
  for (Parameter* p : params) out.push_back({p, 0, p->numel()});
  return out;
}
}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<Parameter*> params)
    : Optimizer(config, whole_parameters(params)) {}

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<Segment> segments)
    : config_(config), segments_(std::move(segments)) {
  const auto& c = config_;
  check(c.beta1 >= 0.0 && c.beta1 < 1.0 && c.beta2 >= 0.0 && c.beta2 < 1.0 && c.momentum >= 0.0 && c.momentum < 1.0,
        "optimizer: beta1, beta2 and momentum must be in [0, 1), got {}, {}, {}", c.beta1, c.beta2, c.momentum);
  check(c.eps > 0.0 && c.weight_decay >= 0.0, "optimizer: eps must be positive and weight_decay non-negative");
  check(c.beta2_initial == 0.0 || (c.beta2_initial > 0.0 && c.beta2_initial < 1.0 && c.beta2_warmup_steps > 0),
        "optimizer: beta2 warm-up needs beta2_initial in (0, 1) and beta2_warmup_steps > 0, got {} and {}",
        c.beta2_initial, c.beta2_warmup_steps);
  const int states = states_per_element();
  for (const Segment& s : segments_) {
    check(s.begin >= 0 && s.length >= 0 && s.begin + s.length <= s.param->numel(),
          "optimizer: elements [{}, {}) of {} are outside its {} elements", s.begin, s.begin + s.length,
          s.param->name, s.param->numel());
    const bool whole = s.begin == 0 && s.length == s.param->numel();
    whole_ = whole_ && whole;
    const Shape shape = whole ? s.param->value.shape() : Shape{s.length};
    m_.emplace_back(states >= 1 ? shape : Shape{0});
    v_.emplace_back(states >= 2 ? shape : Shape{0});
  }
}

int Optimizer::states_per_element() const {
  switch (config_.kind) {
    case OptimizerKind::SGD: return 0;
    case OptimizerKind::Momentum: return 1;
    case OptimizerKind::Adam:
    case OptimizerKind::AdamW: return 2;
  }
  return 0;
}

void Optimizer::set_counters(int64_t steps, double beta2_product) {
  step_ = steps;
  beta2_product_ = beta2_product;
}

std::pair<float*, int64_t> Optimizer::state_of(const Segment& segment, int which) const {
  // The segment of ours that holds `segment`.
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& own = segments_[i];
    if (own.param == segment.param && segment.begin >= own.begin && segment.begin + segment.length <= own.begin + own.length) {
      const Tensor& t = which == 0 ? m_[i] : v_[i];
      return {const_cast<float*>(t.data()) + (segment.begin - own.begin), segment.length};
    }
  }
  throw Error(fmt::format("optimizer: no state for elements [{}, {}) of {}", segment.begin,
                          segment.begin + segment.length, segment.param->name));
}

std::vector<float> Optimizer::pack(const std::vector<Segment>& segments) const {
  std::vector<float> out;
  for (const Segment& s : segments)
    for (int which = 0; which < states_per_element(); ++which) {
      const auto [data, n] = state_of(s, which);
      out.insert(out.end(), data, data + n);
    }
  return out;
}

void Optimizer::unpack(const std::vector<Segment>& segments, std::span<const float> packed) {
  size_t at = 0;
  for (const Segment& s : segments)
    for (int which = 0; which < states_per_element(); ++which) {
      const auto [data, n] = state_of(s, which);
      check(at + n <= packed.size(), "optimizer: {} packed state floats, too few for the segments", packed.size());
      std::copy(packed.begin() + at, packed.begin() + at + n, data);
      at += n;
    }
  check(at == packed.size(), "optimizer: {} packed state floats, the segments hold {}", packed.size(), at);
}

void Optimizer::unpack(std::span<const float> packed) { unpack(segments_, packed); }

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
  for (size_t i = 0; i < segments_.size(); ++i) {
    Parameter& p = *segments_[i].param;
    const float decay = decays(p, c) ? static_cast<float>(c.weight_decay) : 0.0f;
    const int64_t n = segments_[i].length;
    float* value = p.value.data() + segments_[i].begin;
    const float* grad = p.grad.data() + segments_[i].begin;
    switch (c.kind) {
      case OptimizerKind::SGD:
        kernels::sgd_update(value, grad, n, static_cast<float>(lr), decay);
        break;
      case OptimizerKind::Momentum:
        kernels::momentum_update(value, m_[i].data(), grad, n, static_cast<float>(lr),
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
        kernels::adam_update(value, m_[i].data(), v_[i].data(), grad, n, s);
        break;
      }
    }
  }
}

template <typename F>
void Optimizer::for_each_state(F&& f) {
  const bool adam = config_.kind == OptimizerKind::Adam || config_.kind == OptimizerKind::AdamW;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const std::string& name = segments_[i].param->name;
    if (config_.kind == OptimizerKind::Momentum) f(i, name + ".velocity", m_[i]);
    if (adam) {
      f(i, name + ".m", m_[i]);
      f(i, name + ".v", v_[i]);
    }
  }
}

std::vector<NamedTensor> Optimizer::state_tensors() {
  check(whole_, "optimizer: a checkpoint's state tensors need every parameter's whole state (ZeRO-1 gathers it first)");
  std::vector<NamedTensor> out;
  for_each_state([&](size_t, std::string name, Tensor& t) { out.push_back({std::move(name), &t}); });
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
  for_each_state([&](size_t i, const std::string& name, Tensor& t) {
    const Segment& s = segments_[i];
    if (s.begin == 0 && s.length == s.param->numel()) {
      reader.load_into(name, t.view());
      return;
    }
    Tensor whole(s.param->value.shape());  // a segment: its run of the parameter's whole state
    reader.load_into(name, whole.view());
    std::copy(whole.data() + s.begin, whole.data() + s.begin + s.length, t.data());
  });
}

}  // namespace attend::train
