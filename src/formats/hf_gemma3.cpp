// Hugging Face's Gemma 3 text checkpoints: config.json's keys to ModelConfig and back; the tensors go through the
// Llama layout's loader and writer (hf_llama.cpp), which place Gemma's two extra norms a block.
#include "formats/hf_gemma3.h"

#include "formats/hf_checkpoint.h"
#include "formats/hf_llama.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>

#include <cmath>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool is_multimodal(const json& config) {
  const auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) return *type == "gemma3";
  return names_architecture(config, {"Gemma3ForConditionalGeneration"});
}

// The period k of a layer_types list in which layers k−1, 2k−1, ... are "full_attention" and the others
// "sliding_attention" (0 when every layer slides); an error when the list has no such form.
int64_t sliding_pattern_of(const json& types, int64_t n_layers, const std::string& origin) {
  check(types.is_array() && static_cast<int64_t>(types.size()) == n_layers,
        "{}: layer_types must list num_hidden_layers = {} entries, got {}", origin, n_layers, types.dump());
  int64_t k = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    const json& t = types[static_cast<size_t>(i)];
    check(t == "sliding_attention" || t == "full_attention",
          "{}: layer_types[{}] is {}, expected \"sliding_attention\" or \"full_attention\"", origin, i, t.dump());
    if (t == "full_attention" && k == 0) k = i + 1;
  }
  for (int64_t i = 0; i < n_layers; ++i) {
    const bool sliding = k == 0 || (i + 1) % k != 0;
    check(types[static_cast<size_t>(i)] == (sliding ? "sliding_attention" : "full_attention"),
          "{}: layer_types has a full-attention layer every {} layers but layer {} is {}: Attend's sliding windows "
          "follow one period", origin, k, i, types[static_cast<size_t>(i)].dump());
  }
  return k;
}

}  // namespace

bool is_hf_gemma3_config(const json& config) {
  if (!config.is_object()) return false;
  const auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) return *type == "gemma3_text" || *type == "gemma3";
  return names_architecture(config, {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"});
}

ModelConfig config_from_hf_gemma3(const json& config, const std::string& origin) {
  if (is_multimodal(config)) {  // Gemma3ForConditionalGeneration: the language model's config is text_config
    const auto text = config.find("text_config");
    check(text != config.end() && text->is_object(), "{}: a Gemma3ForConditionalGeneration config without a "
          "text_config", origin);
    return config_from_hf_gemma3(*text, origin + ": text_config");
  }
  const json& j = config;
  const ConfigKeys k(j, origin);
  ModelConfig c;
  c.architecture = Architecture::Decoder;
  c.vocab_size = k.optional<int64_t>("vocab_size", 262208);
  c.d_model = k.optional<int64_t>("hidden_size", 2304);
  c.n_layers = k.optional<int64_t>("num_hidden_layers", 26);
  c.n_heads = k.optional<int64_t>("num_attention_heads", 8);
  c.n_kv_heads = k.optional<int64_t>("num_key_value_heads", 4);
  const int64_t head_dim = k.optional<int64_t>("head_dim", 256);
  check(head_dim > 0, "{}: head_dim must be positive, got {}", origin, head_dim);
  if (head_dim * c.n_heads != c.d_model) c.head_dim = head_dim;
  c.d_ff = k.optional<int64_t>("intermediate_size", 9216);
  c.max_seq_len = k.optional<int64_t>("max_position_embeddings", 131072);
  const std::string act = k.optional<std::string>("hidden_activation", k.optional<std::string>("hidden_act", "gelu_pytorch_tanh"));
  check(act == "gelu_pytorch_tanh", "{}: hidden_activation '{}': Gemma 3's FFN is gelu_pytorch_tanh-gated", origin, act);
  c.activation = FfnKind::GeGLU;
  c.norm = NormKind::RMSNorm;
  c.norm_eps = k.optional("rms_norm_eps", 1e-6);
  c.norm_unit_offset = true;
  c.sandwich_norm = true;
  c.qk_norm = true;
  c.scale_embeddings = true;
  c.bias = false;
  check(!k.optional("attention_bias", false), "{}: attention_bias true: Attend's Gemma has no biases", origin);
  check(!k.optional("use_bidirectional_attention", false),
        "{}: use_bidirectional_attention true (an embedding model): Attend runs Gemma 3 as a causal decoder", origin);
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})  // (the value read only when present)
    if (k.has(cap))
      throw Error(fmt::format("{}: {} is {}: soft-capping (Gemma 2) is not supported, Gemma 3 has null", origin, cap,
                              j.at(cap).dump()));
  const double query_scalar = k.optional("query_pre_attn_scalar", 256.0);
  check(query_scalar > 0.0, "{}: query_pre_attn_scalar must be positive, got {}", origin, query_scalar);
  if (query_scalar != static_cast<double>(c.d_head())) c.attention_scale = 1.0 / std::sqrt(query_scalar);
  c.tie_embeddings = k.optional("tie_word_embeddings", true);
  c.init_std = k.optional("initializer_range", 0.02);
  c.position = PositionKind::RoPE;
  c.rope_base = k.optional("rope_theta", 1000000.0);
  c.rope_local_base = k.optional("rope_local_base_freq", 10000.0);
  c.sliding_window = k.optional<int64_t>("sliding_window", 4096);
  check(c.sliding_window > 0, "{}: sliding_window must be positive, got {}", origin, c.sliding_window);
  c.sliding_window_pattern = k.has("layer_types") ? sliding_pattern_of(j["layer_types"], c.n_layers, origin)
                                                  : k.optional<int64_t>("sliding_window_pattern", 6);
  read_rope_scaling(k, c);  // the global layers' (local layers rotate with rope_local_base, unscaled)
  return validated(c, origin);
}

Model load_hf_gemma3(const fs::path& dir, const json& config, WeightType matrices) {
  const ModelConfig c = config_from_hf_gemma3(config, (dir / "config.json").string());
  if (!is_multimodal(config))
    return load_decoder_tensors(dir, c, DecoderNames{},
                                fmt::format("a Gemma 3 of this config ({} layers, hidden_size {})", c.n_layers, c.d_model),
                                matrices);
  // Gemma3ForConditionalGeneration: the language model's tensors are language_model.model.* with
  // language_model.lm_head (transformers 4.50-4.51) or model.language_model.* with lm_head (later versions), beside
  // a vision tower and a projector that a text model does not use.
  DecoderNames names;
  if (CheckpointTensors(dir).find("language_model.model.embed_tokens.weight") != nullptr)
    names = {"language_model.model.", "language_model.lm_head.weight", {"vision_tower.", "multi_modal_projector."}};
  else
    names = {"model.language_model.", "lm_head.weight", {"model.vision_tower.", "model.multi_modal_projector."}};
  return load_decoder_tensors(dir, c,
                              names, fmt::format("the language model of a Gemma 3 of this config ({} layers, "
                                                 "hidden_size {})", c.n_layers, c.d_model), matrices);
}

}  // namespace attend::formats

namespace attend {

void export_hf_gemma3(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer, DType dtype) {
  const ModelConfig& c = model.config();
  const formats::ExportChecks checks("hf-gemma3", "Gemma 3");
  checks.decoder(c);
  auto require = [&](bool ok, std::string_view option, std::string_view found, std::string_view wanted) {
    checks.require(ok, option, found, wanted);
  };
  require(c.position == PositionKind::RoPE, "position", "not rope", "RoPE");
  require(c.norm == NormKind::RMSNorm, "norm", "layernorm", "rmsnorm");
  require(c.norm_unit_offset && c.sandwich_norm, "norm_unit_offset or sandwich_norm", "off",
          "four norms a block of 1 + γ");
  require(c.qk_norm && !c.qkv_bias && !c.bias, "qk_norm, qkv_bias or bias", "not as Gemma's", "q/k norms and no biases");
  require(c.scale_embeddings, "scale_embeddings", "false", "embeddings × √hidden_size");
  require(c.activation == FfnKind::GeGLU, "activation", "not geglu", "geglu (gelu_pytorch_tanh)");
  require(c.sliding_window == 0 || c.rope_local_base > 0.0, "rope_local_base", "0 with a sliding window",
          "its local layers' base (rope_local_base_freq)");
  formats::check_rope_scaling_exports(c, checks);

  formats::create_export_directory(dir);
  formats::write_decoder_tensors(model, dir, dtype);
  const double scale = c.attention_scale > 0.0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.d_head()));
  const double query_scalar = 1.0 / (scale * scale);
  nlohmann::ordered_json layer_types = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < c.n_layers; ++i)
    layer_types.push_back(c.is_local_block(i) ? "sliding_attention" : "full_attention");
  nlohmann::ordered_json config = formats::decoder_config_json(c, "Gemma3ForCausalLM", "gemma3_text", dtype);
  config["hidden_activation"] = "gelu_pytorch_tanh";
  config["rope_local_base_freq"] = c.rope_local_base > 0.0 ? c.rope_local_base : c.rope_base;
  config["query_pre_attn_scalar"] =
      std::abs(query_scalar - std::round(query_scalar)) < 1e-9 ? std::round(query_scalar) : query_scalar;
  config["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : c.max_seq_len;
  config["layer_types"] = layer_types;
  config["final_logit_softcapping"] = nullptr;
  config["attn_logit_softcapping"] = nullptr;
  if (c.sliding_window > 0 && c.sliding_window_pattern > 0) config["sliding_window_pattern"] = c.sliding_window_pattern;
  formats::write_rope_scaling(c, config);
  formats::write_hf_extras(tokenizer, dir, config);
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace attend
