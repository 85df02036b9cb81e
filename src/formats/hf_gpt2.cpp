#include "formats/hf_gpt2.h"

#include "formats/hf_checkpoint.h"

#include "core/json_fields.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/safetensors.h>
#include <attend/tokenizer.h>

#include <set>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<Mapping> gpt2_mappings(const ModelConfig& c) {
  std::vector<Mapping> m = {{"wte.weight", "embed.tokens.weight"}, {"wpe.weight", "embed.positions.weight"}};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string h = fmt::format("h.{}.", i), a = decoder_block(i);
    for (const char* p : {"weight", "bias"}) {
      m.push_back({h + "ln_1." + p, a + "attn_norm." + p});
      m.push_back({h + "ln_2." + p, a + "ffn_norm." + p});
      const bool w = std::string(p) == "weight";
      m.push_back({h + "attn.c_attn." + p, a + "attn.qkv." + p, w});
      m.push_back({h + "attn.c_proj." + p, a + "attn.o." + p, w});
      m.push_back({h + "mlp.c_fc." + p, a + "ffn.up." + p, w});
      m.push_back({h + "mlp.c_proj." + p, a + "ffn.down." + p, w});
    }
  }
  m.push_back({"ln_f.weight", "decoder.norm.weight"});
  m.push_back({"ln_f.bias", "decoder.norm.bias"});
  if (!c.tie_embeddings) m.push_back({"lm_head.weight", "lm_head.weight"});
  return m;
}

namespace {

// Buffers that GPT-2 checkpoints carry and that hold no parameters: the causal mask and its fill value.
bool is_buffer(const std::string& name) { return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"); }

}  // namespace

void transpose_into(Tensor& dst, const Tensor& src) {
  const int64_t R = src.size(0), C = src.size(1);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) dst[c * R + r] = src[r * C + c];
}

bool is_hf_gpt2_config(const json& config) {
  if (!config.is_object()) return false;
  const auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) return *type == "gpt2";
  return config.contains("n_embd") && config.contains("n_layer");
}

ModelConfig config_from_hf_gpt2(const json& j, const std::string& origin) {
  const ConfigKeys keys(j, origin);
  auto integer = [&](const char* key) { return keys.integer(key); };
  // An optional key keeps HF's default when absent; present, it must have the right type.
  auto optional = [&]<typename T>(const char* key, T fallback) { return keys.optional(key, fallback); };
  ModelConfig c;
  c.architecture = Architecture::Decoder;
  c.vocab_size = integer("vocab_size");
  c.d_model = integer("n_embd");
  c.n_layers = integer("n_layer");
  c.n_heads = integer("n_head");
  c.max_seq_len = integer("n_positions");
  c.d_ff = optional("n_inner", 4 * c.d_model);
  const std::string act = optional("activation_function", std::string("gelu_new"));
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.activation = FfnKind::GELUTanh;
  else if (act == "gelu") c.activation = FfnKind::GELU;
  else if (act == "relu") c.activation = FfnKind::ReLU;
  else throw Error(fmt::format("{}: activation_function '{}': expected gelu_new, gelu or relu", origin, act));
  c.position = PositionKind::Learned;
  c.norm = NormKind::LayerNorm;
  c.norm_eps = optional("layer_norm_epsilon", 1e-5);
  c.pre_norm = true;
  c.bias = true;
  c.tie_embeddings = optional("tie_word_embeddings", true);
  c.embedding_dropout = static_cast<float>(optional("embd_pdrop", 0.0));
  c.attention_dropout = static_cast<float>(optional("attn_pdrop", 0.0));
  c.residual_dropout = static_cast<float>(optional("resid_pdrop", 0.0));
  c.init_std = optional("initializer_range", 0.02);
  return validated(c, origin);
}

Model load_hf_gpt2(const fs::path& dir, const json& config, WeightType matrices) {
  const ModelConfig c = config_from_hf_gpt2(config, (dir / "config.json").string());
  const CheckpointTensors tensors(dir);
  Model model = model_for_loading(c, matrices, dir);
  const std::string what = "a GPT-2 of this config";
  // Names may carry the "transformer." prefix of GPT2LMHeadModel's state dict.
  auto find = [&](const std::string& name) -> const TensorInfo* {
    if (const TensorInfo* t = tensors.find(name)) return t;
    return tensors.find("transformer." + name);
  };
  std::set<std::string> used;
  std::vector<float> scratch;  // a packed parameter's rows in fp32
  Tensor transposed;           // a packed Conv1D weight in Attend's [out, in]
  for (const Mapping& m : gpt2_mappings(c)) {
    const TensorInfo* t = find(m.hf);
    check(t != nullptr, "{}: no tensor '{}' (or 'transformer.{}'), which {} has", dir.string(), m.hf, m.hf, what);
    used.insert(t->name);
    Parameter& p = *model.find(m.attend);
    if (m.transpose) {
      const Tensor src = tensors.load(t->name, what);
      check(src.rank() == 2 && src.size(0) == p.value.size(1) && src.size(1) == p.value.size(0),
            "{}: tensor '{}' has shape {}, config.json implies [{}, {}] (Conv1D: [in, out])", tensors.origin(t->name),
            t->name, src.shape(), p.value.size(1), p.value.size(0));
      if (p.has_values()) {
        transpose_into(p.value, src);
      } else {
        transposed = Tensor::uninitialized(p.value.shape());
        transpose_into(transposed, src);
        fill_packed(p, 0, transposed.data(), transposed.numel());
      }
      continue;
    }
    check(t->shape == p.value.shape(), "{}: tensor '{}' has shape {}, config.json implies {}", tensors.origin(t->name),
          t->name, t->shape, p.value.shape());
    if (p.has_values()) tensors.load_into(t->name, p.value.view(), what);  // straight into the parameter
    else load_packed_rows(tensors, t->name, p, 0, what, scratch);
  }
  for (const std::string& name : tensors.names()) {
    if (used.contains(name) || is_buffer(name)) continue;
    if (c.tie_embeddings && (name == "lm_head.weight" || name == "transformer.lm_head.weight")) continue;  // tied
    throw Error(fmt::format("{}: unexpected tensor '{}' ({}): not part of {}", tensors.origin(name), name,
                            tensors.find(name)->shape, what));
  }
  finish_loading(model, matrices);
  return model;
}

}  // namespace attend::formats

namespace attend {

void export_hf_gpt2(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer, DType dtype) {
  const ModelConfig& c = model.config();
  const formats::ExportChecks checks("hf-gpt2", "GPT-2");
  checks.decoder(c);
  checks.unscaled(c);
  checks.plain_norms(c);
  checks.require(c.sliding_window == 0, "sliding_window", std::to_string(c.sliding_window), "no window");
  checks.require(c.position == PositionKind::Learned, "position", "not learned", "learned positions");
  checks.require(c.norm == NormKind::LayerNorm, "norm", "rmsnorm", "layernorm");
  checks.require(c.bias, "bias", "false", "biases");
  checks.require(!is_gated(c.activation), "activation", "gated", "gelu_new (gelu, relu)");
  checks.require(c.kv_heads() == c.n_heads, "n_kv_heads", std::to_string(c.n_kv_heads), "one per head");
  checks.require(c.head_dim == 0, "head_dim", std::to_string(c.head_dim), "d_model / n_heads");
  checks.require(!c.qk_norm, "qk_norm", "true", "no head norms");

  formats::create_export_directory(dir);
  std::vector<Tensor> stored;
  std::vector<formats::Mapping> mappings = formats::gpt2_mappings(c);
  stored.reserve(mappings.size());
  std::vector<NamedTensor> tensors;
  for (const formats::Mapping& m : mappings) {
    const Parameter* p = model.find(m.attend);
    if (m.transpose) {
      stored.emplace_back(Shape{p->value.size(1), p->value.size(0)});
      formats::transpose_into(stored.back(), p->value);
      tensors.push_back({m.hf, &stored.back()});
    } else {
      tensors.push_back({m.hf, &p->value});
    }
  }
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}}, dtype);
  const char* activation = c.activation == FfnKind::GELUTanh ? "gelu_new" : c.activation == FfnKind::GELU ? "gelu" : "relu";
  nlohmann::ordered_json config = {{"model_type", "gpt2"},
                                   {"architectures", {"GPT2LMHeadModel"}},
                                   {"torch_dtype", formats::torch_dtype_name(dtype)},
                                   {"vocab_size", c.vocab_size},
                                   {"n_positions", c.max_seq_len},
                                   {"n_embd", c.d_model},
                                   {"n_layer", c.n_layers},
                                   {"n_head", c.n_heads},
                                   {"n_inner", c.ffn_hidden()},
                                   {"activation_function", activation},
                                   {"layer_norm_epsilon", c.norm_eps},
                                   {"resid_pdrop", c.residual_dropout},
                                   {"embd_pdrop", c.embedding_dropout},
                                   {"attn_pdrop", c.attention_dropout},
                                   {"initializer_range", c.init_std},
                                   {"tie_word_embeddings", c.tie_embeddings}};
  formats::write_hf_extras(tokenizer, dir, config);
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace attend
