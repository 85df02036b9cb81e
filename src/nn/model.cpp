// The model's forward and backward (001 §6-8, §11-12): embeddings, the stacks, the heads (LM, MLM,
// classifier) and their losses, and the checks that name the batch field at fault.
#include "nn/lora.h"
#include "nn/transformer.h"

#include "kernels/elementwise.h"
#include "kernels/activation.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "kernels/position.h"

#include <attend/error.h>
#include <attend/log.h>

#include <attend/rng.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace attend {

using nn::StackCall;

Model::Impl::Impl(const ModelConfig& c)
    : config(c),
      tokens("embed.tokens.weight", {c.vocab_size, c.d_model}, Role::TokenEmbedding),
      embedding_dropout(c.embedding_dropout) {
  config.validate();
  if (c.position == PositionKind::Learned) {
    positions = Parameter("embed.positions.weight", {c.max_seq_len, c.d_model}, Role::PositionTable);
  }
  if (c.position == PositionKind::Sinusoidal) {
    sinusoid = Tensor({c.max_seq_len, c.d_model});
    kernels::sinusoidal_table(sinusoid.data(), 0, c.max_seq_len, c.d_model);
  }
  if (c.type_vocab_size > 0) {
    token_types = Parameter("embed.token_types.weight", {c.type_vocab_size, c.d_model}, Role::TokenEmbedding);
  }
  if (c.embedding_norm) {
    embed_norm.emplace("embed.norm", c.norm, c.d_model, c.norm_eps, c.norm_unit_offset);
  }
  if (c.has_encoder()) {
    encoder = std::make_unique<nn::Stack>("encoder", c, c.n_layers, /*causal=*/false, /*cross=*/false);
  }
  if (c.has_decoder()) {
    decoder = std::make_unique<nn::Stack>("decoder", c, c.decoder_layers(), /*causal=*/true,
                                          /*cross=*/c.architecture == Architecture::EncoderDecoder);
  }
  if (c.lora_r > 0) {  // adapters, in their blocks: slot 0
    if (encoder) encoder->add_lora(c.lora());
    if (decoder) decoder->add_lora(c.lora());
    adapters.push_back("");
  }
  if (!c.tie_embeddings) {
    lm_head = Parameter("lm_head.weight", {c.vocab_size, c.d_model}, Role::HeadMatrix);
  }
  if (c.architecture == Architecture::Encoder) {
    if (c.mlm_head) {
      mlm_dense = nn::Linear("mlm.dense", c.d_model, c.d_model, /*bias=*/true, Role::HeadMatrix, Role::HeadBias);
      mlm_norm.emplace("mlm.norm", c.norm, c.d_model, c.norm_eps, c.norm_unit_offset, Role::HeadNormGain,
                       Role::HeadNormBias);
      mlm_bias = Parameter("mlm.bias", {c.vocab_size}, Role::HeadBias);
    }
    if (c.pooler) {
      pooler = nn::Linear("pooler.dense", c.d_model, c.d_model, /*bias=*/true, Role::HeadMatrix, Role::HeadBias);
    }
    if (c.n_classes > 0) {
      classifier = nn::Linear("classifier", c.d_model, c.n_classes, /*bias=*/true, Role::HeadMatrix, Role::HeadBias);
    }
  }
  collect_parameters();
}

// Every parameter in the model's fixed order (model.safetensors'): the embeddings, the stacks block by block
// (each weight followed by its LoRA adapters), the heads.
void Model::Impl::collect_parameters() {
  const ModelConfig& c = config;
  params.clear();
  params.push_back(&tokens);
  if (c.position == PositionKind::Learned) params.push_back(&positions);
  if (c.type_vocab_size > 0) params.push_back(&token_types);
  if (embed_norm) embed_norm->collect(params);
  if (encoder) encoder->collect(params);
  if (decoder) decoder->collect(params);
  if (!c.tie_embeddings) params.push_back(&lm_head);
  if (c.architecture == Architecture::Encoder) {
    if (c.mlm_head) {
      mlm_dense.collect(params);
      mlm_norm->collect(params);
      params.push_back(&mlm_bias);
    }
    if (c.pooler) pooler.collect(params);
    if (c.n_classes > 0) classifier.collect(params);
  }
}

Tensor Model::Impl::lookup(const std::vector<int32_t>& ids) const {
  const int64_t C = config.d_model, N = static_cast<int64_t>(ids.size());
  Tensor x = Tensor::uninitialized({N, C});  // the lookup writes every row
  if (tokens.has_values())
    kernels::embedding_forward(x.data(), ids.data(), tokens.value.data(), N, C);
  else  // a table held as stored alone (quantized, or 16 bits): each row widened
    kernels::parallel_for(N, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) nn::stored_row(tokens, ids[i], x.data() + i * C);
    });
  if (config.scale_embeddings) {
    const auto s = static_cast<float>(std::sqrt(static_cast<double>(C)));
    kernels::scale(x.data(), x.numel(), s);
  }
  return x;
}

const float* Model::Impl::position_table() const {
  return config.position == PositionKind::Learned      ? positions.value.data()
         : config.position == PositionKind::Sinusoidal ? sinusoid.data()
                                                        : nullptr;
}

Tensor Model::Impl::embed(nn::Embedded* e, const std::vector<int32_t>& ids, const std::vector<int32_t>& types,
                          int64_t B, int64_t T, bool training, Rng* rng) const {
  if (e != nullptr) e->ids = ids, e->types = types, e->B = B, e->T = T;
  const int64_t C = config.d_model;
  Tensor x = lookup(ids);
  if (const float* table = position_table()) kernels::add_positions_forward(x.data(), x.data(), table, B, T, C);
  if (config.type_vocab_size > 0)  // + S[type] per row (type 0 when the batch gives none)
    for (int64_t r = 0; r < B * T; ++r)
      kernels::add_positions_forward(x.data() + r * C, x.data() + r * C,
                                     token_types.value.data() + (types.empty() ? 0 : types[r]) * C, 1, 1, C);
  if (embed_norm) x = embed_norm->forward(x, e != nullptr ? &e->norm : nullptr);
  embedding_dropout.forward(x, training, rng, e != nullptr ? &e->dropout : nullptr);
  return x;
}

Tensor Model::Impl::embed_rows(const std::vector<int32_t>& ids, const std::vector<int64_t>& at) const {
  const int64_t C = config.d_model;
  Tensor x = lookup(ids);
  if (const float* table = position_table())
    for (size_t i = 0; i < ids.size(); ++i)  // one row per sequence and position: the same sums as the batched add
      kernels::add_positions_forward(x.data() + i * C, x.data() + i * C, table + at[i] * C, 1, 1, C);
  if (config.type_vocab_size > 0)  // sessions run type 0
    for (size_t i = 0; i < ids.size(); ++i)
      kernels::add_positions_forward(x.data() + i * C, x.data() + i * C, token_types.value.data(), 1, 1, C);
  if (embed_norm) x = embed_norm->forward(x, nullptr);
  return x;
}

void Model::Impl::embed_backward(const nn::Embedded& e, Tensor& dx) {
  const int64_t C = config.d_model;
  embedding_dropout.backward(dx, e.dropout);
  if (embed_norm) dx = embed_norm->backward(dx, e.norm);
  if (config.type_vocab_size > 0 && !token_types.frozen) {  // S[type] takes each row's gradient
    const std::vector<int32_t> zeros = e.types.empty() ? std::vector<int32_t>(e.B * e.T, 0) : std::vector<int32_t>();
    kernels::embedding_backward(token_types.grad.data(), dx.data(), e.types.empty() ? zeros.data() : e.types.data(),
                                e.B * e.T, C);
  }
  if (config.position == PositionKind::Learned) {
    Tensor unused({e.B * e.T, C});  // the table's gradient only; dx passes through unchanged
    if (!positions.frozen) kernels::add_positions_backward(unused.data(), positions.grad.data(), dx.data(), e.B, e.T, C);
  }
  if (config.scale_embeddings) {
    const auto s = static_cast<float>(std::sqrt(static_cast<double>(C)));
    kernels::scale(dx.data(), dx.numel(), s);
  }
  if (!tokens.frozen) kernels::embedding_backward(tokens.grad.data(), dx.data(), e.ids.data(), e.B * e.T, C);
}

// ---- Model -----------------------------------------------------------------------------------------

using nn::check_sequences;
using nn::valid_mask;

namespace nn {

std::vector<int32_t> check_sequences(const std::vector<int32_t>& ids, const std::vector<int32_t>& lengths, int64_t B,
                                     int64_t T, const char* ids_name, const char* lengths_name,
                                     const ModelConfig& c) {
  check(T >= 1, "batch: {} has {} positions, expected at least 1", ids_name, T);
  check(static_cast<int64_t>(ids.size()) == B * T, "batch: {} has {} ids, expected B·T = {}·{} = {}", ids_name,
        ids.size(), B, T, B * T);
  check(T <= c.max_seq_len, "batch: {} has sequences of {} tokens, longer than the model's context (max_seq_len {})",
        ids_name, T, c.max_seq_len);
  for (int64_t i = 0; i < B * T; ++i)
    check(ids[i] >= 0 && ids[i] < c.vocab_size, "batch: {}[{}][{}] = {} is not a token id of the vocabulary [0, {})",
          ids_name, i / T, i % T, ids[i], c.vocab_size);
  if (lengths.empty()) return std::vector<int32_t>(B, static_cast<int32_t>(T));
  check(static_cast<int64_t>(lengths.size()) == B, "batch: {} has {} entries, expected B = {}", lengths_name,
        lengths.size(), B);
  for (int64_t b = 0; b < B; ++b)
    check(lengths[b] >= 1 && lengths[b] <= T, "batch: {}[{}] = {} is outside [1, {}]", lengths_name, b, lengths[b], T);
  return lengths;
}

std::vector<uint8_t> valid_mask(const std::vector<int32_t>& lengths, int64_t B, int64_t T) {
  std::vector<uint8_t> valid(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) valid[b * T + t] = t < lengths[b];
  return valid;
}

}  // namespace nn

ForwardState::ForwardState(bool for_backward) : impl_(std::make_unique<Impl>()) { impl_->for_backward = for_backward; }
ForwardState::~ForwardState() = default;
ForwardState::ForwardState(ForwardState&&) noexcept = default;
ForwardState& ForwardState::operator=(ForwardState&&) noexcept = default;
const Tensor& ForwardState::logits() const { return impl_->logits; }

namespace {

// What trains beside a LoRA model's adapters: `modules`, or with none named a classification head (classifier and
// pooler), as PEFT's SEQ_CLS task trains it.
std::vector<std::string> modules_to_save(const ModelConfig& c, const std::vector<std::string>& modules) {
  if (!modules.empty() || c.n_classes == 0) return modules;
  if (c.pooler) return {"classifier", "pooler"};
  return {"classifier"};
}

bool trains_with_adapters(const Parameter& p, const std::vector<std::string>& modules) {
  return is_adapter(p.role) || std::any_of(modules.begin(), modules.end(), [&](const std::string& m) {
           return nn::saved_module_holds(m, p.name);
         });
}

// Each key of `per_module` a projection of `targets` the model holds; `what` starts the error naming one that is not.
void check_module_keys(const Model& model, const std::map<std::string, LoraConfig::Rank>& per_module,
                       const std::vector<std::string>& targets, std::string_view what) {
  if (per_module.empty()) return;
  const std::set<std::string> keys = nn::lora_module_keys(model, targets);
  for (const auto& entry : per_module)
    check(keys.count(entry.first) > 0, "{} '{}', which is no projection of this model among the targets {} (keys such "
          "as '{}')", what, entry.first, fmt::join(targets, ", "), keys.empty() ? std::string("none") : *keys.begin());
}

// The network's layers, built without memory for their parameters, then laid out in one buffer.
std::unique_ptr<Model::Impl> build(const ModelConfig& config, const std::function<bool(const Parameter&)>& blocks_only) {
  std::unique_ptr<Model::Impl> impl;
  {
    const DeferParameterStorage deferred;
    impl = std::make_unique<Model::Impl>(config);
  }
  impl->lay_out(blocks_only);
  if (config.lora_r > 0) {  // a LoRA model trains its adapters alone, and the modules saved beside them
    const std::vector<std::string> modules = modules_to_save(config, config.lora_modules_to_save);
    for (Parameter* p : impl->params) p->frozen = !trains_with_adapters(*p, modules);
  }
  return impl;
}

}  // namespace

Model::Model(const ModelConfig& config) : impl_(build(config, nullptr)) {
  check_module_keys(*this, config.lora_per_module, config.lora_targets, "config: lora_per_module names");
  initialize(config.seed);
}
Model::Model(const ModelConfig& config, Uninitialized, const std::function<bool(const Parameter&)>& blocks_only)
    : impl_(build(config, blocks_only)) {
  check_module_keys(*this, config.lora_per_module, config.lora_targets, "config: lora_per_module names");
}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const ModelConfig& Model::config() const { return impl_->config; }
std::vector<Parameter*> Model::parameters() { return impl_->params; }
std::vector<const Parameter*> Model::parameters() const { return {impl_->params.begin(), impl_->params.end()}; }

Parameter* Model::find(std::string_view name) {
  for (Parameter* p : impl_->params)
    if (p->name == name) return p;
  return nullptr;
}

const Parameter* Model::find(std::string_view name) const { return const_cast<Model*>(this)->find(name); }

std::vector<std::string> Model::copy_parameters_from(const Model& source) {
  std::vector<std::string> kept;
  for (Parameter* p : impl_->params) {
    const Parameter* from = source.find(p->name);
    if (from == nullptr) {
      kept.push_back(p->name);
      continue;
    }
    check(from->has_values(), "'{}' is held as {} only in the source model (Model::ensure_values)", p->name,
          weight_type_name(from->storage));
    check(from->value.shape() == p->value.shape(), "'{}' is {} in the source model, {} in this one", p->name,
          from->value.shape(), p->value.shape());
    std::copy(from->value.span().begin(), from->value.span().end(), p->value.data());
  }
  check(kept.size() < impl_->params.size(), "the source model shares no parameter with this one (its first is '{}')",
        source.impl_->params.empty() ? std::string("none") : source.impl_->params.front()->name);
  return kept;
}

void Model::zero_grad() {
  impl_->ensure_gradients();
  impl_->grads.zero();
}

std::span<float> Model::parameter_buffer() { return impl_->values.span(); }
std::span<const float> Model::parameter_buffer() const { return impl_->values.span(); }
std::span<float> Model::gradient_buffer() {
  impl_->ensure_gradients();
  return impl_->grads.span();
}

void Model::adopt_parameter_buffer(std::span<float> values, std::shared_ptr<const void> owner) {
  Impl& m = *impl_;
  check(values.size() == m.values.span().size(),
        "the adopted parameter buffer holds {} floats, the model's parameters {}", values.size(), m.values.numel());
  for (size_t i = 0; i < m.params.size(); ++i) {
    Parameter& p = *m.params[i];
    p.value = Tensor::borrowing(m.offsets[i] >= 0 ? values.data() + m.offsets[i] : nullptr, p.value.shape());
  }
  m.values = Tensor::borrowing(values.data(), Shape{static_cast<int64_t>(values.size())});
  m.mapping = std::move(owner);
}

void Model::Impl::lay_out(const std::function<bool(const Parameter&)>& blocks_only) {
  int64_t total = 0;
  offsets.clear();
  for (const Parameter* p : params) {
    const bool kept = !blocks_only || !blocks_only(*p);
    offsets.push_back(kept ? total : -1);
    if (kept) total += p->numel();
  }
  values = Tensor::weights({total});  // zero weights
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    p.value = Tensor::borrowing(offsets[i] >= 0 ? values.data() + offsets[i] : nullptr, p.value.shape());
    if (is_norm_gain(p.role) && p.has_values()) p.value.fill(config.norm_unit_offset ? 0.0f : 1.0f);  // a gain of 1
    p.grad = Tensor();  // until ensure_gradients
  }
  gradients_laid_out = false;
}

void Model::Impl::relay_out(const std::function<bool(const Parameter&)>& blocks_only) {
  std::vector<int64_t> next;
  int64_t total = 0;
  for (const Parameter* p : params) {
    const bool kept = !nn::held_as_stored(*p) || !blocks_only(*p);
    next.push_back(kept ? total : -1);
    if (kept) total += p->numel();
  }
  Tensor moved = Tensor::uninitialized_weights({total});  // every kept value is copied or dequantized in below
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    float* to = next[i] >= 0 ? moved.data() + next[i] : nullptr;
    if (to != nullptr && p.has_values())
      std::memcpy(to, p.value.data(), sizeof(float) * static_cast<size_t>(p.numel()));
    else if (to != nullptr)
      nn::dequantize_values(p, to);
  }
  for (size_t i = 0; i < params.size(); ++i)
    params[i]->value = Tensor::borrowing(next[i] >= 0 ? moved.data() + next[i] : nullptr, params[i]->value.shape());
  values = std::move(moved);
  mapping.reset();
  offsets = std::move(next);
  grads = Tensor();
  for (Parameter* p : params) p->grad = Tensor();
  gradients_laid_out = false;
  release_cached_memory();  // the buffer the values moved out of
}

void Model::hold_as_stored() {
  const auto& params = impl_->params;
  if (std::none_of(params.begin(), params.end(), [](const Parameter* p) { return p->has_values() && nn::held_as_stored(*p); }))
    return;
  impl_->relay_out([](const Parameter&) { return true; });
}

void Model::ensure_values() {
  const auto& params = impl_->params;
  if (std::all_of(params.begin(), params.end(), [](const Parameter* p) { return p->has_values(); })) return;
  impl_->relay_out([](const Parameter&) { return false; });
}

void Model::Impl::ensure_gradients() {
  if (gradients_laid_out) return;
  int64_t total = 0;
  for (const Parameter* p : params) {
    if (p->frozen) continue;
    check(p->has_values(), "'{}' is held as quantized blocks only: training needs its float values "
          "(Model::ensure_values, or freeze it)", p->name);
    total += p->numel();
  }
  grads = Tensor::weights({total});
  total = 0;
  for (Parameter* p : params) {
    p->grad = p->frozen ? Tensor() : Tensor::borrowing(grads.data() + total, p->value.shape());
    if (!p->frozen) total += p->numel();
  }
  gradients_laid_out = true;
}

void Model::freeze(const std::function<bool(const Parameter&)>& which) {
  Impl& m = *impl_;
  for (Parameter* p : m.params) p->frozen = which(*p);
  m.grads = Tensor();
  for (Parameter* p : m.params) p->grad = Tensor();
  m.gradients_laid_out = false;
}

int Model::add_lora(const LoraConfig& config) {
  config.validate();
  if (!config.layers.empty()) {  // those blocks' projections, each at r and alpha
    LoraConfig by_module = config;
    by_module.layers.clear();
    by_module.per_module = nn::modules_of_layers(*this, config);
    return add_lora(by_module);
  }
  Impl& m = *impl_;
  const bool taken = std::find(m.adapters.begin(), m.adapters.end(), config.name) != m.adapters.end();
  check(!taken || !config.name.empty(), "lora: the model has its own adapters already (merge_lora folds them in; "
        "further ones need a name)");
  check(!taken, "lora: the model has adapters named '{}' already", config.name);
  check(m.adapters.size() < 64, "lora: a model holds at most 64 adapter sets");
  check(!(config.adapts_ffn() && m.config.n_experts > 0),
        "lora: targets up, gate or down on a Mixture-of-Experts FFN are not supported (adapt q, k, v, o)");
  // gate on an FFN without one adapts nothing: as PEFT's target_modules, a list may name it beside others (the
  // same list for every family), but a list that adapts nothing at all is refused (it trained zero gradients).
  if (!is_gated(m.config.activation) && std::find(config.targets.begin(), config.targets.end(), "gate") != config.targets.end()) {
    check(config.targets.size() > 1, "lora: targets is only 'gate', but this model's FFN is not gated (its projections "
          "are up and down; gate is SwiGLU's or GeGLU's, as in Llama, Qwen, Gemma and T5 v1.1)");
    log::info("lora: this model's FFN is not gated: target gate adapts nothing");
  }
  // Each key a projection the layers below will adapt, before they change.
  check_module_keys(*this, config.per_module, config.targets, "lora: an adapter on");
  std::set<const Parameter*> before;
  for (const Parameter* p : m.params)
    if (p->role == Role::LoraA) before.insert(p);
  if (m.encoder) m.encoder->add_lora(config);
  if (m.decoder) m.decoder->add_lora(config);
  m.collect_parameters();
  m.relay_out([](const Parameter& p) { return !p.has_values(); });  // quantized-only weights stay so
  const auto slot = static_cast<int32_t>(m.adapters.size());
  m.adapters.push_back(config.name);
  const std::vector<std::string> modules =
      modules_to_save(m.config, config.name.empty() ? config.modules_to_save : m.config.lora_modules_to_save);
  if (config.name.empty()) {  // config.json says so: the saved model loads with its adapters
    m.config.lora_r = config.r, m.config.lora_alpha = config.alpha, m.config.lora_targets = config.targets;
    m.config.lora_rslora = config.rslora, m.config.lora_dropout = config.dropout;
    m.config.lora_modules_to_save = modules;
    m.config.lora_per_module = config.per_module;
  }
  uint64_t offset = 0;  // the new A drawn as PEFT draws it; B stays 0
  for (Parameter* p : m.params) {
    for (LowRankUpdate& u : p->lora)
      if (!before.count(u.A)) u.adapter = slot;
    if (p->role != Role::LoraA || before.count(p)) continue;
    nn::draw_lora_a(*p, config.seed, offset);
    offset += static_cast<uint64_t>(p->numel());
  }
  freeze([&](const Parameter& p) { return !trains_with_adapters(p, modules); });
  return slot;
}

void Model::merge_lora() {
  Impl& m = *impl_;
  if (!has_lora()) return;
  // A matrix held as stored (16 bits, or quantized blocks: a GGUF base) takes its adapters as fp32 values: W + s·B·A
  // is no longer its stored type, and a stored copy left beside would go on being multiplied without them.
  set_storage(WeightType::F32, [](const Parameter& p) { return !p.lora.empty() && nn::held_as_stored(p); });
  if (m.encoder) m.encoder->merge_lora();
  if (m.decoder) m.decoder->merge_lora();
  m.collect_parameters();
  m.relay_out([](const Parameter& p) { return !p.has_values(); });
  m.config.lora_r = 0;
  m.config.lora_modules_to_save.clear();
  m.adapters.clear();
  m.config.lora_per_module.clear();
  freeze([](const Parameter&) { return false; });
}

const std::vector<std::string>& Model::adapters() const { return impl_->adapters; }
bool Model::lora_per_module() const { return !impl_->config.lora_per_module.empty(); }

bool Model::has_lora() const {
  return std::any_of(impl_->params.begin(), impl_->params.end(),
                     [](const Parameter* p) { return p->role == Role::LoraA; });
}

std::vector<Parameter*> Model::trainable_parameters() {
  std::vector<Parameter*> out;
  for (Parameter* p : impl_->params)
    if (!p->frozen) out.push_back(p);
  return out;
}

std::vector<MoEStats> Model::moe_stats(const ForwardState& state) const {
  std::vector<MoEStats> out;
  if (impl_->encoder) impl_->encoder->moe_stats(state.impl_->encoder, out);
  if (impl_->decoder) impl_->decoder->moe_stats(state.impl_->decoder, out);
  return out;
}

ForwardResult Model::forward(const Batch& batch, const RunOptions& options) {
  if (!impl_->own_state) impl_->own_state = std::make_unique<ForwardState>();
  return forward(batch, *impl_->own_state, options);
}

void Model::backward(double scale) {
  check(impl_->own_state != nullptr, "backward: no forward has run");
  backward(*impl_->own_state, scale);
}

const Tensor& Model::logits() const {
  static const Tensor none;
  return impl_->own_state ? impl_->own_state->logits() : none;
}

std::vector<MoEStats> Model::moe_stats() const {
  return impl_->own_state ? moe_stats(*impl_->own_state) : std::vector<MoEStats>{};
}

void Model::set_storage(WeightType storage, const std::function<bool(const Parameter&)>& which) {
  // The chosen quantized matrices are requantized, or widened, from their values; the others keep their blocks.
  const auto& params = impl_->params;
  if (std::any_of(params.begin(), params.end(), [&](const Parameter* p) { return (!which || which(*p)) && !p->has_values(); }))
    impl_->relay_out([&](const Parameter& p) { return !p.has_values() && which && !which(p); });
  for (Parameter* p : impl_->params) {
    if (which && !which(*p)) continue;
    p->storage = WeightType::F32;
    p->packed.clear();
    p->packed.shrink_to_fit();
    p->quantized.clear();
    if (storage == WeightType::F32) continue;
    const bool multiplied = multiplies(*p, impl_->config);
    if (is_quantized(storage)) {
      // The multiplied matrices as blocks (their values become the blocks' values); a matrix whose rows are not
      // whole blocks of the type takes the nearest type that fits, as llama.cpp's quantizer does (the K types'
      // 256-value blocks: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0), or stays fp32 (rows not a multiple of 32).
      if (!multiplied) continue;
      if (nn::quantize_parameter(*p, storage)) continue;
      (void)nn::quantize_parameter(*p, nn::block_fallback(storage));
      continue;
    }
    // Every value becomes what a checkpoint of that dtype holds, so every path (the fp32 lookups, the 16-bit
    // matmuls) sees one model; the multiplied matrices also stay packed.
    PackedBits bits(static_cast<size_t>(p->numel()));
    kernels::round_to_half(nn::half_type(storage), bits.data(), p->value.data(), p->numel());
    kernels::widen_half(nn::half_type(storage), p->value.data(), bits.data(), p->numel());
    if (multiplied) p->storage = storage, p->packed = std::move(bits);
  }
  // The quantized matrices are used as their blocks: their float values go.
  if (is_quantized(storage)) impl_->relay_out([](const Parameter& p) { return !p.quantized.empty(); });
}

bool Model::multiplies(const Parameter& p, const ModelConfig& c) {
  return (is_projection(p.role) && p.role != Role::Router) ||
         (c.tie_embeddings && p.role == Role::TokenEmbedding && p.name == "embed.tokens.weight");  // not BERT's types
}

bool Model::holds_packed() const {
  return std::any_of(impl_->params.begin(), impl_->params.end(), [](const Parameter* p) { return p->storage != WeightType::F32; });
}

bool Model::holds_quantized() const {
  return std::any_of(impl_->params.begin(), impl_->params.end(), [](const Parameter* p) { return !p->quantized.empty(); });
}

ParameterCount Model::count() const {
  ParameterCount n;
  for (const Parameter* p : impl_->params) {
    switch (part_of(p->role)) {
      case Part::Embeddings: n.embeddings += p->numel(); break;
      case Part::Attention: n.attention += p->numel(); break;
      case Part::Ffn: n.ffn += p->numel(); break;
      case Part::Norms: n.norms += p->numel(); break;
      case Part::Heads: n.heads += p->numel(); break;
      case Part::Adapters: n.adapters += p->numel(); break;
    }
  }
  return n;
}

Tensor Model::hidden_states(const Batch& batch, uint64_t adapters,
                            std::span<const std::optional<double>> adapter_scales) const {
  const Impl& w = *impl_;
  const ModelConfig& c = w.config;
  check(c.architecture != Architecture::EncoderDecoder,
        "hidden_states: an encoder-decoder model has two stacks; run its encoder or decoder through forward");
  const int64_t B = batch.B, T = batch.T;
  check(B >= 1, "batch: B = {}, expected at least one sequence", B);
  const std::vector<int32_t> lengths = check_sequences(batch.ids, batch.lengths, B, T, "ids", "lengths", c);
  check(batch.token_types.empty() || static_cast<int64_t>(batch.token_types.size()) == B * T,
        "batch: token_types has {} entries, expected B·T = {}", batch.token_types.size(), B * T);
  for (int32_t t : batch.token_types)
    check(t >= 0 && t < std::max<int64_t>(c.type_vocab_size, 1), "batch: token type {} is not one of the model's {}", t,
          std::max<int64_t>(c.type_vocab_size, 1));
  const std::vector<uint8_t> valid = valid_mask(lengths, B, T);
  const Tensor x = w.embed(nullptr, batch.ids, batch.token_types, B, T, false, nullptr);
  const StackCall call{B, T, lengths.data(), valid.data()};
  const std::vector<double> multipliers = nn::adapter_multipliers(*this, adapter_scales);
  const nn::SameAdapters rows(*this, adapters, multipliers, B * T);
  const nn::SelectAdapters select(rows.masks, rows.scales);
  Tensor top = (c.has_encoder() ? *w.encoder : *w.decoder).forward(x, call, nullptr);
  top.reshape({B, T, c.d_model});
  return top;
}

ForwardResult Model::forward(const Batch& batch, ForwardState& state, const RunOptions& options) const {
  const Impl& w = *impl_;  // the weights
  ForwardState::Impl& m = *state.impl_;
  const ModelConfig& c = w.config;
  const bool keep = m.for_backward;  // evaluation's states keep the logits only
  check(keep || !options.training, "forward: training needs a state that keeps activations for backward");
  check(keep || options.precision == Precision::F32,
        "forward: mixed precision needs a state that keeps activations (its rounded weights live there)");
  m.precision = options.precision;
  const int64_t B = batch.B, T = batch.T, C = c.d_model, V = c.vocab_size;
  check(B >= 1, "batch: B = {}, expected at least one sequence", B);
  Rng rng(options.seed, options.offset);
  m.B = B, m.T = T, m.src_T = batch.src_T;
  m.has_loss = false;
  m.n_targets = 0;

  // The encoder: the whole model (encoder-only) or its first half (encoder-decoder).
  std::vector<int32_t>& src_lengths = m.src_lengths;
  src_lengths.clear();
  if (c.has_encoder()) {
    const bool enc_only = c.architecture == Architecture::Encoder;
    const auto& ids = enc_only ? batch.ids : batch.src_ids;
    const int64_t Ts = enc_only ? T : batch.src_T;
    src_lengths = check_sequences(ids, enc_only ? batch.lengths : batch.src_lengths, B, Ts,
                                  enc_only ? "ids" : "src_ids", enc_only ? "lengths" : "src_lengths", c);
    m.enc_valid = valid_mask(src_lengths, B, Ts);
    check(batch.token_types.empty() || enc_only, "batch: token_types are for encoder-only models");
    if (!batch.token_types.empty()) {
      check(static_cast<int64_t>(batch.token_types.size()) == B * Ts, "batch: token_types has {} entries, expected B·T = {}",
            batch.token_types.size(), B * Ts);
      for (int64_t i = 0; i < B * Ts; ++i)
        check(batch.token_types[i] >= 0 && batch.token_types[i] < std::max<int64_t>(c.type_vocab_size, 1),
              "batch: token_types[{}][{}] = {} is not a type of the model's {} (type_vocab_size)", i / Ts, i % Ts,
              batch.token_types[i], std::max<int64_t>(c.type_vocab_size, 1));
    }
    const Tensor x = w.embed(keep ? &m.enc_embed : nullptr, ids, batch.token_types, B, Ts, options.training, &rng);
    StackCall call{B, Ts, src_lengths.data(), m.enc_valid.data(), nullptr, nullptr, options.training, &rng,
                   options.precision};
    m.enc_out = w.encoder->forward(x, call, keep ? &m.encoder : nullptr);
    m.enc_out.reshape({B, Ts, C});
  }
  m.lengths = c.architecture == Architecture::Encoder
                  ? src_lengths
                  : check_sequences(batch.ids, batch.lengths, B, T, "ids", "lengths", c);

  Tensor top;  // (B·T, C): the last stack's output
  if (c.has_decoder()) {
    m.dec_valid = valid_mask(m.lengths, B, T);
    check(batch.token_types.empty() || c.architecture == Architecture::Encoder,
          "batch: token_types are for encoder-only models");
    const Tensor x = w.embed(keep ? &m.dec_embed : nullptr, batch.ids, {}, B, T, options.training, &rng);
    StackCall call{B, T, m.lengths.data(), m.dec_valid.data(), nullptr, nullptr, options.training, &rng,
                   options.precision};
    if (c.architecture == Architecture::EncoderDecoder) {
      call.context = &m.enc_out;
      call.context_lengths = src_lengths.data();
    }
    top = w.decoder->forward(x, call, keep ? &m.decoder : nullptr);
  } else {
    top = m.enc_out.clone();
    top.reshape({B * T, C});
  }
  // Every dropout mask has been drawn by now (attention's alone takes B·H·Tq·Tk numbers per layer).
  const uint64_t drawn = rng.offset() - options.offset;
  check(options.rng_window == 0 || drawn <= options.rng_window,
        "dropout: this batch (B = {}, T = {}) draws {} random numbers, more than its window of {}: the next "
        "batch's masks would repeat these; split it into smaller micro-batches (train.grad_accum) or shorten it",
        B, T, drawn, options.rng_window);

  // Targets at padding positions are dropped, so padding never has a loss.
  std::vector<int32_t> targets;
  if (!batch.targets.empty()) {
    check(static_cast<int64_t>(batch.targets.size()) == B * T, "batch: targets has {} entries, expected B·T = {}",
          batch.targets.size(), B * T);
    targets = batch.targets;
    for (int64_t i = 0; i < B * T; ++i) {
      if (i % T >= m.lengths[i / T]) targets[i] = Batch::kIgnore;
      check(targets[i] == Batch::kIgnore || (targets[i] >= 0 && targets[i] < V),
            "batch: targets[{}][{}] = {} is neither a token id in [0, {}) nor {} (no target)", i / T, i % T, targets[i],
            V, Batch::kIgnore);
    }
  }

  int64_t rows = 0, classes = V;
  if (!batch.labels.empty()) {  // classification over pooled states
    check(c.architecture == Architecture::Encoder && c.n_classes > 0,
          "batch: has labels, but the model has no classification head (an encoder with n_classes > 0)");
    check(static_cast<int64_t>(batch.labels.size()) == B, "batch: labels has {} entries, expected B = {}",
          batch.labels.size(), B);
    m.head = ForwardState::Impl::Head::Classify;
    classes = c.n_classes;
    m.head_in = Tensor({B, C});
    for (int64_t b = 0; b < B; ++b) {
      float* dst = m.head_in.data() + b * C;
      if (c.pooling == Pooling::CLS) {
        std::memcpy(dst, top.data() + b * T * C, C * sizeof(float));
      } else {
        for (int64_t t = 0; t < m.lengths[b]; ++t)
          for (int64_t ch = 0; ch < C; ++ch) dst[ch] += top[(b * T + t) * C + ch];
        for (int64_t ch = 0; ch < C; ++ch) dst[ch] /= static_cast<float>(m.lengths[b]);
      }
    }
    if (c.pooler) {  // BERT's pooler: tanh(W_p·pooled + b_p)
      m.pooled = w.pooler.forward(m.head_in, options.precision, keep ? &m.pooler : nullptr);
      for (int64_t i = 0; i < m.pooled.numel(); ++i) m.pooled[i] = std::tanh(m.pooled[i]);  // B·C values: no kernel
    }
    m.logits = w.classifier.forward(c.pooler ? m.pooled : m.head_in, options.precision, keep ? &m.classifier : nullptr);
    m.head_targets = batch.labels;
    for (int64_t b = 0; b < B; ++b)
      check(m.head_targets[b] >= 0 && m.head_targets[b] < classes, "batch: labels[{}] = {} is outside [0, {})", b,
            m.head_targets[b], classes);
    rows = B;
  } else if (c.architecture == Architecture::Encoder) {  // MLM at the positions with a target (all if none)
    check(c.mlm_head, "batch: has no labels, and the model has no masked-LM head (mlm_head false): an encoder "
          "without heads gives no logits");
    m.head = ForwardState::Impl::Head::MLM;
    m.head_rows.clear();
    m.head_targets.clear();
    for (int64_t i = 0; i < B * T; ++i)
      if (targets.empty() || targets[i] != Batch::kIgnore) {
        m.head_rows.push_back(i);
        m.head_targets.push_back(targets.empty() ? Batch::kIgnore : targets[i]);
      }
    rows = static_cast<int64_t>(m.head_rows.size());
    m.head_in = Tensor({rows, C});
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(m.head_in.data() + r * C, top.data() + m.head_rows[r] * C, C * sizeof(float));
    // h = norm(GELU(x·W_denseᵀ + b)), logits = h·Eᵀ + b_vocab
    m.mlm_hidden = w.mlm_dense.forward(m.head_in, options.precision, keep ? &m.mlm_dense : nullptr);
    m.mlm_act = Tensor(m.mlm_hidden.shape());
    kernels::activation_forward(Activation::GELU, m.mlm_act.data(), m.mlm_hidden.data(), m.mlm_act.numel());
    const Tensor h = w.mlm_norm->forward(m.mlm_act, keep ? &m.mlm_norm : nullptr);
    m.logits = Tensor({rows, V});
    nn::linear_forward(m.logits.data(), h.data(), w.output_matrix(), w.mlm_bias.value.data(), rows, C, V,
                       options.precision, &m.head_rounded);
  } else {  // LM head: logits = h·Wᵀ
    m.head = ForwardState::Impl::Head::LM;
    rows = B * T;
    m.head_in = std::move(top);
    if (c.lm_head_scale != 1.0) kernels::scale(m.head_in.data(), m.head_in.numel(), static_cast<float>(c.lm_head_scale));
    m.logits = Tensor::uninitialized({B, T, V});
    nn::linear_forward(m.logits.data(), m.head_in.data(), w.output_matrix(), nullptr, rows, C, V,
                       options.precision, &m.head_rounded);
    m.head_targets = targets.empty() ? std::vector<int32_t>(rows, Batch::kIgnore) : targets;
  }

  ForwardResult result;
  if (w.encoder) result.aux_loss += w.encoder->aux(m.encoder);
  if (w.decoder) result.aux_loss += w.decoder->aux(m.decoder);
  const bool has_targets = !batch.labels.empty() || !batch.targets.empty();
  if (has_targets) {
    m.lse = Tensor({rows});
    Tensor losses({rows});
    const float smoothing = options.label_smoothing;
    check(smoothing >= 0.0f && smoothing < 1.0f, "label smoothing must be in [0, 1), got {}", smoothing);
    m.n_targets = kernels::cross_entropy_forward(losses.data(), m.lse.data(), m.logits.data(), m.head_targets.data(),
                                                 rows, classes, smoothing, Batch::kIgnore);
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) sum += losses[r];
    result.ce_loss = m.n_targets > 0 ? sum / double(m.n_targets) : 0.0;
    m.has_loss = true;
    m.label_smoothing = smoothing;
  }
  result.n_targets = m.n_targets;
  result.loss = result.ce_loss + c.moe_aux_loss_weight * result.aux_loss;  // aux is 0 without MoE blocks
  return result;
}

void Model::backward(const ForwardState& state, double scale, const std::function<void(int64_t)>& gradients_final) {
  Impl& w = *impl_;
  const ForwardState::Impl& m = *state.impl_;
  const ModelConfig& c = w.config;
  check(m.for_backward, "backward: the forward's state kept no activations (it was made for evaluation)");
  w.ensure_gradients();
  check(m.has_loss, "backward: the last forward computed no loss (the batch had no targets or labels)");
  const int64_t C = c.d_model, V = c.vocab_size, B = m.B, T = m.T;
  const int64_t rows = m.logits.numel() / (m.head == ForwardState::Impl::Head::Classify ? c.n_classes : V);
  const int64_t classes = m.head == ForwardState::Impl::Head::Classify ? c.n_classes : V;

  // ∂(mean loss)/∂ℓ_r = 1/n for rows with a target.
  Tensor dlosses({rows});
  for (int64_t r = 0; r < rows; ++r)
    if (m.head_targets[r] != Batch::kIgnore && m.n_targets > 0)
      dlosses[r] = static_cast<float>(scale / static_cast<double>(m.n_targets));
  Tensor dlogits({rows, classes});
  kernels::cross_entropy_backward(dlogits.data(), dlosses.data(), m.logits.data(), m.lse.data(), m.head_targets.data(),
                                  rows, classes, m.label_smoothing, Batch::kIgnore);

  Tensor dtop({B * T, C});
  Parameter& W = w.output_matrix();
  switch (m.head) {
    case ForwardState::Impl::Head::LM:
      nn::linear_backward(dtop.data(), W, nullptr, dlogits.data(), m.head_in.data(), rows, C, V, m.precision,
                          &m.head_rounded);
      if (c.lm_head_scale != 1.0) kernels::scale(dtop.data(), dtop.numel(), static_cast<float>(c.lm_head_scale));
      break;
    case ForwardState::Impl::Head::MLM: {
      const Tensor h = w.mlm_norm->forward(m.mlm_act, nullptr);  // recompute the normed rows (cheap)
      Tensor dh({rows, C});
      nn::linear_backward(dh.data(), W, w.mlm_bias.grad.data(), dlogits.data(), h.data(), rows, C, V, m.precision,
                          &m.head_rounded);
      const Tensor dact = w.mlm_norm->backward(dh, m.mlm_norm);
      Tensor dhidden(m.mlm_hidden.shape());
      kernels::activation_backward(Activation::GELU, dhidden.data(), dact.data(), m.mlm_hidden.data(), dhidden.numel());
      const Tensor din = w.mlm_dense.backward(dhidden, m.mlm_dense);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t ch = 0; ch < C; ++ch) dtop[m.head_rows[r] * C + ch] += din[r * C + ch];
      break;
    }
    case ForwardState::Impl::Head::Classify: {
      Tensor dpooled = w.classifier.backward(dlogits, m.classifier);
      if (c.pooler) {  // tanh' = 1 − y², then the pooler's dense
        for (int64_t i = 0; i < dpooled.numel(); ++i) dpooled[i] *= 1.0f - m.pooled[i] * m.pooled[i];
        dpooled = w.pooler.backward(dpooled, m.pooler);
      }
      for (int64_t b = 0; b < B; ++b) {
        if (c.pooling == Pooling::CLS) {
          for (int64_t ch = 0; ch < C; ++ch) dtop[b * T * C + ch] += dpooled[b * C + ch];
        } else {
          const float inv = 1.0f / static_cast<float>(m.lengths[b]);
          for (int64_t t = 0; t < m.lengths[b]; ++t)
            for (int64_t ch = 0; ch < C; ++ch) dtop[(b * T + t) * C + ch] += dpooled[b * C + ch] * inv;
        }
      }
      break;
    }
    case ForwardState::Impl::Head::None: break;
  }

  const double daux = c.n_experts > 0 ? scale * c.moe_aux_loss_weight : 0.0;
  // A stack's blocks lie in the buffer in order, after the embeddings and before the heads, and the encoder's
  // before the decoder's; what several blocks share (T5's relative bias) lives in the first. So once block i
  // is done, every gradient from its first parameter on is final; the embeddings are last.
  // Frozen parameters have no gradient: the offset is that of the first trainable one from the block on.
  auto reporter = [&](const nn::Stack& stack) {
    return std::function<void(size_t)>([&, stack_ptr = &stack](size_t i) {
      const Parameter* first = &stack_ptr->first_parameter(i);
      auto at = std::find(w.params.begin(), w.params.end(), first);
      while (at != w.params.end() && (*at)->frozen) ++at;
      gradients_final(at == w.params.end() ? w.grads.numel() : (*at)->grad.data() - w.grads.data());
    });
  };
  const bool report = static_cast<bool>(gradients_final);
  if (c.architecture == Architecture::Encoder) {
    Tensor dx = w.encoder->backward(dtop, daux, nullptr, m.encoder, report ? reporter(*w.encoder) : nullptr);
    w.embed_backward(m.enc_embed, dx);
    return;
  }
  Tensor dcontext;
  if (c.architecture == Architecture::EncoderDecoder) dcontext = Tensor({B, m.src_T, C});
  Tensor dx = w.decoder->backward(dtop, daux, dcontext.numel() ? &dcontext : nullptr, m.decoder,
                                  report ? reporter(*w.decoder) : nullptr);
  w.embed_backward(m.dec_embed, dx);
  if (c.architecture == Architecture::EncoderDecoder) {
    dcontext.reshape({B * m.src_T, C});
    Tensor dsrc = w.encoder->backward(dcontext, daux, nullptr, m.encoder, report ? reporter(*w.encoder) : nullptr);
    w.embed_backward(m.enc_embed, dsrc);
  }
}

}  // namespace attend
