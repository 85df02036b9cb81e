#include "nn/lora.h"
#include "nn/layers.h"

#include "kernels/dropout.h"
#include "kernels/gemm.h"

#include <attend/error.h>
#include <attend/rng.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <limits>

namespace attend {

double LoraConfig::unit_scale() const { return rslora ? alpha / std::sqrt(double(r)) : alpha / double(r); }
double LoraConfig::scale() const { return unit_scale() * multiplier; }

bool LoraConfig::adapts_ffn() const {
  return std::any_of(targets.begin(), targets.end(), [](const std::string& t) { return t == "up" || t == "gate" || t == "down"; });
}

void LoraConfig::validate() const {
  check(r >= 1 && r <= nn::kMaxLoraRank, "lora: r is {}, expected a rank from 1 to {}", r, nn::kMaxLoraRank);
  check(alpha > 0.0 && std::isfinite(alpha), "lora: alpha is {}, expected a positive number", alpha);
  check(!targets.empty(), "lora: targets is empty: name projections among q, k, v, o, up, gate, down");
  for (const std::string& t : targets) {
    check(std::find(nn::kLoraTargets.begin(), nn::kLoraTargets.end(), t) != nn::kLoraTargets.end(),
          "lora: unknown target '{}' (expected q, k, v, o, up, gate or down)", t);
    check(std::count(targets.begin(), targets.end(), t) == 1, "lora: target '{}' is named twice", t);
  }
  for (const std::string& m : modules_to_save)
    check(m == "classifier" || m == "pooler" || m == "embeddings",
          "lora: modules_to_save names '{}' (expected classifier, pooler or embeddings)", m);
  for (const auto& [key, m] : per_module) {
    check(m.r >= 1 && m.r <= nn::kMaxLoraRank, "lora: '{}' has r {}, expected a rank from 1 to {}", key, m.r,
          nn::kMaxLoraRank);
    check(m.alpha > 0.0 && std::isfinite(m.alpha), "lora: '{}' has alpha {}, expected a positive number", key, m.alpha);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    check(layers[i] >= 0 && layers[i] < (int64_t{1} << 16), "lora: layers holds {}, expected block numbers from 0",
          layers[i]);
    check(std::count(layers.begin(), layers.end(), layers[i]) == 1, "lora: layers holds {} twice", layers[i]);
  }
  check(layers.empty() || per_module.empty(), "lora: layers and ranks module by module (per_module) both given: "
        "per_module names the modules itself");
  check(dropout >= 0.0 && dropout < 1.0, "lora: dropout is {}, expected a probability in [0, 1)", dropout);
  check(std::isfinite(multiplier), "lora: the scale multiplier is {}, expected a finite number", multiplier);
  // The name goes into tensor names: "….lora_A.<name>.weight".
  check(name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        }), "lora: adapter name '{}': expected up to 64 letters, digits, '_' or '-'", name);
}

}  // namespace attend

namespace attend::nn {

void draw_lora_a(Parameter& a, uint64_t seed, uint64_t offset) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(a.value.size(1)));
  random_uniforms(seed, offset, a.numel(), a.value.data());
  for (float& x : a.value.span()) x = (2.0f * x - 1.0f) * bound;
}

LoraStream lora_dropout_stream(const Parameter& weight, int64_t N, bool training, Rng* rng) {
  if (!training) return {};
  uint64_t numbers = 0;
  for (const LowRankUpdate& u : weight.lora)
    if (u.dropout > 0.0f) numbers += static_cast<uint64_t>(N * weight.value.size(1));
  if (numbers == 0) return {};
  check(rng != nullptr, "lora: training '{}' with adapter dropout needs a random stream", weight.name);
  const uint64_t seed = rng->seed();
  return {true, seed, rng->reserve(numbers)};
}

namespace {

// The input an adapter sees: x itself, or with dropout drop(x) (the adapter's mask: its numbers of the stream).
// `first` is the number of the stream's first this adapter takes.
const float* adapter_input(const LowRankUpdate& u, const float* inp, int64_t N, int64_t C, const LoraStream* drop,
                           uint64_t first, std::vector<float>& buffer) {
  if (drop == nullptr || !drop->active || u.dropout <= 0.0f) return inp;
  buffer.resize(static_cast<size_t>(N * C));
  kernels::dropout_forward(buffer.data(), inp, N * C, u.dropout, drop->seed, first);
  return buffer.data();
}

}  // namespace

void lora_forward(float* out, const float* inp, const Parameter& weight, int64_t N, int64_t C, int64_t OC,
                  const uint64_t* row_masks, bool per_row, const LoraStream* drop, const double* const* row_scales) {
  thread_local std::vector<float> xa, dropped;
  uint64_t first = drop != nullptr ? drop->offset : 0;
  for (const LowRankUpdate& u : weight.lora) {
    const int64_t r = u.A->value.size(0), rows = u.B->value.size(0);
    const uint64_t bit = uint64_t{1} << u.adapter;
    // Row n's scale: 0 where its mask leaves the adapter out; else the adapter's own, or its unit times the row's
    // multiplier for its set (NaN: its own), computed as LoraConfig::scale() computes it, so that a multiplier gives
    // the bits of the adapter loaded with it.
    const auto scale_of = [&](int64_t n) {
      if (row_masks != nullptr && (row_masks[n] & bit) == 0) return 0.0f;
      const double* m = row_scales == nullptr ? nullptr : row_scales[n];
      return static_cast<float>(m == nullptr || std::isnan(m[u.adapter]) ? u.scale : u.unit * m[u.adapter]);
    };
    const float* x = adapter_input(u, inp, N, C, drop, first, dropped);
    if (x != inp) first += static_cast<uint64_t>(N * C);
    // Runs of consecutive rows that take this adapter at one multiplier (all N without masks), one row at a time
    // when per_row.
    for (int64_t n0 = 0; n0 < N;) {
      const float s = scale_of(n0);
      if (s == 0.0f) {  // left out, or at scale 0
        ++n0;
        continue;
      }
      int64_t n1 = n0 + 1;
      while (!per_row && n1 < N && scale_of(n1) == s) ++n1;
      const int64_t n = n1 - n0;
      xa.resize(static_cast<size_t>(n * r));
      kernels::gemm<float>(false, true, n, r, C, 1.0f, x + n0 * C, C, u.A->value.data(), C, 0.0f, xa.data(), r);
      kernels::gemm<float>(false, true, n, rows, r, s, xa.data(), r, u.B->value.data(), r, 1.0f,
                           out + n0 * OC + u.row0, OC);
      n0 = n1;
    }
  }
}

void lora_backward(float* dinp, const Parameter& weight, const float* dout, const float* inp, int64_t N, int64_t C,
                   int64_t OC, const LoraStream* drop) {
  thread_local std::vector<float> xa, t, dropped, dx;
  uint64_t first = drop != nullptr ? drop->offset : 0;
  for (const LowRankUpdate& u : weight.lora) {
    const int64_t r = u.A->value.size(0), rows = u.B->value.size(0);
    const auto s = static_cast<float>(u.scale);
    const float* dy = dout + u.row0;  // the adapter's output columns, rows OC apart
    const float* x = adapter_input(u, inp, N, C, drop, first, dropped);
    const bool masked = x != inp;
    if (u.B->grad.data() != nullptr) {
      xa.resize(static_cast<size_t>(N * r));
      kernels::gemm<float>(false, true, N, r, C, 1.0f, x, C, u.A->value.data(), C, 0.0f, xa.data(), r);
      kernels::gemm<float>(true, false, rows, r, N, s, dy, OC, xa.data(), r, 1.0f, u.B->grad.data(), r);
    }
    t.resize(static_cast<size_t>(N * r));
    kernels::gemm<float>(false, false, N, r, rows, 1.0f, dy, OC, u.B->value.data(), r, 0.0f, t.data(), r);
    if (u.A->grad.data() != nullptr)
      kernels::gemm<float>(true, false, r, C, N, s, t.data(), r, x, C, 1.0f, u.A->grad.data(), C);
    if (dinp != nullptr && !masked) {
      kernels::gemm<float>(false, false, N, C, r, s, t.data(), r, u.A->value.data(), C, 1.0f, dinp, C);
    } else if (dinp != nullptr) {  // ∂x of drop(x): the same mask on s·t·A
      dx.resize(static_cast<size_t>(N * C));
      kernels::gemm<float>(false, false, N, C, r, s, t.data(), r, u.A->value.data(), C, 0.0f, dx.data(), C);
      kernels::dropout_backward(dinp, dx.data(), N * C, u.dropout, drop->seed, first);
    }
    if (masked) first += static_cast<uint64_t>(N * C);
  }
}

bool saved_module_holds(std::string_view module, std::string_view parameter) {
  if (module == "embeddings") return parameter.starts_with("embed.tokens.") || parameter.starts_with("lm_head.");
  return parameter.size() > module.size() && parameter.starts_with(module) && parameter[module.size()] == '.';
}

uint64_t adapter_mask(const Model& model, uint64_t wanted) {
  const size_t n = model.adapters().size();
  return n >= 64 ? wanted : wanted & ((uint64_t{1} << n) - 1);
}

std::vector<double> adapter_multipliers(const Model& model, std::span<const std::optional<double>> scales) {
  for (size_t k = 0; k < scales.size(); ++k)
    check(!scales[k] || std::isfinite(*scales[k]), "adapter_scales[{}] is {}: expected a finite number", k,
          scales[k].value_or(0.0));
  const size_t slots = model.adapters().size();
  std::vector<double> multipliers(slots, std::numeric_limits<double>::quiet_NaN());
  for (size_t k = 0; k < std::min(slots, scales.size()); ++k)
    if (scales[k]) multipliers[k] = *scales[k];
  if (std::all_of(multipliers.begin(), multipliers.end(), [](double s) { return std::isnan(s); })) multipliers.clear();
  return multipliers;
}

SameAdapters::SameAdapters(const Model& model, uint64_t mask, const std::vector<double>& multipliers, int64_t rows) {
  if (adapter_mask(model, mask) != adapter_mask(model, ~uint64_t{0}) || !multipliers.empty())
    masks.assign(static_cast<size_t>(rows), mask);
  if (!multipliers.empty()) scales.assign(static_cast<size_t>(rows), multipliers.data());
}

int own_adapter_slot(const Model& model) {
  const std::vector<std::string>& sets = model.adapters();
  return static_cast<int>(std::find(sets.begin(), sets.end(), "") - sets.begin());
}

std::vector<const LowRankUpdate*> updates_on_rows(const Parameter& weight, int slot, int64_t row0, int64_t rows,
                                                  std::string_view tensor) {
  std::vector<const LowRankUpdate*> out;
  for (const LowRankUpdate& u : weight.lora) {
    const int64_t n = u.B->value.size(0);
    if (u.adapter != slot || u.row0 + n <= row0 || u.row0 >= row0 + rows) continue;
    check(u.row0 >= row0 && u.row0 + n <= row0 + rows, "lora: the adapter of rows [{}, {}) of '{}' straddles {}",
          u.row0, u.row0 + n, weight.name, tensor);
    out.push_back(&u);
  }
  return out;
}

namespace {

// Whether the updates cover `rows` rows with one A between them.
bool share_one_a(const std::vector<const LowRankUpdate*>& updates, int64_t rows) {
  if (updates.size() < 2) return false;
  int64_t covered = 0;
  for (const LowRankUpdate* u : updates) {
    covered += u->B->value.size(0);
    const Tensor& a = u->A->value, &first = updates.front()->A->value;
    if (a.shape() != first.shape() || !std::equal(a.span().begin(), a.span().end(), first.span().begin())) return false;
  }
  return covered == rows;
}

}  // namespace

int64_t stacked_rank(const std::vector<const LowRankUpdate*>& updates, int64_t rows) {
  if (share_one_a(updates, rows)) return updates.front()->A->value.size(0);
  int64_t rank = 0;
  for (const LowRankUpdate* u : updates) rank += u->A->value.size(0);
  return rank;
}

void stack_updates(const std::vector<const LowRankUpdate*>& updates, int64_t row0, int64_t rows, int64_t rank,
                   float* a, float* b, const std::function<float(const LowRankUpdate&)>& factor) {
  check(rank >= stacked_rank(updates, rows), "lora: stacking adapters of rank {} into {}", stacked_rank(updates, rows),
        rank);
  const bool shared = share_one_a(updates, rows);
  int64_t k = 0;  // the first of this update's columns in the stacked rank
  for (const LowRankUpdate* u : updates) {
    const int64_t r = u->A->value.size(0), in = u->A->value.size(1), n = u->B->value.size(0);
    if (!shared || u == updates.front()) std::copy(u->A->value.data(), u->A->value.data() + r * in, a + k * in);
    const float f = factor ? factor(*u) : 1.0f;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < r; ++j) b[(u->row0 - row0 + i) * rank + k + j] = f * u->B->value[i * r + j];
    if (!shared) k += r;
  }
}

std::vector<std::string> lora_targets_of(std::string_view weight) {
  if (weight.ends_with(".attn.qkv.weight")) return {"q", "k", "v"};  // self-attention's rows q, then k, then v
  if (weight.ends_with(".cross_attn.q.weight")) return {"q"};
  if (weight.ends_with(".cross_attn.kv.weight")) return {"k", "v"};
  if (weight.ends_with("attn.o.weight")) return {"o"};
  for (const char* t : {"up", "gate", "down"})
    if (weight.ends_with(".ffn." + std::string(t) + ".weight")) return {t};
  return {};
}

int64_t lora_module_layer(std::string_view key) {
  const size_t at = key.find(".layers.");
  if (at == std::string_view::npos) return -1;
  int64_t layer = 0;
  const char* begin = key.data() + at + 8;
  const auto [end, ec] = std::from_chars(begin, key.data() + key.size(), layer);
  return ec == std::errc() && end != begin && end < key.data() + key.size() && *end == '.' ? layer : -1;
}

std::map<std::string, LoraConfig::Rank> modules_of_layers(const Model& model, const LoraConfig& config) {
  std::map<std::string, LoraConfig::Rank> out;
  int64_t blocks = 0;
  const std::set<std::string> keys = lora_module_keys(model, config.targets);
  for (const std::string& key : keys) {
    const int64_t layer = lora_module_layer(key);
    blocks = std::max(blocks, layer + 1);
    if (std::find(config.layers.begin(), config.layers.end(), layer) != config.layers.end())
      out[key] = {.r = config.r, .alpha = config.alpha};
  }
  for (int64_t layer : config.layers)
    check(layer < blocks, "lora: layers holds {}, but the model's blocks are numbered 0 to {}", layer, blocks - 1);
  if (out.size() == keys.size()) out.clear();  // every block: a plain set
  return out;
}

std::vector<std::string> in_target_order(const std::set<std::string>& targets) {
  std::vector<std::string> out;
  for (std::string_view t : kLoraTargets)
    if (targets.count(std::string(t))) out.emplace_back(t);
  return out;
}

std::string lora_module_key(std::string_view weight, std::string_view target) {
  std::string key(weight);
  if (key.ends_with(".weight")) key.resize(key.size() - 7);
  // The fused matrices hold several targets' rows, each its own adapter (MultiHeadAttention::add_lora's labels).
  if (weight.ends_with("attn.qkv.weight") || weight.ends_with("cross_attn.kv.weight")) key += "." + std::string(target);
  return key;
}

std::set<std::string> lora_module_keys(const Model& model, const std::vector<std::string>& targets) {
  std::set<std::string> keys;
  for (const Parameter* p : model.parameters())
    for (const std::string& t : lora_targets_of(p->name))
      if (std::find(targets.begin(), targets.end(), t) != targets.end()) keys.insert(lora_module_key(p->name, t));
  return keys;
}

std::optional<LoraConfig::Rank> one_rank_on_every_block(const Model& model, const std::vector<std::string>& targets,
                                                        const std::map<std::string, LoraConfig::Rank>& per_module) {
  if (per_module.empty()) return std::nullopt;
  const std::set<std::string> every = lora_module_keys(model, targets);
  const LoraConfig::Rank one = per_module.begin()->second;
  const bool uniform = every.size() == per_module.size() && std::all_of(per_module.begin(), per_module.end(), [&](const auto& m) {
    return every.count(m.first) > 0 && m.second.r == one.r && m.second.alpha == one.alpha;
  });
  return uniform ? std::optional(one) : std::nullopt;
}

void LoraAdapters::add(Parameter& weight, const std::string& label, int64_t row0, int64_t rows,
                       const LoraConfig& config) {
  check(weight.value.rank() == 2 && row0 >= 0 && rows >= 1 && row0 + rows <= weight.value.size(0),
        "lora: rows [{}, {}) of '{}' ({})", row0, row0 + rows, weight.name, weight.value.shape());
  std::string base = weight.name;
  if (base.ends_with(".weight")) base.resize(base.size() - 7);
  // This module's rank and alpha: the set's, or per_module's entry for it.
  LoraConfig own{.r = config.r, .alpha = config.alpha, .rslora = config.rslora, .multiplier = config.multiplier};
  if (!config.per_module.empty()) {
    const auto it = config.per_module.find(label.empty() ? base : base + "." + label.substr(0, label.size() - 1));
    if (it == config.per_module.end()) return;
    own.r = it->second.r, own.alpha = it->second.alpha;
  }
  const int64_t in = weight.value.size(1);
  const std::string suffix = config.name.empty() ? ".weight" : "." + config.name + ".weight";
  Entry e{&weight, std::make_unique<Parameter>(base + "." + label + "lora_A" + suffix, Shape{own.r, in}, Role::LoraA),
          std::make_unique<Parameter>(base + "." + label + "lora_B" + suffix, Shape{rows, own.r}, Role::LoraB)};
  e.A->stack_blocks = e.B->stack_blocks = weight.stack_blocks;
  weight.lora.push_back({e.A.get(), e.B.get(), row0, own.scale(), static_cast<float>(config.dropout)});
  weight.lora.back().unit = own.unit_scale();
  entries_.push_back(std::move(e));
}

void LoraAdapters::collect(const Parameter& weight, std::vector<Parameter*>& out) const {
  for (const Entry& e : entries_)
    if (e.weight == &weight) out.push_back(e.A.get()), out.push_back(e.B.get());
}

void LoraAdapters::merge() {
  for (Entry& e : entries_) {
    Parameter& w = *e.weight;
    check(w.has_values() && !nn::held_as_stored(w), "lora: merging into '{}', held as {} (Model::merge_lora makes it "
          "fp32 first)", w.name, weight_type_name(w.storage));
    const auto it = std::find_if(w.lora.begin(), w.lora.end(), [&](const LowRankUpdate& u) { return u.A == e.A.get(); });
    check(it != w.lora.end(), "lora: '{}' lost its adapter", w.name);
    const int64_t r = e.A->value.size(0), rows = e.B->value.size(0), in = w.value.size(1);
    // W[row0:row0+rows, :] += s · B·A
    kernels::gemm<float>(false, false, rows, in, r, static_cast<float>(it->scale), e.B->value.data(), r,
                         e.A->value.data(), in, 1.0f, w.value.data() + it->row0 * in, in);
    w.lora.erase(it);
  }
  entries_.clear();
}

}  // namespace attend::nn
