// Hugging Face checkpoints of the Llama family: config.json's keys to ModelConfig, the tensors to Attend's
// parameters (W_Q, W_K, W_V fused into qkv, W_Q and W_K rows permuted for the pair rotation), and back.
#include "formats/hf_llama.h"

#include "formats/hf_checkpoint.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/log.h>
#include <attend/model_dir.h>
#include <attend/safetensors.h>
#include <attend/tokenizer.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Buffers some checkpoints carry that hold no parameters.
bool is_buffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

// The shape of `rows` rows of a projection: a weight's (rows, cols), a bias's (rows) when cols is 1.
Shape rows_shape(int64_t rows, int64_t cols) { return cols > 1 ? Shape{rows, cols} : Shape{rows}; }

// The tensors that map one to one (everything but q, k, v and the q/k norms). A Llama block has two norms,
// input_layernorm before attention and post_attention_layernorm before the MLP; a Gemma block (sandwich_norm)
// has four: input_layernorm, post_attention_layernorm on the attention's output, pre_feedforward_layernorm and
// post_feedforward_layernorm around the MLP.
std::vector<std::pair<std::string, std::string>> plain_mappings(const ModelConfig& c, const DecoderNames& names) {
  auto layer = [&](int64_t i) { return fmt::format("{}layers.{}.", names.model, i); };
  std::vector<std::pair<std::string, std::string>> m = {{names.model + "embed_tokens.weight", "embed.tokens.weight"}};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    m.push_back({layer(i) + "input_layernorm.weight", decoder_block(i) + "attn_norm.weight"});
    m.push_back({layer(i) + "self_attn.o_proj.weight", decoder_block(i) + "attn.o.weight"});
    if (c.sandwich_norm) {
      m.push_back({layer(i) + "post_attention_layernorm.weight", decoder_block(i) + "attn_post_norm.weight"});
      m.push_back({layer(i) + "pre_feedforward_layernorm.weight", decoder_block(i) + "ffn_norm.weight"});
      m.push_back({layer(i) + "post_feedforward_layernorm.weight", decoder_block(i) + "ffn_post_norm.weight"});
    } else {
      m.push_back({layer(i) + "post_attention_layernorm.weight", decoder_block(i) + "ffn_norm.weight"});
    }
    m.push_back({layer(i) + "mlp.gate_proj.weight", decoder_block(i) + "ffn.gate.weight"});
    m.push_back({layer(i) + "mlp.up_proj.weight", decoder_block(i) + "ffn.up.weight"});
    m.push_back({layer(i) + "mlp.down_proj.weight", decoder_block(i) + "ffn.down.weight"});
  }
  m.push_back({names.model + "norm.weight", "decoder.norm.weight"});
  if (!c.tie_embeddings) m.push_back({names.head, "lm_head.weight"});
  return m;
}

}  // namespace

void rope_row_bytes_from_hf(void* dst, const void* src, int64_t heads, int64_t d_head, int64_t row_bytes) {
  const int64_t half = d_head / 2;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i) {
      // x_i and x_{i+d/2} of Hugging Face's halves become the pair (2i, 2i+1)
      std::memcpy(d + (h * d_head + 2 * i) * row_bytes, s + (h * d_head + i) * row_bytes, row_bytes);
      std::memcpy(d + (h * d_head + 2 * i + 1) * row_bytes, s + (h * d_head + i + half) * row_bytes, row_bytes);
    }
}

void rope_row_bytes_to_hf(void* dst, const void* src, int64_t heads, int64_t d_head, int64_t row_bytes) {
  const int64_t half = d_head / 2;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i) {
      std::memcpy(d + (h * d_head + i) * row_bytes, s + (h * d_head + 2 * i) * row_bytes, row_bytes);
      std::memcpy(d + (h * d_head + i + half) * row_bytes, s + (h * d_head + 2 * i + 1) * row_bytes, row_bytes);
    }
}

void rope_rows_from_hf(float* dst, const float* src, int64_t heads, int64_t d_head, int64_t C) {
  rope_row_bytes_from_hf(dst, src, heads, d_head, C * static_cast<int64_t>(sizeof(float)));
}

void rope_rows_to_hf(float* dst, const float* src, int64_t heads, int64_t d_head, int64_t C) {
  rope_row_bytes_to_hf(dst, src, heads, d_head, C * static_cast<int64_t>(sizeof(float)));
}

namespace {

// The family a config.json names: "llama", "mistral", "qwen2", "qwen3", or "" for none of them.
std::string family_of(const json& config) {
  if (!config.is_object()) return "";
  const auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) {
    const std::string t = *type;
    return t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3" ? t : "";
  }
  if (names_architecture(config, {"LlamaForCausalLM"})) return "llama";
  if (names_architecture(config, {"MistralForCausalLM"})) return "mistral";
  if (names_architecture(config, {"Qwen2ForCausalLM"})) return "qwen2";
  if (names_architecture(config, {"Qwen3ForCausalLM"})) return "qwen3";
  return "";
}

}  // namespace

bool names_architecture(const json& config, std::initializer_list<const char*> names) {
  const auto it = config.find("architectures");
  if (it == config.end() || !it->is_array()) return false;
  for (const json& a : *it)
    for (const char* n : names)
      if (a.is_string() && a.get<std::string>() == n) return true;
  return false;
}

void read_rope_scaling(const ConfigKeys& k, ModelConfig& c) {
  if (!k.has("rope_scaling")) return;
  const std::string& origin = k.origin();
  const json& s = k.json()["rope_scaling"];
  check(s.is_object(), "{}: rope_scaling is {}, expected an object or null", origin, s.type_name());
  const ConfigKeys r(s, origin + ": rope_scaling");
  const std::string type = r.has("rope_type") ? r.optional<std::string>("rope_type", "") : r.optional<std::string>("type", "");
  if (type == "llama3") {
    c.rope_llama3_factor = r.optional("factor", 8.0);
    c.rope_llama3_low_freq_factor = r.optional("low_freq_factor", 1.0);
    c.rope_llama3_high_freq_factor = r.optional("high_freq_factor", 4.0);
    c.rope_original_context = r.integer("original_max_position_embeddings");
  } else if (type == "linear") {
    const double factor = r.optional("factor", 1.0);
    check(factor >= 1.0, "{}: rope_scaling factor {} must be at least 1", origin, factor);
    c.rope_position_scale = 1.0 / factor;
  } else if (type == "dynamic") {
    const double factor = r.optional("factor", 1.0);
    check(factor >= 1.0, "{}: rope_scaling factor {} must be at least 1", origin, factor);
    c.rope_dynamic_factor = factor;
    c.rope_original_context = c.max_seq_len;
    c.max_seq_len = static_cast<int64_t>(std::floor(factor * static_cast<double>(c.max_seq_len)));
  } else if (type != "default") {
    throw Error(fmt::format("{}: rope_scaling type '{}': expected llama3, linear, dynamic or default", origin, type));
  }
}

void write_rope_scaling(const ModelConfig& c, nlohmann::ordered_json& config) {
  config["rope_scaling"] = nullptr;
  if (c.rope_llama3_factor > 0.0) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", c.rope_llama3_factor},
                              {"low_freq_factor", c.rope_llama3_low_freq_factor},
                              {"high_freq_factor", c.rope_llama3_high_freq_factor},
                              {"original_max_position_embeddings", c.rope_original_context}};
  } else if (c.rope_dynamic_factor > 0.0) {
    config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", c.rope_dynamic_factor}};
    config["max_position_embeddings"] = c.rope_original_context;
  } else if (c.rope_position_scale != 1.0) {
    config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1.0 / c.rope_position_scale}};
  }
}

void check_rope_scaling_exports(const ModelConfig& c, const ExportChecks& checks) {
  checks.require(c.rope_base_scale == 1.0 && c.rope_ntk_factor == 1.0, "rope_base_scale or rope_ntk_factor", "set",
                 "llama3, linear or dynamic scaling only");
  checks.require(c.rope_position_scale == 1.0 || (c.rope_llama3_factor == 0.0 && c.rope_dynamic_factor == 0.0),
                 "rope_position_scale", "combined with another scaling", "one scaling");
}

nlohmann::ordered_json decoder_config_json(const ModelConfig& c, const char* architecture, const char* model_type,
                                           DType dtype) {
  return {{"architectures", {architecture}},
          {"model_type", model_type},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.d_model},
          {"intermediate_size", c.ffn_hidden()},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.d_head()},
          {"max_position_embeddings", c.max_seq_len},
          {"rms_norm_eps", c.norm_eps},
          {"rope_theta", c.rope_base},
          {"rope_scaling", nullptr},
          {"attention_bias", false},
          {"tie_word_embeddings", c.tie_embeddings},
          {"initializer_range", c.init_std},
          {"torch_dtype", torch_dtype_name(dtype)}};
}

bool is_hf_llama_config(const json& config) { return !family_of(config).empty(); }

ModelConfig config_from_hf_llama(const json& j, const std::string& origin) {
  const ConfigKeys k(j, origin);
  const std::string family = family_of(j);
  check(!family.empty(), "{}: not a Llama-family config (model_type llama, mistral, qwen2 or qwen3)", origin);
  const bool qwen = family == "qwen2" || family == "qwen3";
  ModelConfig c;
  c.architecture = Architecture::Decoder;
  c.vocab_size = k.integer("vocab_size");
  c.d_model = k.integer("hidden_size");
  c.n_layers = k.integer("num_hidden_layers");
  c.n_heads = k.integer("num_attention_heads");
  c.n_kv_heads = k.optional<int64_t>("num_key_value_heads", c.n_heads);
  c.d_ff = k.integer("intermediate_size");
  c.max_seq_len = k.optional<int64_t>("max_position_embeddings", 2048);
  const std::string act = k.optional<std::string>("hidden_act", "silu");
  check(act == "silu", "{}: hidden_act '{}': the Llama family's FFN is SwiGLU (silu)", origin, act);
  c.activation = FfnKind::SwiGLU;
  c.position = PositionKind::RoPE;
  c.rope_base = k.optional("rope_theta", 10000.0);
  c.norm = NormKind::RMSNorm;
  c.norm_eps = k.optional("rms_norm_eps", 1e-6);
  c.pre_norm = true;
  // Qwen2 always has q, k, v biases (and none elsewhere); Qwen3's and Llama's attention_bias puts one on W_O
  // too, which Attend's options cannot express.
  const bool attention_bias = family != "qwen2" && k.optional("attention_bias", false);
  const bool mlp_bias = k.optional("mlp_bias", false);
  check(!attention_bias && !mlp_bias, "{}: attention_bias {} and mlp_bias {}: Attend's Llama has no biases", origin,
        attention_bias, mlp_bias);
  c.bias = false;
  c.qkv_bias = family == "qwen2";
  c.qk_norm = family == "qwen3";
  c.tie_embeddings = k.optional("tie_word_embeddings", false);
  c.init_std = k.optional("initializer_range", 0.02);
  const int64_t head_dim = k.has("head_dim") ? k.integer("head_dim") : family == "qwen3" ? 128 : 0;
  check(head_dim >= 0, "{}: head_dim must be positive, got {}", origin, head_dim);
  if (head_dim > 0 && head_dim * c.n_heads != c.d_model) c.head_dim = head_dim;
  // Mistral's attention reaches back sliding_window positions in every layer. Qwen's only with
  // use_sliding_window, and then in the layers from max_window_layers on.
  if (k.has("sliding_window") && (!qwen || k.optional("use_sliding_window", false))) {
    const int64_t window = k.integer("sliding_window");
    check(window > 0, "{}: sliding_window must be positive, got {}", origin, window);
    if (qwen) {
      const int64_t from = k.optional<int64_t>("max_window_layers", 0);
      check(from <= 0, "{}: use_sliding_window with max_window_layers {}: sliding windows in only some layers of a "
            "Qwen model are not supported (0: every layer)", origin, from);
    }
    if (window < c.max_seq_len) c.sliding_window = window;
  }
  read_rope_scaling(k, c);
  return validated(c, origin);
}

Model load_decoder_tensors(const fs::path& dir, const ModelConfig& c, const DecoderNames& names,
                           const std::string& what, WeightType matrices) {
  const CheckpointTensors tensors(dir);
  Model model = model_for_loading(c, matrices, dir);
  std::set<std::string> used;
  auto expect = [&](const std::string& hf, const Shape& shape) {  // the checkpoint has it, of that shape
    const TensorInfo* t = tensors.find(hf);
    check(t != nullptr, "{}: no tensor '{}', which {} has", dir.string(), hf, what);
    check(t->shape == shape, "{}: tensor '{}' has shape {}, config.json implies {}", tensors.origin(hf), hf, t->shape,
          shape);
    used.insert(hf);
  };
  auto take = [&](const std::string& hf, TensorView out) {
    expect(hf, out.shape());
    tensors.load_into(hf, out, what);
  };
  std::vector<float> scratch;  // a packed matrix's rows in fp32, a piece at a time
  for (const auto& [hf, name] : plain_mappings(c, names)) {
    Parameter& p = *model.find(name);
    if (p.has_values()) {
      take(hf, p.value.view());
      continue;
    }
    expect(hf, p.value.shape());
    load_packed_rows(tensors, hf, p, 0, what, scratch);
  }
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  // q, k and v stacked into Attend's fused rows (a weight has C columns, a bias 1); q's and k's rows permuted.
  auto fuse = [&](const std::string& a, const char* kind, float* qkv, int64_t cols) {
    Tensor q(rows_shape(H * D, cols)), k(rows_shape(Hkv * D, cols));
    take(a + "q_proj." + kind, q.view());
    take(a + "k_proj." + kind, k.view());
    rope_rows_from_hf(qkv, q.data(), H, D, cols);
    rope_rows_from_hf(qkv + H * D * cols, k.data(), Hkv, D, cols);
    take(a + "v_proj." + kind, TensorView(qkv + (H + Hkv) * D * cols, rows_shape(Hkv * D, cols)));
  };
  Tensor qkv_scratch;  // a layer's fused rows in fp32, for packed ones
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string a = fmt::format("{}layers.{}.self_attn.", names.model, i);
    Parameter& qkv = *model.find(decoder_block(i) + "attn.qkv.weight");
    if (qkv.has_values()) {
      fuse(a, "weight", qkv.value.data(), C);
    } else {
      if (qkv_scratch.numel() != qkv.numel()) qkv_scratch = Tensor::uninitialized(qkv.value.shape());
      fuse(a, "weight", qkv_scratch.data(), C);
      fill_packed(qkv, 0, qkv_scratch.data(), qkv.numel());
    }
    if (c.qkv_bias) fuse(a, "bias", model.find(decoder_block(i) + "attn.qkv.bias")->value.data(), 1);
    if (c.qk_norm)  // each norm's gain is one head's channels, permuted as the head's rows are
      for (const char* which : {"q_norm", "k_norm"}) {
        Tensor gain({D});
        take(a + which + ".weight", gain.view());
        rope_rows_from_hf(model.find(decoder_block(i) + "attn." + which + ".weight")->value.data(), gain.data(), 1, D, 1);
      }
  }
  for (const std::string& name : tensors.names()) {
    if (used.contains(name) || is_buffer(name)) continue;
    if (c.tie_embeddings && name == names.head) continue;  // a copy of the tied embedding
    if (std::any_of(names.ignored.begin(), names.ignored.end(), [&](const std::string& p) { return name.starts_with(p); }))
      continue;
    throw Error(fmt::format("{}: unexpected tensor '{}': not part of {}", tensors.origin(name), name, what));
  }
  finish_loading(model, matrices);
  return model;
}

void write_decoder_tensors(const Model& model, const fs::path& dir, DType dtype) {
  const ModelConfig& c = model.config();
  const DecoderNames names;
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  std::vector<Tensor> stored;
  stored.reserve(8 * c.n_layers);  // never reallocated: `tensors` points into it
  std::vector<NamedTensor> tensors;
  for (const auto& [hf, name] : plain_mappings(c, names)) tensors.push_back({hf, &model.find(name)->value});
  // Attend's fused rows back to q, k, v (a weight has C columns, a bias 1), q's and k's rows unpermuted.
  auto split = [&](const std::string& l, const char* kind, const float* qkv, int64_t cols) {
    stored.emplace_back(rows_shape(H * D, cols));
    rope_rows_to_hf(stored.back().data(), qkv, H, D, cols);
    tensors.push_back({l + "q_proj." + kind, &stored.back()});
    stored.emplace_back(rows_shape(Hkv * D, cols));
    rope_rows_to_hf(stored.back().data(), qkv + H * D * cols, Hkv, D, cols);
    tensors.push_back({l + "k_proj." + kind, &stored.back()});
    stored.push_back(Tensor(rows_shape(Hkv * D, cols), std::span<const float>(qkv + (H + Hkv) * D * cols, Hkv * D * cols)));
    tensors.push_back({l + "v_proj." + kind, &stored.back()});
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string a = decoder_block(i) + "attn.", l = fmt::format("{}layers.{}.self_attn.", names.model, i);
    split(l, "weight", model.find(a + "qkv.weight")->value.data(), C);
    if (c.qkv_bias) split(l, "bias", model.find(a + "qkv.bias")->value.data(), 1);
    if (c.qk_norm)
      for (const char* which : {"q_norm", "k_norm"}) {
        stored.emplace_back(Shape{D});
        rope_rows_to_hf(stored.back().data(), model.find(a + which + ".weight")->value.data(), 1, D, 1);
        tensors.push_back({l + which + ".weight", &stored.back()});
      }
  }
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}}, dtype);
}

Model load_hf_llama(const fs::path& dir, const json& config, WeightType matrices) {
  const ModelConfig c = config_from_hf_llama(config, (dir / "config.json").string());
  return load_decoder_tensors(dir, c, DecoderNames{},
                              fmt::format("a Llama of this config ({} layers, hidden_size {})", c.n_layers, c.d_model),
                              matrices);
}

}  // namespace attend::formats

namespace attend {

void export_hf_llama(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer, DType dtype) {
  const ModelConfig& c = model.config();
  const formats::ExportChecks checks("hf-llama", "Llama");
  auto require = [&](bool ok, std::string_view option, std::string_view found, std::string_view wanted) {
    checks.require(ok, option, found, wanted);
  };
  checks.decoder(c);
  checks.unscaled(c);
  checks.plain_norms(c);
  require(!(c.qkv_bias && c.qk_norm), "qkv_bias with qk_norm", "set", "one of them (Qwen2 or Qwen3)");
  require(c.position == PositionKind::RoPE, "position", "not rope", "RoPE");
  require(c.norm == NormKind::RMSNorm, "norm", "layernorm", "rmsnorm");
  require(!c.bias, "bias", "true", "no biases");
  require(c.activation == FfnKind::SwiGLU, "activation", "not swiglu", "swiglu");
  require(c.sliding_window == 0 || (c.sliding_window_pattern == 0 && !c.qkv_bias && !c.qk_norm), "sliding_window",
          "set", "a window in every layer (Mistral) or none");
  formats::check_rope_scaling_exports(c, checks);

  formats::create_export_directory(dir);
  formats::write_decoder_tensors(model, dir, dtype);
  const bool mistral = c.sliding_window > 0;
  const char* family = c.qk_norm ? "qwen3" : c.qkv_bias ? "qwen2" : mistral ? "mistral" : "llama";
  const char* architecture = c.qk_norm    ? "Qwen3ForCausalLM"
                             : c.qkv_bias ? "Qwen2ForCausalLM"
                             : mistral    ? "MistralForCausalLM"
                                          : "LlamaForCausalLM";
  nlohmann::ordered_json config = formats::decoder_config_json(c, architecture, family, dtype);
  config["hidden_act"] = "silu";
  config["mlp_bias"] = false;
  config["sliding_window"] = mistral ? nlohmann::ordered_json(c.sliding_window) : nullptr;
  config["use_sliding_window"] = false;
  formats::write_rope_scaling(c, config);
  formats::write_hf_extras(tokenizer, dir, config);
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace attend
