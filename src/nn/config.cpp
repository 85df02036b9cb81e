// ModelConfig: config.json in and out, and the consistency checks. Every field is listed once, in
// for_each_field; reading, writing and `--set` all walk that list.
#include <attend/error.h>

#include <algorithm>
#include <attend/model.h>

#include "core/json_fields.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <span>
#include <tuple>
#include <utility>

namespace attend {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr EnumName<Architecture> kArchitectures[] = {
    {Architecture::Decoder, "decoder"}, {Architecture::Encoder, "encoder"}, {Architecture::EncoderDecoder, "encoder-decoder"}};
constexpr EnumName<NormKind> kNorms[] = {{NormKind::LayerNorm, "layernorm"}, {NormKind::RMSNorm, "rmsnorm"}};
constexpr EnumName<FfnKind> kFfns[] = {
    {FfnKind::ReLU, "relu"}, {FfnKind::GELU, "gelu"}, {FfnKind::GELUTanh, "gelu_tanh"}, {FfnKind::SwiGLU, "swiglu"},
    {FfnKind::GeGLU, "geglu"}};
constexpr EnumName<PositionKind> kPositions[] = {{PositionKind::None, "none"},       {PositionKind::Learned, "learned"},
                                                 {PositionKind::Sinusoidal, "sinusoidal"}, {PositionKind::RoPE, "rope"},
                                                 {PositionKind::ALiBi, "alibi"},     {PositionKind::T5, "t5"}};
constexpr EnumName<Role> kRoles[] = {
    {Role::TokenEmbedding, "token_embedding"}, {Role::PositionTable, "position_table"},
    {Role::AttentionQkv, "attention_qkv"},     {Role::AttentionQuery, "attention_query"},
    {Role::AttentionKeyValue, "attention_key_value"}, {Role::AttentionOutput, "attention_output"},
    {Role::AttentionBias, "attention_bias"},   {Role::RelativePositionBias, "relative_position_bias"},
    {Role::FfnIn, "ffn_in"},                   {Role::FfnOut, "ffn_out"},
    {Role::FfnBias, "ffn_bias"},               {Role::Router, "router"},
    {Role::NormGain, "norm_gain"},             {Role::NormBias, "norm_bias"},
    {Role::HeadMatrix, "head"},                {Role::HeadBias, "head_bias"},
    {Role::HeadNormGain, "head_norm_gain"},    {Role::HeadNormBias, "head_norm_bias"},
    {Role::LoraA, "lora_a"},                   {Role::LoraB, "lora_b"}};
constexpr EnumName<AttentionKernel> kAttentionKernels[] = {
    {AttentionKernel::Flash, "flash"}, {AttentionKernel::Reference, "reference"}, {AttentionKernel::Linear, "linear"}};
constexpr EnumName<Pooling> kPoolings[] = {{Pooling::CLS, "cls"}, {Pooling::Mean, "mean"}};
constexpr EnumName<InitScheme> kInits[] = {{InitScheme::GPT2, "gpt2"}, {InitScheme::Xavier, "xavier"}};

}  // namespace

template <> std::span<const EnumName<Architecture>> names_of() { return kArchitectures; }
template <> std::span<const EnumName<NormKind>> names_of() { return kNorms; }
template <> std::span<const EnumName<FfnKind>> names_of() { return kFfns; }
template <> std::span<const EnumName<PositionKind>> names_of() { return kPositions; }
template <> std::span<const EnumName<Pooling>> names_of() { return kPoolings; }
template <> std::span<const EnumName<AttentionKernel>> names_of() { return kAttentionKernels; }
template <> std::span<const EnumName<InitScheme>> names_of() { return kInits; }

namespace {

// "norm_placement" is a bool in the struct and a name in the file.
struct Placement {
  bool& pre_norm;
  void read(const json& v, const std::string& where) {
    check(v.is_string() && (v == "pre" || v == "post"), "{} is {}, expected \"pre\" or \"post\"", where, v.dump());
    pre_norm = v == "pre";
  }
  ordered_json write() const { return pre_norm ? "pre" : "post"; }
};

// "lora_per_module": {"decoder.layers.1.attn.qkv.q": {"r": 4, "alpha": 8}, ...}; {} for none.
struct PerModule {
  std::map<std::string, LoraConfig::Rank>& ranks;
  void read(const json& v, const std::string& where) {
    check(v.is_object(), "{} is {}, expected an object of modules, each {{\"r\": rank, \"alpha\": alpha}}", where,
          v.dump());
    std::map<std::string, LoraConfig::Rank> out;
    for (const auto& [key, m] : v.items()) {
      check(m.is_object() && m.size() == 2 && m.contains("r") && m.contains("alpha") && m["r"].is_number_integer() &&
                m["alpha"].is_number(),
            "{}: '{}' is {}, expected {{\"r\": rank, \"alpha\": alpha}}", where, key, m.dump());
      out[key] = {.r = m["r"].get<int64_t>(), .alpha = m["alpha"].get<double>()};
    }
    ranks = std::move(out);
  }
  ordered_json write() const {
    ordered_json j = ordered_json::object();
    for (const auto& [key, m] : ranks) j[key] = {{"r", m.r}, {"alpha", m.alpha}};
    return j;
  }
};

// Calls f(name, field, description) for every field of config.json, in the file's order. The descriptions
// are docs/FORMATS.md's.
template <typename Config, typename F>
void for_each_field(Config& c, F&& f) {
  f("architecture", c.architecture, "decoder (GPT: causal LM), encoder (BERT: bidirectional, MLM and classification heads), encoder-decoder (T5: encoder, causal decoder with cross-attention, LM head)");
  f("vocab_size", c.vocab_size, "V");
  f("d_model", c.d_model, "C");
  f("n_layers", c.n_layers, "blocks of the decoder (decoder), of the encoder (encoder, encoder-decoder)");
  f("n_decoder_layers", c.n_decoder_layers, "encoder-decoder only: decoder blocks; 0 means n_layers");
  f("n_heads", c.n_heads, "H");
  f("n_kv_heads", c.n_kv_heads, "key/value heads: 0 means n_heads (MHA), 1 is MQA, a divisor of n_heads is GQA");
  f("head_dim", c.head_dim, "channels per head; 0 means d_model / n_heads");
  f("d_ff", c.d_ff, "FFN hidden size; 0 means 4·d_model, or when gated (swiglu, geglu) ⌈(8/3)·d_model / ffn_multiple_of⌉·ffn_multiple_of");
  f("ffn_multiple_of", c.ffn_multiple_of, "a gated FFN's default hidden size is rounded up to a multiple of this");
  f("activation", c.activation, "FFN: relu, gelu (exact, erf), gelu_tanh (GPT-2's gelu_new), swiglu (SiLU-gated), geglu (gelu_tanh-gated)");
  f("max_seq_len", c.max_seq_len, "the context: the longest sequence the model takes (the learned position table's rows)");
  f("position", c.position, "learned or sinusoidal (added to the embeddings), rope, alibi, t5 (inside attention), none");
  f("rope_base", c.rope_base, "RoPE's θ base");
  f("rope_base_scale", c.rope_base_scale, "RoPE context extension: the base multiplied by this");
  f("rope_ntk_factor", c.rope_ntk_factor, "RoPE context extension, NTK-aware: the base times factor^(d/(d-2))");
  f("rope_position_scale", c.rope_position_scale, "RoPE context extension, linear interpolation: positions times this "
    "(Hugging Face's linear rope_scaling factor f is 1/f)");
  f("rope_llama3_factor", c.rope_llama3_factor, "Llama 3.1's frequency-dependent RoPE scaling by this factor; 0: off");
  f("rope_llama3_low_freq_factor", c.rope_llama3_low_freq_factor, "Llama 3.1's scaling: wavelengths above L₀/this are stretched fully");
  f("rope_llama3_high_freq_factor", c.rope_llama3_high_freq_factor, "Llama 3.1's scaling: wavelengths below L₀/this stay");
  f("rope_dynamic_factor", c.rope_dynamic_factor, "dynamic NTK RoPE scaling (Hugging Face's \"dynamic\"): a call reaching L > L₀ positions scales the base; 0: off");
  f("rope_original_context", c.rope_original_context, "L₀, the context the RoPE frequencies were trained at (llama3 and dynamic scaling)");
  f("rope_local_base", c.rope_local_base, "θ of the RoPE of sliding-window blocks, which take none of the scalings above (Gemma 3: 10000); 0: the same RoPE as the other blocks");
  f("sliding_window", c.sliding_window, "causal self-attention sees only the newest W positions, its own included (Mistral, Gemma); 0: all");
  f("sliding_window_pattern", c.sliding_window_pattern, "with sliding_window: blocks k−1, 2k−1, ... (from 0) see all positions and the others the window (Gemma 3: 6); 0: every block has the window");
  f("t5_num_buckets", c.t5_num_buckets, "T5's relative position buckets");
  f("t5_max_distance", c.t5_max_distance, "T5's relative position buckets");
  f("t5_shared_bias", c.t5_shared_bias, "position t5: one relative position table per stack (block 0's, added by every block: Hugging Face's T5) instead of one per block");
  f("norm", c.norm, "layernorm (γ and β) or rmsnorm (γ only)");
  f("norm_eps", c.norm_eps, "ε inside the norm's square root");
  Placement placement{c.pre_norm};
  f("norm_placement", placement, "pre (x + F(norm(x)), with a final norm after the last block) or post (norm(x + F(x)), no final norm)");
  f("sandwich_norm", c.sandwich_norm, "pre-LN blocks also normalise each branch's output before adding it: x + norm'(F(norm(x))) (Gemma 2 and 3)");
  f("norm_unit_offset", c.norm_unit_offset, "every norm multiplies by 1 + γ, its gains stored as offsets from 1 and initialised to 0 (Gemma)");
  f("residual_scale", c.residual_scale, "α in x + α·F(x)");
  f("bias", c.bias, "biases on the attention and FFN projections (GPT-2, BERT yes; LLaMA, T5 no)");
  f("qkv_bias", c.qkv_bias, "biases on the q, k, v projections only, for a model without biases (Qwen2)");
  f("qk_norm", c.qk_norm, "RMSNorm of each head's q and k before RoPE, one gain of head_dim each (Qwen3)");
  f("attention_scale", c.attention_scale, "the score scale; 0 means 1/√d_head (T5 uses 1)");
  f("attention_kernel", c.attention_kernel, "flash (tiled, exact), reference (materialised scores), linear (φ(x) = elu(x)+1, a different model)");
  f("scale_embeddings", c.scale_embeddings, "multiply token embeddings by √d_model (Vaswani et al.)");
  f("tie_embeddings", c.tie_embeddings, "the LM (or MLM) output matrix is the token embedding");
  f("lm_head_scale", c.lm_head_scale, "the LM head multiplies the last state by this first (T5 with tied embeddings: d_model^-1/2)");
  f("embedding_dropout", c.embedding_dropout, "dropout on the embeddings (token + position), in training");
  f("attention_dropout", c.attention_dropout, "dropout on the attention probabilities, in training");
  f("residual_dropout", c.residual_dropout, "dropout on each residual branch's output before it is added, in training");
  f("ffn_dropout", c.ffn_dropout, "dropout on the FFN's hidden activations, in training");
  f("n_experts", c.n_experts, "0: dense FFNs; E > 0: Mixture-of-Experts FFNs of E experts");
  f("moe_top_k", c.moe_top_k, "experts per token");
  f("moe_capacity_factor", c.moe_capacity_factor, "each expert takes at most ⌈factor·N·k/E⌉ of a batch's N tokens; 0 means no limit");
  f("moe_aux_loss_weight", c.moe_aux_loss_weight, "weight of the load-balancing loss added to the training loss");
  f("moe_normalize_weights", c.moe_normalize_weights, "renormalise the top-k gate probabilities to sum to 1");
  f("moe_every", c.moe_every, "block i (from 0) has an MoE FFN when (i + 1) is a multiple of this");
  f("pooling", c.pooling, "encoder classification: the first token's state (cls) or the mean over real tokens (mean)");
  f("n_classes", c.n_classes, "encoder: the classification head's classes (0: none)");
  f("pooler", c.pooler, "classification: the pooled state goes through tanh(dense(·)) before the classifier (BERT's pooler)");
  f("mlm_head", c.mlm_head, "encoder: a masked-LM head (dense, GELU, norm, output matrix); false for an encoder without one (BertModel, BERT classifiers)");
  f("type_vocab_size", c.type_vocab_size, "token type (segment) embeddings added to the token embeddings (BERT: 2, sentences A and B); 0: none");
  f("embedding_norm", c.embedding_norm, "a norm (of the model's kind) over the summed embeddings, before their dropout (BERT)");
  f("class_names", c.class_names, "the classes' names by id (training fills them from the data files' labels, sorted); evaluation maps labels by them");
  f("init", c.init, "gpt2: N(0, init_std²), residual output projections (attention W_O, FFN down) scaled by 1/√(2·blocks); xavier: N(0, 2/(fan_in + fan_out)) for matrices, N(0, init_std²) for embeddings");
  f("init_std", c.init_std, "σ of the GPT-2 initialisation and of the embeddings");
  f("init_qk_scale", c.init_qk_scale, "multiplies the σ of W_Q and W_K (below 1 keeps early attention from collapsing, 004 §8.1)");
  f("seed", c.seed, "the initialisation's random stream");
  f("lora_r", c.lora_r, "LoRA: the adapters' rank on every block (0: none); every other parameter is then frozen");
  f("lora_alpha", c.lora_alpha, "LoRA: the adapters' output is scaled by lora_alpha / lora_r");
  f("lora_targets", c.lora_targets, "LoRA: the projections adapted, among q, k, v, o (attention), up, gate, down (FFN)");
  f("lora_rslora", c.lora_rslora, "LoRA: scale by lora_alpha / √lora_r (rsLoRA) instead");
  f("lora_dropout", c.lora_dropout, "LoRA: dropout on the adapters' input while training (PEFT's lora_dropout)");
  f("lora_modules_to_save", c.lora_modules_to_save, "LoRA: modules that train whole beside the adapters (classifier, pooler; a classification head's by default)");
  PerModule per_module{c.lora_per_module};
  f("lora_per_module", per_module, "LoRA: ranks and alphas module by module, {\"decoder.layers.1.attn.qkv.q\": {\"r\": 4, \"alpha\": 8}, ...}: exactly these modules (of lora_targets) have adapters; {}: every block's, at lora_r and lora_alpha");
}

}  // namespace

const char* architecture_name(Architecture a) { return enum_name<Architecture>(kArchitectures, a); }
const char* role_name(Role r) { return enum_name<Role>(kRoles, r); }

namespace {
constexpr EnumName<WeightType> kWeightTypes[] = {
    {WeightType::F32, "f32"},   {WeightType::BF16, "bf16"}, {WeightType::F16, "f16"},   {WeightType::Q8_0, "q8_0"},
    {WeightType::Q4_0, "q4_0"}, {WeightType::Q4_1, "q4_1"}, {WeightType::Q5_0, "q5_0"}, {WeightType::Q5_1, "q5_1"},
    {WeightType::Q4_K, "q4_k"}, {WeightType::Q5_K, "q5_k"}, {WeightType::Q6_K, "q6_k"},
};
}  // namespace

const char* weight_type_name(WeightType t) { return enum_name<WeightType>(kWeightTypes, t); }
template <>
std::span<const EnumName<WeightType>> names_of() {
  return kWeightTypes;
}
bool parse_weight_type(const std::string& name, WeightType& out) {
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const auto& n : kWeightTypes)
    if (lower == n.name) return out = n.value, true;
  return false;
}

namespace {
thread_local int deferred_storage = 0;  // DeferParameterStorage guards alive on this thread
}  // namespace

DeferParameterStorage::DeferParameterStorage() { ++deferred_storage; }
DeferParameterStorage::~DeferParameterStorage() { --deferred_storage; }

Parameter::Parameter(std::string name, Shape shape, Role role)
    : name(std::move(name)),
      role(role),
      value(deferred_storage > 0 ? Tensor::borrowing(nullptr, shape) : Tensor(shape)),
      grad(deferred_storage > 0 ? Tensor() : Tensor(shape)) {}

QuantizedRows QuantizedRows::owning(int64_t rows, WeightType type, std::vector<uint8_t> blocks) {
  auto memory = std::make_shared<std::vector<uint8_t>>(std::move(blocks));
  QuantizedRows s;
  s.rows = rows, s.type = type, s.data = memory->data(), s.bytes = static_cast<int64_t>(memory->size());
  s.owner = std::move(memory);
  return s;
}

const char* attention_kernel_name(AttentionKernel k) { return enum_name<AttentionKernel>(kAttentionKernels, k); }

int64_t ModelConfig::ffn_hidden() const {
  if (d_ff > 0) return d_ff;
  if (!is_gated(activation)) return 4 * d_model;
  // A gated FFN has three matrices instead of two: 2/3 of 4·d keeps the parameter count (001 §11).
  const int64_t m = ffn_multiple_of > 0 ? ffn_multiple_of : 1;
  const int64_t hidden = (8 * d_model + 2) / 3;  // ⌈8d/3⌉
  return (hidden + m - 1) / m * m;
}

int64_t ModelConfig::decoder_layers() const {
  return architecture == Architecture::EncoderDecoder && n_decoder_layers > 0 ? n_decoder_layers : n_layers;
}

LoraConfig ModelConfig::lora() const {
  return {.r = lora_r, .alpha = lora_alpha, .targets = lora_targets, .rslora = lora_rslora, .seed = seed,
          .dropout = lora_dropout, .modules_to_save = lora_modules_to_save, .per_module = lora_per_module};
}

void ModelConfig::validate() const {
  check(lora_r >= 0, "model: lora_r is {}, expected 0 (no adapters) or a rank", lora_r);
  check(lora_r > 0 || lora_per_module.empty(), "model: lora_per_module without lora_r: a model without adapters");
  if (lora_r > 0) {
    lora().validate();
    check(!(lora().adapts_ffn() && n_experts > 0), "model: lora_targets up, gate or down on a Mixture-of-Experts FFN are not "
          "supported (adapt q, k, v, o)");
  }
  // Sizes past these would overflow what the model derives from them (4·d_model, V·C, the parameter count) long
  // before any machine could hold the weights; they name a broken file, not a model.
  for (auto [name, value, limit] : {std::tuple{"vocab_size", vocab_size, int64_t{1} << 31},
                                    {"d_model", d_model, int64_t{1} << 20},
                                    {"n_layers", n_layers, int64_t{1} << 16},
                                    {"n_decoder_layers", n_decoder_layers, int64_t{1} << 16},
                                    {"n_heads", n_heads, int64_t{1} << 16},
                                    {"n_kv_heads", n_kv_heads, int64_t{1} << 16},
                                    {"head_dim", head_dim, int64_t{1} << 16},
                                    {"d_ff", d_ff, int64_t{1} << 24},
                                    {"ffn_multiple_of", ffn_multiple_of, int64_t{1} << 24},
                                    {"max_seq_len", max_seq_len, int64_t{1} << 31},
                                    {"n_experts", n_experts, int64_t{1} << 16},
                                    {"type_vocab_size", type_vocab_size, int64_t{1} << 20},
                                    {"n_classes", n_classes, int64_t{1} << 24},
                                    {"sliding_window", sliding_window, int64_t{1} << 31},
                                    {"sliding_window_pattern", sliding_window_pattern, int64_t{1} << 16}})
    check(value < limit, "config: {} = {} is beyond any model (at most {})", name, value, limit - 1);
  check(vocab_size > 0, "config: vocab_size must be positive, got {}", vocab_size);
  check(d_model > 0 && n_heads > 0, "config: d_model and n_heads must be positive, got d_model={} n_heads={}", d_model,
        n_heads);
  check(head_dim > 0 || d_model % n_heads == 0,
        "config: d_model {} is not divisible by n_heads {} (or set head_dim)", d_model, n_heads);
  check(head_dim >= 0, "config: head_dim must be non-negative (0: d_model / n_heads), got {}", head_dim);
  check(!qkv_bias || !bias, "config: qkv_bias adds q, k, v biases to a model without biases; bias is already on");
  check(n_kv_heads >= 0 && kv_heads() <= n_heads && n_heads % kv_heads() == 0,
        "config: n_heads {} is not a multiple of n_kv_heads {}", n_heads, n_kv_heads);
  check(n_layers > 0, "config: n_layers must be positive, got {}", n_layers);
  check(n_decoder_layers >= 0, "config: n_decoder_layers must be non-negative, got {}", n_decoder_layers);
  check(n_decoder_layers == 0 || architecture == Architecture::EncoderDecoder,
        "config: n_decoder_layers applies to encoder-decoder models, not {}", architecture_name(architecture));
  check(d_ff >= 0 && ffn_multiple_of > 0, "config: d_ff must be non-negative and ffn_multiple_of positive, got {} and {}",
        d_ff, ffn_multiple_of);
  check(max_seq_len > 0, "config: max_seq_len must be positive, got {}", max_seq_len);
  check(position != PositionKind::RoPE || d_head() % 2 == 0,
        "config: RoPE rotates pairs of channels, so d_head (head_dim, or d_model / n_heads) = {} must be even",
        d_head());
  check(position != PositionKind::Sinusoidal || d_model % 2 == 0,
        "config: sinusoidal positions pair sines and cosines, so d_model must be even, got {}", d_model);
  check(rope_base > 1.0 && rope_base_scale > 0.0 && rope_ntk_factor > 0.0 && rope_position_scale > 0.0,
        "config: rope_base must be > 1 and the RoPE scalings positive");
  check(rope_llama3_factor >= 0.0 && rope_dynamic_factor >= 0.0 && !(rope_llama3_factor > 0.0 && rope_dynamic_factor > 0.0),
        "config: rope_llama3_factor and rope_dynamic_factor must be non-negative, and at most one of them on");
  check((rope_llama3_factor == 0.0 && rope_dynamic_factor == 0.0) || rope_original_context > 0,
        "config: llama3 and dynamic RoPE scaling need rope_original_context (the context trained at), got {}",
        rope_original_context);
  check(rope_llama3_factor == 0.0 || rope_llama3_high_freq_factor > rope_llama3_low_freq_factor,
        "config: rope_llama3_high_freq_factor ({}) must be above rope_llama3_low_freq_factor ({})",
        rope_llama3_high_freq_factor, rope_llama3_low_freq_factor);
  check(rope_local_base == 0.0 || rope_local_base > 1.0, "config: rope_local_base must be 0 (off) or above 1, got {}",
        rope_local_base);
  check(sliding_window >= 0 && sliding_window_pattern >= 0,
        "config: sliding_window and sliding_window_pattern must be non-negative, got {} and {}", sliding_window,
        sliding_window_pattern);
  check(sliding_window == 0 || (has_decoder() && attention_kernel != AttentionKernel::Linear),
        "config: sliding_window applies to a decoder's causal self-attention with the flash or reference kernel");
  check(std::isfinite(lm_head_scale) && lm_head_scale > 0.0, "config: lm_head_scale must be positive, got {}",
        lm_head_scale);
  check(!sandwich_norm || pre_norm, "config: sandwich_norm adds norms to pre-LN blocks (norm_placement \"pre\")");
  check(t5_num_buckets >= 2 && t5_max_distance > t5_num_buckets / 4,
        "config: t5_num_buckets must be at least 2 and t5_max_distance above num_buckets/4, got {} and {}",
        t5_num_buckets, t5_max_distance);
  check(norm_eps > 0.0, "config: norm_eps must be positive, got {}", norm_eps);
  check(std::isfinite(residual_scale) && residual_scale > 0.0, "config: residual_scale must be positive, got {}",
        residual_scale);
  check(attention_scale >= 0.0, "config: attention_scale must be non-negative (0 means 1/√d_head), got {}",
        attention_scale);
  check(attention_kernel != AttentionKernel::Linear || (position == PositionKind::None || position == PositionKind::Learned ||
                                         position == PositionKind::Sinusoidal || position == PositionKind::RoPE),
        "config: the linear attention kernel takes no score bias, so position cannot be alibi or t5");
  check(attention_kernel != AttentionKernel::Linear || architecture != Architecture::EncoderDecoder,
        "config: the linear attention kernel has no cross-attention, so it cannot serve an encoder-decoder model");
  for (auto [name, p] : {std::pair{"embedding_dropout", embedding_dropout}, {"attention_dropout", attention_dropout},
                         {"residual_dropout", residual_dropout}, {"ffn_dropout", ffn_dropout}})
    check(p >= 0.0f && p < 1.0f, "config: {} must be in [0, 1), got {}", name, p);
  check(n_experts >= 0, "config: n_experts must be non-negative, got {}", n_experts);
  if (n_experts > 0) {
    check(moe_top_k >= 1 && moe_top_k <= n_experts, "config: moe_top_k must be in [1, n_experts = {}], got {}",
          n_experts, moe_top_k);
    check(moe_capacity_factor >= 0.0, "config: moe_capacity_factor must be non-negative, got {}", moe_capacity_factor);
    check(moe_aux_loss_weight >= 0.0, "config: moe_aux_loss_weight must be non-negative, got {}", moe_aux_loss_weight);
    check(moe_every >= 1, "config: moe_every must be at least 1, got {}", moe_every);
  }
  check(n_classes >= 0, "config: n_classes must be non-negative, got {}", n_classes);
  check(type_vocab_size >= 0, "config: type_vocab_size must be non-negative, got {}", type_vocab_size);
  check(!pooler || architecture == Architecture::Encoder, "config: pooler is an encoder's, not a {}'s",
        architecture_name(architecture));
  check(mlm_head || architecture == Architecture::Encoder, "config: mlm_head false applies to encoder models");
  check(n_classes == 0 || architecture == Architecture::Encoder,
        "config: n_classes applies to encoder models (a classification head), not {}", architecture_name(architecture));
  check(class_names.empty() || static_cast<int64_t>(class_names.size()) == n_classes,
        "config: class_names has {} names, n_classes is {}", class_names.size(), n_classes);
  for (size_t i = 0; i < class_names.size(); ++i) {
    check(!class_names[i].empty() && class_names[i].find_first_of("\t\n") == std::string::npos,
          "config: class_names[{}] = '{}': expected a non-empty name without tabs or newlines", i, class_names[i]);
    for (size_t j = 0; j < i; ++j)
      check(class_names[j] != class_names[i], "config: class_names has '{}' twice", class_names[i]);
  }
  check(init_std > 0.0 && init_qk_scale > 0.0, "config: init_std and init_qk_scale must be positive");
}

std::string ModelConfig::to_json() const {
  ModelConfig copy = *this;
  return write_fields([&](auto&& f) { for_each_field(copy, f); }).dump(2) + "\n";
}

ModelConfig ModelConfig::from_json(std::string_view text, std::string_view origin) {
  const json j = parse_json(text, origin);
  ModelConfig c;
  read_fields(j, origin, [&](auto&& f) { for_each_field(c, f); });
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  return c;
}

void ModelConfig::set(std::string_view key, std::string_view value) {
  check(set_field(key, value, "--set", [&](auto&& f) { for_each_field(*this, f); }),
        "--set: unknown option '{}' (docs/FORMATS.md lists the options of config.json)", key);
}

std::string ModelConfig::help(std::string_view prefix) {
  ModelConfig defaults;
  return describe_fields(prefix, [&](auto&& f) { for_each_field(defaults, f); });
}

}  // namespace attend
