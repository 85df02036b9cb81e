// Hugging Face's T5 checkpoints: config.json's keys to ModelConfig and back, and one table of tensor names (with
// q, k, v stacked into Attend's fused rows) that serves both loading and export.
#include "formats/hf_t5.h"

#include "formats/hf_checkpoint.h"
#include "formats/hf_llama.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/tokenizer.h>

#include <cmath>
#include <optional>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

// T5's tensors and where each lies in Attend's parameters. A block's sub-layers are layer.0 (self-attention),
// layer.1 (cross-attention in the decoder; the FFN in the encoder) and layer.2 (the decoder's FFN), each with its
// layer_norm; block 0's self-attention holds the stack's relative_attention_bias.
std::vector<RowMapping> t5_mappings(const ModelConfig& c) {
  const int64_t rows_q = c.n_heads * c.d_head(), rows_kv = c.kv_heads() * c.d_head();
  std::vector<RowMapping> m = {{"shared.weight", "embed.tokens.weight"}};
  auto self_attention = [&](const std::string& hf, const std::string& at, bool table) {
    m.push_back({hf + "q.weight", at + "qkv.weight", 0});
    m.push_back({hf + "k.weight", at + "qkv.weight", rows_q});
    m.push_back({hf + "v.weight", at + "qkv.weight", rows_q + rows_kv});
    m.push_back({hf + "o.weight", at + "o.weight"});
    if (table) m.push_back({hf + "relative_attention_bias.weight", at + "relative_attention_bias"});
  };
  auto ffn = [&](const std::string& hf, const std::string& at) {
    if (is_gated(c.activation)) {
      m.push_back({hf + "DenseReluDense.wi_0.weight", at + "gate.weight"});
      m.push_back({hf + "DenseReluDense.wi_1.weight", at + "up.weight"});
    } else {
      m.push_back({hf + "DenseReluDense.wi.weight", at + "up.weight"});
    }
    m.push_back({hf + "DenseReluDense.wo.weight", at + "down.weight"});
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string hf = fmt::format("encoder.block.{}.layer.", i), at = fmt::format("encoder.layers.{}.", i);
    self_attention(hf + "0.SelfAttention.", at + "attn.", i == 0);
    m.push_back({hf + "0.layer_norm.weight", at + "attn_norm.weight"});
    ffn(hf + "1.", at + "ffn.");
    m.push_back({hf + "1.layer_norm.weight", at + "ffn_norm.weight"});
  }
  m.push_back({"encoder.final_layer_norm.weight", "encoder.norm.weight"});
  for (int64_t i = 0; i < c.decoder_layers(); ++i) {
    const std::string hf = fmt::format("decoder.block.{}.layer.", i), at = decoder_block(i);
    self_attention(hf + "0.SelfAttention.", at + "attn.", i == 0);
    m.push_back({hf + "0.layer_norm.weight", at + "attn_norm.weight"});
    m.push_back({hf + "1.EncDecAttention.q.weight", at + "cross_attn.q.weight"});
    m.push_back({hf + "1.EncDecAttention.k.weight", at + "cross_attn.kv.weight", 0});
    m.push_back({hf + "1.EncDecAttention.v.weight", at + "cross_attn.kv.weight", rows_kv});
    m.push_back({hf + "1.EncDecAttention.o.weight", at + "cross_attn.o.weight"});
    m.push_back({hf + "1.layer_norm.weight", at + "cross_norm.weight"});
    ffn(hf + "2.", at + "ffn.");
    m.push_back({hf + "2.layer_norm.weight", at + "ffn_norm.weight"});
  }
  m.push_back({"decoder.final_layer_norm.weight", "decoder.norm.weight"});
  if (!c.tie_embeddings) m.push_back({"lm_head.weight", "lm_head.weight"});
  return m;
}


bool is_hf_t5_config(const json& config) {
  if (!config.is_object()) return false;
  const auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) return *type == "t5" || *type == "mt5";
  return names_architecture(config, {"T5ForConditionalGeneration", "MT5ForConditionalGeneration"});
}

ModelConfig config_from_hf_t5(const json& j, const std::string& origin) {
  const ConfigKeys k(j, origin);
  ModelConfig c;
  c.architecture = Architecture::EncoderDecoder;
  c.vocab_size = k.optional<int64_t>("vocab_size", 32128);
  c.d_model = k.optional<int64_t>("d_model", 512);
  c.n_heads = k.optional<int64_t>("num_heads", 8);
  const int64_t d_kv = k.optional<int64_t>("d_kv", 64);
  check(d_kv > 0, "{}: d_kv must be positive, got {}", origin, d_kv);
  if (d_kv * c.n_heads != c.d_model) c.head_dim = d_kv;
  c.d_ff = k.optional<int64_t>("d_ff", 2048);
  c.n_layers = k.optional<int64_t>("num_layers", 6);
  const int64_t decoder_layers = k.optional<int64_t>("num_decoder_layers", c.n_layers);
  if (decoder_layers != c.n_layers) c.n_decoder_layers = decoder_layers;
  // T5's positions are relative and unbounded; n_positions (512, the pre-training length) bounds Attend's inputs.
  c.max_seq_len = k.optional<int64_t>("n_positions", 512);
  c.position = PositionKind::T5;
  c.t5_num_buckets = static_cast<int32_t>(k.optional<int64_t>("relative_attention_num_buckets", 32));
  c.t5_max_distance = static_cast<int32_t>(k.optional<int64_t>("relative_attention_max_distance", 128));
  c.t5_shared_bias = true;
  c.norm = NormKind::RMSNorm;
  c.norm_eps = k.optional("layer_norm_epsilon", 1e-6);
  c.pre_norm = true;
  c.bias = false;
  c.attention_scale = 1.0;
  const std::string ff = k.optional<std::string>("feed_forward_proj", "relu");
  if (ff == "relu") c.activation = FfnKind::ReLU;
  else if (ff == "gated-gelu") c.activation = FfnKind::GeGLU;  // T5 maps gated-gelu to gelu_new (tanh)
  else if (ff == "gated-silu") c.activation = FfnKind::SwiGLU;
  else throw Error(fmt::format("{}: feed_forward_proj '{}': expected relu, gated-gelu or gated-silu", origin, ff));
  c.tie_embeddings = k.optional("tie_word_embeddings", true);
  if (c.tie_embeddings) c.lm_head_scale = 1.0 / std::sqrt(static_cast<double>(c.d_model));
  // dropout_rate drops the embeddings, attention probabilities, each sub-layer's output and the FFN's hidden units
  // (and the stacks' outputs, which Attend does not).
  const auto dropout = static_cast<float>(k.optional("dropout_rate", 0.1));
  c.embedding_dropout = c.attention_dropout = c.residual_dropout = c.ffn_dropout = dropout;
  c.init_std = k.optional("initializer_factor", 1.0) * 0.05;  // only for new weights (a classification head)
  return validated(c, origin);
}

Model load_hf_t5(const fs::path& dir, const json& config, WeightType matrices) {
  const ModelConfig c = config_from_hf_t5(config, (dir / "config.json").string());
  Model model = model_for_loading(c, matrices, dir);
  // encoder/decoder.embed_tokens are `shared` again; lm_head.weight is too when the head is tied.
  auto skipped = [&](const std::string& name) {
    return name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight" ||
           (c.tie_embeddings && name == "lm_head.weight");
  };
  load_mapped(CheckpointTensors(dir), model, t5_mappings(c), skipped,
              fmt::format("a T5 of this config ({} + {} layers, d_model {})", c.n_layers, c.decoder_layers(),
                          c.d_model));
  finish_loading(model, matrices);
  return model;
}

}  // namespace attend::formats

namespace attend {

void export_hf_t5(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer, DType dtype) {
  const ModelConfig& c = model.config();
  const formats::ExportChecks checks("hf-t5", "T5");
  auto require = [&](bool ok, std::string_view option, std::string_view found, std::string_view wanted) {
    checks.require(ok, option, found, wanted);
  };
  require(c.architecture == Architecture::EncoderDecoder, "architecture", architecture_name(c.architecture),
          "encoder-decoder");
  require(c.position == PositionKind::T5 && c.t5_shared_bias, "position or t5_shared_bias", "not so",
          "one relative position table per stack (position t5, t5_shared_bias)");
  require(c.norm == NormKind::RMSNorm && c.pre_norm && !c.sandwich_norm && !c.norm_unit_offset, "norm", "not so",
          "pre-LN RMSNorm");
  require(!c.bias && !c.qkv_bias && !c.qk_norm, "bias, qkv_bias or qk_norm", "set", "no biases or head norms");
  require(c.attention_scale == 1.0, "attention_scale", std::to_string(c.attention_scale), "1 (unscaled scores)");
  require(c.activation == FfnKind::ReLU || c.activation == FfnKind::GeGLU || c.activation == FfnKind::SwiGLU,
          "activation", "not relu, geglu or swiglu", "relu, gated-gelu or gated-silu");
  require(!c.scale_embeddings && c.n_experts == 0 && c.residual_scale == 1.0,
          "scale_embeddings, n_experts or residual_scale", "set", "none of them");
  const double tied_scale = 1.0 / std::sqrt(static_cast<double>(c.d_model));
  require(c.lm_head_scale == (c.tie_embeddings ? tied_scale : 1.0), "lm_head_scale", std::to_string(c.lm_head_scale),
          "d_model^-1/2 with tied embeddings, else 1");

  formats::create_export_directory(dir);
  formats::write_mapped(model, formats::t5_mappings(c), dir, dtype);
  const char* ff = c.activation == FfnKind::ReLU ? "relu" : c.activation == FfnKind::GeGLU ? "gated-gelu" : "gated-silu";
  nlohmann::ordered_json config = {{"architectures", {"T5ForConditionalGeneration"}},
                                   {"model_type", "t5"},
                                   {"vocab_size", c.vocab_size},
                                   {"d_model", c.d_model},
                                   {"d_kv", c.d_head()},
                                   {"d_ff", c.ffn_hidden()},
                                   {"num_layers", c.n_layers},
                                   {"num_decoder_layers", c.decoder_layers()},
                                   {"num_heads", c.n_heads},
                                   {"relative_attention_num_buckets", c.t5_num_buckets},
                                   {"relative_attention_max_distance", c.t5_max_distance},
                                   {"n_positions", c.max_seq_len},
                                   {"layer_norm_epsilon", c.norm_eps},
                                   {"feed_forward_proj", ff},
                                   {"dropout_rate", c.residual_dropout},
                                   {"initializer_factor", c.init_std / 0.05},
                                   {"tie_word_embeddings", c.tie_embeddings},
                                   {"is_encoder_decoder", true},
                                   {"decoder_start_token_id", 0},  // T5's: the pad token, with EOS 1
                                   {"pad_token_id", 0},
                                   {"eos_token_id", 1},
                                   {"torch_dtype", formats::torch_dtype_name(dtype)}};
  formats::write_hf_extras(tokenizer, dir, config);
  if (tokenizer != nullptr) {  // the decoder starts where Attend's does: BOS ([CLS]), else the pad token
    std::optional<int32_t> start = tokenizer->special_id(SpecialRole::Bos);
    if (!start) start = tokenizer->special_id(SpecialRole::Cls);
    if (!start) start = tokenizer->special_id(SpecialRole::Pad);
    if (start) config["decoder_start_token_id"] = *start;
    if (const auto pad = tokenizer->special_id(SpecialRole::Pad)) config["pad_token_id"] = *pad;
  }
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace attend
