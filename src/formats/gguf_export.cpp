// Writing GGUF files (gguf_model.h has the architectures and tensor names), and llama.cpp's quantization
// schemes: which type each tensor gets.
#include "formats/gguf_model.h"

#include "formats/hf_checkpoint.h"
#include "formats/hf_llama.h"
#include "kernels/convert.h"
#include "kernels/parallel.h"
#include "nn/layers.h"
#include "nn/lora.h"

#include <attend/error.h>
#include <attend/model_dir.h>
#include <attend/tokenizer.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace attend {

namespace {

using formats::GgufPlace;
namespace tt = gguf::tensor_type;

// The quantization schemes `attend quantize` takes: one block type for every multiplied matrix (but the LM head,
// which llama.cpp keeps at Q6_K unless the type is Q8_0), or a K mix, by llama.cpp's llama_ftype ids.
struct SchemeInfo {
  const char* name;
  WeightType base;
  bool mix;  // the _M mixes: more bits for attn_v, ffn_down (use_more_bits layers) and a fused attn_qkv
  uint32_t file_type;
};
constexpr SchemeInfo kSchemes[] = {
    {"q8_0", WeightType::Q8_0, false, 7},   {"q4_0", WeightType::Q4_0, false, 2},
    {"q4_1", WeightType::Q4_1, false, 3},   {"q5_0", WeightType::Q5_0, false, 8},
    {"q5_1", WeightType::Q5_1, false, 9},   {"q4_k", WeightType::Q4_K, false, 14},
    {"q5_k", WeightType::Q5_K, false, 16},  {"q6_k", WeightType::Q6_K, false, 18},
    {"q4_k_m", WeightType::Q4_K, true, 15}, {"q5_k_m", WeightType::Q5_K, true, 17},
};

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int64_t block_of(WeightType t) { return kernels::quant_format(nn::quant_type(t)).block; }

// The type a GGUF tensor gets under a scheme (llama_tensor_get_type for the types Attend writes), before the
// fallback for rows that are not whole blocks.
WeightType scheme_type(const SchemeInfo& s, const std::string& name, bool is_head, int64_t layer, int64_t n_layers) {
  if (is_head) return s.base == WeightType::Q8_0 ? WeightType::Q8_0 : WeightType::Q6_K;
  if (!s.mix) return s.base;
  const bool q4 = s.base == WeightType::Q4_K;
  if (name.ends_with("attn_qkv.weight")) return q4 ? WeightType::Q5_K : WeightType::Q6_K;
  if ((name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight")) && more_bits(layer, n_layers))
    return WeightType::Q6_K;
  return s.base;
}

// Rows whose length is not a whole number of blocks take llama.cpp's fallback (nn::block_fallback), or stay F32
// when even 32 does not divide them.
std::optional<WeightType> fitting(WeightType t, int64_t cols) {
  if (cols % block_of(t) == 0) return t;
  const WeightType fallback = nn::block_fallback(t);
  if (cols % block_of(fallback) == 0) return fallback;
  return std::nullopt;
}

int64_t layer_of(const std::string& gguf_name) {
  if (!gguf_name.starts_with("blk.")) return -1;
  return std::stoll(gguf_name.substr(4, gguf_name.find('.', 4) - 4));
}

// The quantized rows [row, row + rows) of p, when one segment holds them all: its type and bytes.
std::optional<std::pair<WeightType, const uint8_t*>> stored_rows(const Parameter& p, int64_t row, int64_t rows) {
  int64_t start = 0;
  const int64_t C = p.value.size(-1);
  for (const QuantizedRows& s : p.quantized) {
    if (row >= start && row + rows <= start + s.rows)
      return std::pair{s.type, s.data + (row - start) * kernels::quant_row_bytes(nn::quant_type(s.type), C)};
    start += s.rows;
  }
  return std::nullopt;
}

// tokenizer.ggml.* for a WordPiece tokenizer (llama.cpp's "bert" kind): the vocabulary in phantom-space form (a
// word's first piece with a leading ▁, a continuing piece without its ##, special tokens as they are, type 3).
void write_wordpiece(gguf::Writer& w, const nlohmann::json& j, int64_t vocab_size) {
  const nlohmann::json& model = j["model"];
  const std::string prefix = model.value("continuing_subword_prefix", "##");
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 0);
  for (const auto& [piece, id] : model["vocab"].items()) {
    const int64_t i = id.get<int64_t>();
    check(i >= 0 && i < vocab_size, "export gguf: the tokenizer's token id {} (the model has {} embeddings)", i, vocab_size);
    tokens[i] = piece.starts_with(prefix) ? piece.substr(prefix.size()) : "\xe2\x96\x81" + piece, types[i] = 1;
  }
  for (const nlohmann::json& added : j["added_tokens"]) {
    const int64_t i = added["id"].get<int64_t>();
    check(i >= 0 && i < vocab_size, "export gguf: the tokenizer's added token id {} (the model has {} embeddings)", i,
          vocab_size);
    tokens[i] = added["content"].get<std::string>(), types[i] = added.value("special", false) ? 3 : 4;
  }
  for (int64_t i = 0; i < vocab_size; ++i)
    if (types[i] == 0) tokens[i] = fmt::format("[PAD{}]", i), types[i] = 5;
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_int32s("tokenizer.ggml.token_type", types);
  const nlohmann::json& vocab = model["vocab"];
  auto id_of = [&](const std::string& t) -> std::optional<uint32_t> {
    if (vocab.contains(t)) return vocab[t].get<uint32_t>();
    for (const nlohmann::json& added : j["added_tokens"])
      if (added["content"] == t) return added["id"].get<uint32_t>();
    return std::nullopt;
  };
  const std::string unk = model.value("unk_token", "[UNK]");
  // llama.cpp's WPM tokenizer starts a text with the BOS id ([CLS]) and ends it with the separator's.
  for (const auto& [key, token] : {std::pair<const char*, std::string>{"bos_token_id", "[CLS]"}, {"cls_token_id", "[CLS]"},
                                   {"seperator_token_id", "[SEP]"}, {"unknown_token_id", unk},
                                   {"padding_token_id", "[PAD]"}, {"mask_token_id", "[MASK]"}})
    if (const auto id = id_of(token)) w.set_uint32(fmt::format("tokenizer.ggml.{}", key), *id);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_sep_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

// tokenizer.ggml.* from a tokenizer.json: byte-level BPE (llama.cpp's "gpt2" kind), or BERT's WordPiece ("bert").
void write_tokenizer(gguf::Writer& w, const Tokenizer& tok, int64_t vocab_size) {
  const nlohmann::json j = nlohmann::json::parse(tok.to_json());
  const nlohmann::json& model = j["model"];
  if (model.value("type", "") == "WordPiece") {
    const nlohmann::json& normalizer = j["normalizer"];
    const bool uncased = normalizer.is_object() && normalizer.value("type", "") == "BertNormalizer" &&
                         normalizer.value("lowercase", false);
    check(uncased, "export gguf: the tokenizer's WordPiece is not BERT's uncased pipeline (BertNormalizer with "
          "lowercase), the only one llama.cpp's bert tokenizer follows; export without a tokenizer");
    return write_wordpiece(w, j, vocab_size);
  }
  auto refuse = [](std::string_view what) {
    throw Error(fmt::format("export gguf: the tokenizer's {}: GGUF's tokenizers Attend writes are byte-level BPE "
                            "(GPT-2's, Llama 3's and Qwen2's pre-tokenizers); export without a tokenizer, or "
                            "give one of these", what));
  };
  if (model.value("type", "") != "BPE") refuse(fmt::format("model is {}", model.value("type", "?")));
  if (!j["normalizer"].is_null()) refuse("normalizer");
  // The pre-tokenizer: GPT-2's ByteLevel with its regex, or a Split of a known regex before a ByteLevel.
  const nlohmann::json& pre = j["pre_tokenizer"];
  std::string pre_name;
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true)) {
    pre_name = "gpt-2";
  } else if (pre.is_object() && pre.value("type", "") == "Sequence" && pre["pretokenizers"].size() == 2 &&
             pre["pretokenizers"][0].value("type", "") == "Split" && pre["pretokenizers"][1].value("type", "") == "ByteLevel") {
    const std::string regex = pre["pretokenizers"][0]["pattern"].value("Regex", "");
    for (const char* name : {"llama-bpe", "qwen2"})
      if (regex == formats::gguf_split_regex(name)) pre_name = name;
    if (pre_name.empty()) refuse("Split regex (not Llama 3's or Qwen2's)");
  } else {
    refuse("pre_tokenizer");
  }
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 0);
  for (const auto& [piece, id] : model["vocab"].items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i >= vocab_size) refuse(fmt::format("token id {} (the model has {} embeddings)", i, vocab_size));
    tokens[i] = piece, types[i] = 1;  // normal
  }
  for (const nlohmann::json& added : j["added_tokens"]) {
    const int64_t i = added["id"].get<int64_t>();
    if (i < 0 || i >= vocab_size) refuse(fmt::format("added token id {} (the model has {} embeddings)", i, vocab_size));
    tokens[i] = added["content"].get<std::string>(), types[i] = added.value("special", false) ? 3 : 4;  // control, user
  }
  for (int64_t i = 0; i < vocab_size; ++i)
    if (types[i] == 0) tokens[i] = fmt::format("[PAD{}]", i), types[i] = 5;  // unused, as llama.cpp's converter pads
  std::vector<std::string> merges;
  for (const nlohmann::json& m : model["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre_name);
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_int32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
  const std::optional<int32_t> bos = tok.special_id(SpecialRole::Bos), eos = tok.special_id(SpecialRole::Eos),
                               pad = tok.special_id(SpecialRole::Pad);
  if (bos) w.set_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
  if (eos) w.set_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*eos));
  if (pad) w.set_uint32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*pad));
  // Whether a prompt starts with BOS, as Attend's encoding of a prompt does.
  const std::vector<int32_t> empty = tok.encode_prompt("");
  w.set_bool("tokenizer.ggml.add_bos_token", bos && !empty.empty() && empty.front() == *bos);
  w.set_bool("tokenizer.ggml.add_eos_token", eos && !empty.empty() && empty.back() == *eos && empty.size() > (bos ? 1u : 0u));
}

}  // namespace

std::string gguf_architecture(const ModelConfig& c) {
  if (c.architecture == Architecture::Encoder) {  // BERT: llama.cpp's bert, an embedding model
    const formats::ExportChecks checks("gguf", "bert");
    checks.require(!c.pre_norm, "norm_placement", "pre", "post (BERT's)");
    checks.require(c.norm == NormKind::LayerNorm && c.embedding_norm && c.bias, "norm, embedding_norm or bias",
                   "not BERT's", "LayerNorm after each sublayer and over the embeddings, biases");
    checks.require(c.position == PositionKind::Learned, "position", "not learned", "learned positions");
    checks.require(c.activation == FfnKind::GELU || c.activation == FfnKind::GELUTanh, "activation", "not gelu", "gelu");
    checks.require(c.kv_heads() == c.n_heads && c.d_head() * c.n_heads == c.d_model && !c.qk_norm,
                   "heads", "grouped, sized or normed", "one K/V head per head of d_model / heads");
    checks.require(!c.mlm_head, "mlm_head", "true", "no masked-LM head (llama.cpp's bert gives embeddings)");
    checks.require(c.n_experts == 0 && c.attention_scale == 0.0 && !c.scale_embeddings, "n_experts, attention_scale "
                   "or scale_embeddings", "set", "none");
    checks.require(c.n_classes == 0 || c.pooler, "pooler", "false with a classifier", "the classifier after the pooler");
    return "bert";
  }
  const bool gemma = c.sandwich_norm;
  const formats::ExportChecks checks("gguf", c.position == PositionKind::Learned ? "gpt2"
                                             : gemma                             ? "gemma3"
                                                                                 : "llama/qwen2/qwen3");
  checks.decoder(c);
  if (c.position == PositionKind::Learned) {
    checks.unscaled(c);
    checks.plain_norms(c);
    checks.require(c.head_dim == 0 || c.head_dim * c.n_heads == c.d_model, "head_dim", std::to_string(c.head_dim),
                   "d_model / n_heads");
    checks.require(!c.qk_norm, "qk_norm", "true", "no head norms");
    checks.require(c.sliding_window == 0, "sliding_window", std::to_string(c.sliding_window), "no window");
    checks.require(c.norm == NormKind::LayerNorm, "norm", "rmsnorm", "layernorm");
    checks.require(c.bias, "bias", "false", "biases");
    checks.require(c.activation == FfnKind::GELUTanh, "activation", "not gelu_tanh", "gelu_tanh (ggml's GELU)");
    checks.require(c.kv_heads() == c.n_heads, "n_kv_heads", std::to_string(c.n_kv_heads), "one per head");
    return "gpt2";
  }
  checks.require(c.position == PositionKind::RoPE, "position", "not rope or learned", "RoPE (llama) or learned (gpt2)");
  checks.require(c.norm == NormKind::RMSNorm, "norm", "layernorm", "rmsnorm");
  checks.require(!c.bias, "bias", "true", "no biases (qkv_bias for qwen2)");
  // RoPE scaling GGUF holds: linear, and Llama 3.1's as a rope_freqs tensor (llama only).
  checks.require(c.rope_base_scale == 1.0 && c.rope_ntk_factor == 1.0 && c.rope_dynamic_factor == 0.0, "RoPE scaling",
                 "base, NTK or dynamic", "none, linear or (llama) llama3");
  checks.require(c.rope_llama3_factor == 0.0 || (!gemma && !c.qk_norm && !c.qkv_bias), "RoPE scaling", "llama3",
                 "llama3's factors only as llama");
  checks.require(c.rope_llama3_factor == 0.0 || c.rope_position_scale == 1.0, "RoPE scaling", "llama3 and linear",
                 "one of them");
  if (gemma) {
    checks.require(c.norm_unit_offset && c.qk_norm && !c.qkv_bias, "norm_unit_offset, qk_norm or qkv_bias",
                   "not as Gemma's", "norms of 1 + γ, head norms, no biases");
    checks.require(c.scale_embeddings, "scale_embeddings", "false", "embeddings × √d_model");
    checks.require(c.activation == FfnKind::GeGLU, "activation", "not geglu", "geglu (ggml's GELU, tanh)");
    const double want = formats::gemma3_attention_scale(c);
    const double scale = c.attention_scale > 0.0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.d_head()));
    checks.require(std::abs(scale - want) <= 1e-9 * want, "attention_scale", std::to_string(scale),
                   "1/sqrt(head_dim), or 1/sqrt(d_model/heads) with 62 layers (as llama.cpp scales)");
    return "gemma3";
  }
  checks.unscaled(c);
  checks.plain_norms(c);
  checks.require(c.activation == FfnKind::SwiGLU, "activation", "not swiglu", "swiglu");
  checks.require(!(c.qkv_bias && c.qk_norm), "qkv_bias with qk_norm", "set", "one of them (qwen2 or qwen3)");
  return c.qk_norm ? "qwen3" : c.qkv_bias ? "qwen2" : "llama";
}

std::vector<std::string> gguf_export_types() {
  std::vector<std::string> names = {"f32", "f16", "bf16"};
  for (const SchemeInfo& s : kSchemes) names.push_back(s.name);
  return names;
}

void export_gguf(const Model& model, const std::filesystem::path& file, const Tokenizer* tokenizer,
                 const GgufExportOptions& options) {
  const ModelConfig& c = model.config();
  const std::string arch = gguf_architecture(c);
  const std::string& type = options.type;
  const SchemeInfo* scheme = nullptr;
  WeightType float_type = WeightType::F32;
  if (type == "f16") {
    float_type = WeightType::F16;
  } else if (type == "bf16") {
    float_type = WeightType::BF16;
  } else if (!type.empty() && type != "f32") {
    const auto it = std::find_if(std::begin(kSchemes), std::end(kSchemes), [&](const SchemeInfo& s) { return type == s.name; });
    check(it != std::end(kSchemes), "export gguf: type '{}': expected one of {}", type, fmt::join(gguf_export_types(), ", "));
    scheme = &*it;
  }

  gguf::Writer w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "attend");
  const bool as_stored = type.empty() && model.holds_quantized();
  // A model whose matrices are held in 16 bits (an F16 or BF16 GGUF file's, as loaded) is written as held: those
  // matrices in that type, and the other matrices too where their values are that type's exactly (a file's
  // untied token table), else fp32.
  WeightType held_half = WeightType::F32;
  if (type.empty() && !as_stored)
    for (const Parameter* p : model.parameters())
      if (p->storage == WeightType::F16 || p->storage == WeightType::BF16) held_half = p->storage;
  auto exactly = [](WeightType half, const float* values, int64_t n) {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    std::vector<float> back(static_cast<size_t>(n));
    kernels::round_to_half(nn::half_type(half), bits.data(), values, n);
    kernels::widen_half(nn::half_type(half), back.data(), bits.data(), n);
    return std::memcmp(back.data(), values, static_cast<size_t>(n) * sizeof(float)) == 0;
  };
  // llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32, or the scheme's; a model written as stored says the
  // type of most of its weights only loosely, as llama.cpp's own requantized files do: "guessed" (1024).
  const WeightType file_half = held_half != WeightType::F32 ? held_half : float_type;
  w.set_uint32("general.file_type", scheme ? scheme->file_type : as_stored ? 1024u
                                    : file_half == WeightType::F16 ? 1u : file_half == WeightType::BF16 ? 32u : 0u);
  if (scheme || as_stored) w.set_uint32("general.quantization_version", 2);
  auto key = [&](const char* name) { return arch + "." + name; };
  w.set_uint32(key("context_length"), static_cast<uint32_t>(c.max_seq_len));
  w.set_uint32(key("embedding_length"), static_cast<uint32_t>(c.d_model));
  w.set_uint32(key("block_count"), static_cast<uint32_t>(c.n_layers));
  w.set_uint32(key("feed_forward_length"), static_cast<uint32_t>(c.ffn_hidden()));
  w.set_uint32(key("attention.head_count"), static_cast<uint32_t>(c.n_heads));
  if (arch == "gpt2") {
    w.set_float32(key("attention.layer_norm_epsilon"), static_cast<float>(c.norm_eps));
  } else if (arch == "bert") {
    w.set_float32(key("attention.layer_norm_epsilon"), static_cast<float>(c.norm_eps));
    w.set_bool(key("attention.causal"), false);
    w.set_uint32(key("pooling_type"), c.pooling == Pooling::Mean ? 1u : 2u);
    w.set_uint32("tokenizer.ggml.token_type_count", static_cast<uint32_t>(std::max<int64_t>(c.type_vocab_size, 1)));
    if (!c.class_names.empty()) w.set_strings(key("classifier.output_labels"), c.class_names);
  } else {
    w.set_uint32(key("attention.head_count_kv"), static_cast<uint32_t>(c.kv_heads()));
    w.set_float32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(c.norm_eps));
    w.set_float32(key("rope.freq_base"), static_cast<float>(c.rope_base));
    w.set_uint32(key("rope.dimension_count"), static_cast<uint32_t>(c.d_head()));
    if (c.d_head() * c.n_heads != c.d_model) {  // a head size of its own (Qwen3's head_dim)
      w.set_uint32(key("attention.key_length"), static_cast<uint32_t>(c.d_head()));
      w.set_uint32(key("attention.value_length"), static_cast<uint32_t>(c.d_head()));
    }
    w.set_uint32(key("vocab_size"), static_cast<uint32_t>(c.vocab_size));
    if (c.sliding_window > 0) w.set_uint32(key("attention.sliding_window"), static_cast<uint32_t>(c.sliding_window));
    if (c.rope_position_scale != 1.0) {
      w.set_string(key("rope.scaling.type"), "linear");
      w.set_float32(key("rope.scaling.factor"), static_cast<float>(1.0 / c.rope_position_scale));
    }
    if (arch == "gemma3") {
      w.set_uint32(key("attention.key_length"), static_cast<uint32_t>(c.d_head()));
      w.set_uint32(key("attention.value_length"), static_cast<uint32_t>(c.d_head()));
      w.set_float32(key("rope.freq_base_swa"), static_cast<float>(c.rope_local_base > 0.0 ? c.rope_local_base : c.rope_base));
      if (c.sliding_window > 0)  // 0: every layer slides
        w.set_uint32(key("attention.sliding_window_pattern"),
                     static_cast<uint32_t>(c.sliding_window_pattern > 0 ? c.sliding_window_pattern : c.n_layers + 1));
    }
  }
  if (c.rope_llama3_factor > 0.0) {  // Llama 3.1's scaling as llama.cpp holds it: the factor each frequency divides by
    const std::vector<float> factors = formats::llama3_rope_factors(c);
    std::vector<uint8_t> bytes(factors.size() * sizeof(float));
    std::memcpy(bytes.data(), factors.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", {c.d_head() / 2}, tt::F32, std::move(bytes));
  }
  if (tokenizer != nullptr) write_tokenizer(w, *tokenizer, c.vocab_size);
  if (!options.chat_template.empty()) w.set_string("tokenizer.chat_template", options.chat_template);

  // llama.cpp's gpt2 always has an output tensor (a tied model's is the embedding again); llama's only untied.
  const bool output = arch == "gpt2" || !c.tie_embeddings;
  const std::vector<GgufPlace> places = formats::gguf_places(c, arch, output);
  const int64_t D = c.d_head();
  std::map<const Parameter*, std::vector<float>> widened;  // matrices held only as blocks, written in another type
  for (const GgufPlace& place : places) {
    const Parameter* p = model.find(place.attend);
    check(p != nullptr, "export gguf: the model has no '{}'", place.attend);
    const bool vector = p->value.rank() == 1;
    const int64_t C = vector ? 1 : p->value.size(-1);
    const std::vector<int64_t> dims = vector ? std::vector<int64_t>{place.rows} : std::vector<int64_t>{C, place.rows};
    const bool is_head = place.gguf == "output.weight" || (!output && place.gguf == "token_embd.weight");
    // What llama-quantize quantizes: the matrices but the position table.
    const bool quantizable = !vector && place.gguf != "position_embd.weight" && place.gguf != "token_types.weight";
    // The type: vectors F32, and BERT's token types (llama.cpp adds a row of them to the F32 embeddings, and its
    // add takes no F16 operand); a quantized weight written as stored keeps its blocks; a scheme picks per tensor.
    WeightType t = vector || place.gguf == "token_types.weight" ? WeightType::F32 : float_type;
    std::optional<std::pair<WeightType, const uint8_t*>> stored;
    if (quantizable && type.empty() && !p->quantized.empty())
      stored = stored_rows(*p, place.row, place.rows);
    if (stored) {
      t = stored->first;
    } else if (quantizable && scheme) {
      t = fitting(scheme_type(*scheme, place.gguf, is_head, layer_of(place.gguf), c.n_layers), C).value_or(WeightType::F32);
    }
    const float* values = nullptr;
    if (!stored) {
      std::vector<float>& v = widened[p];
      if (!p->has_values() && v.empty()) {
        v.resize(static_cast<size_t>(p->numel()));
        nn::dequantize_values(*p, v.data());
      }
      values = (p->has_values() ? p->value.data() : v.data()) + place.row * C;
      if (c.norm_unit_offset && is_norm_gain(p->role)) {  // llama.cpp's Gemma norms hold 1 + γ
        if (v.empty()) v.assign(p->value.span().begin(), p->value.span().end());
        for (float& g : v) g += 1.0f;
        values = v.data() + place.row * C;
      }
    }
    if (quantizable && !stored && held_half != WeightType::F32 &&
        (p->storage == held_half || exactly(held_half, values, place.rows * C)))
      t = held_half;
    // The rows in the file's order (Q and K of qwen2: Hugging Face's halves).
    const int64_t row_bytes = is_quantized(t) ? kernels::quant_row_bytes(nn::quant_type(t), C)
                              : t == WeightType::F32 ? C * 4 : C * 2;
    const uint64_t bytes = static_cast<uint64_t>(row_bytes * place.rows);
    if (t == WeightType::F32 && place.rope_heads == 0) {
      w.add_tensor(place.gguf, dims, tt::F32, values, bytes);  // borrowed: the model outlives write()
      continue;
    }
    if (stored && place.rope_heads == 0) {
      w.add_tensor(place.gguf, dims, formats::gguf_type_id(t), stored->second, bytes);
      continue;
    }
    std::vector<uint8_t> data(bytes);
    if (stored) {
      std::memcpy(data.data(), stored->second, bytes);
    } else if (t == WeightType::F32) {
      std::memcpy(data.data(), values, bytes);
    } else if (t == WeightType::F16 || t == WeightType::BF16) {
      kernels::round_to_half(nn::half_type(t), reinterpret_cast<uint16_t*>(data.data()), values, place.rows * C);
    } else {
      const kernels::QuantType q = nn::quant_type(t);
      const std::vector<float> importance =
          options.importance ? options.importance->mean_squares(p->name) : std::vector<float>{};
      const float* imp = importance.size() == static_cast<size_t>(C) ? importance.data() : nullptr;
      kernels::parallel_for(place.rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) kernels::quantize_row(q, data.data() + r * row_bytes, values + r * C, C, imp);
      });
    }
    if (place.rope_heads > 0) {  // Attend's pairs to Hugging Face's halves
      const std::vector<uint8_t> pairs = data;
      formats::rope_row_bytes_to_hf(data.data(), pairs.data(), place.rope_heads, D, row_bytes);
    }
    w.add_tensor(place.gguf, dims, formats::gguf_type_id(t), std::move(data));
  }
  w.write(file);
}

}  // namespace attend

namespace attend {

// llama.cpp's LoRA adapters (llama-adapter.cpp): general.type "adapter", adapter.type "lora", adapter.lora.alpha,
// and for each adapted tensor of the base file "<name>.lora_a" (ggml [in, R]: R rows of the input) and
// "<name>.lora_b" ([R, out]), applied as W x + (alpha / R)·B(A x) with R the tensor's own rank. A GGUF tensor
// that holds several of Attend's adapters (gpt2's fused attn_qkv: q and v) takes them as one adapter of their
// summed rank, A stacked and B block-diagonal, each block scaled so that alpha / R gives the block its own scale.
void export_gguf_lora(const Model& model, const std::filesystem::path& file) {
  const ModelConfig& c = model.config();
  check(model.has_lora() && c.lora_r > 0, "export gguf-lora: the model has no LoRA adapters of its own (a LoRA run's "
        "checkpoint, or a base with --lora DIR)");
  const std::string arch = gguf_architecture(c);
  check(arch != "bert", "export gguf-lora: llama.cpp applies LoRA adapters to generating models (gpt2, llama, qwen2, "
        "qwen3, gemma3), not to bert");
  const int slot = nn::own_adapter_slot(model);
  // alpha as the file holds it: alpha / r is the scale of an unfused tensor (rsLoRA's alpha / √r as alpha·√r / r).
  const double alpha = c.lora_rslora ? c.lora_alpha * std::sqrt(static_cast<double>(c.lora_r)) : c.lora_alpha;
  gguf::Writer w;
  w.set_string("general.architecture", arch);
  w.set_string("general.type", "adapter");
  w.set_string("general.name", "attend");
  w.set_string("adapter.type", "lora");
  w.set_float32("adapter.lora.alpha", static_cast<float>(alpha));
  const int64_t D = c.d_head();
  int64_t written = 0;
  for (const GgufPlace& place : formats::gguf_places(c, arch, arch == "gpt2" || !c.tie_embeddings)) {
    const Parameter* p = model.find(place.attend);
    check(p != nullptr, "export gguf-lora: the model has no '{}'", place.attend);
    const std::vector<const LowRankUpdate*> updates =
        nn::updates_on_rows(*p, slot, place.row, place.rows, "GGUF's " + place.gguf);
    if (updates.empty()) continue;
    const int64_t in = p->value.size(1), R = nn::stacked_rank(updates, place.rows);
    std::vector<float> a(static_cast<size_t>(R * in)), b(static_cast<size_t>(place.rows * R), 0.0f);
    nn::stack_updates(updates, place.row, place.rows, R, a.data(), b.data(), [&](const LowRankUpdate& u) {
      return static_cast<float>(u.scale / (alpha / static_cast<double>(R)));
    });
    if (place.rope_heads > 0) {  // B's rows in the file's order, as the weight's (qwen2, qwen3, gemma3)
      const std::vector<float> pairs = b;
      formats::rope_rows_to_hf(b.data(), pairs.data(), place.rope_heads, D, R);
    }
    std::string base = place.gguf;  // "blk.0.attn_q.weight.lora_a"
    std::vector<uint8_t> a_bytes(a.size() * sizeof(float)), b_bytes(b.size() * sizeof(float));
    std::memcpy(a_bytes.data(), a.data(), a_bytes.size());
    std::memcpy(b_bytes.data(), b.data(), b_bytes.size());
    w.add_tensor(base + ".lora_a", {in, R}, tt::F32, std::move(a_bytes));
    w.add_tensor(base + ".lora_b", {R, place.rows}, tt::F32, std::move(b_bytes));
    ++written;
  }
  check(written > 0, "export gguf-lora: none of the model's adapters is on a tensor of the GGUF file");
  w.write(file);
}

}  // namespace attend
