#include "formats/gguf_model.h"

#include "formats/hf_checkpoint.h"
#include "formats/hf_llama.h"
#include "tokenize/unicode.h"
#include "kernels/convert.h"
#include "kernels/position.h"
#include "nn/layers.h"
#include "nn/lora.h"

#include <attend/error.h>
#include <attend/log.h>
#include <attend/model_dir.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <fstream>
#include <set>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace attend::formats {

namespace fs = std::filesystem;

namespace {

// A block type of a ggml type id; nullopt for the float types (and for types Attend does not run, which the
// caller names in its error).
std::optional<WeightType> weight_type_of(uint32_t id) {
  const std::optional<WeightType> t = gguf_weight_type(id);
  return t && is_quantized(*t) ? t : std::nullopt;
}

bool is_float_type(uint32_t id) {
  const std::optional<WeightType> t = gguf_weight_type(id);
  return t && !is_quantized(*t);
}

const char* type_name(uint32_t id) {
  const gguf::TypeTraits* t = gguf::type_traits(id);
  return t != nullptr ? t->name : "unknown";
}

// A tensor's values as floats (any type Attend reads), into `out` (numel values).
void values_of(const gguf::Reader& file, const gguf::TensorInfo& t, float* out) {
  const int64_t n = t.numel();
  switch (t.type) {
    case gguf::tensor_type::F32: std::memcpy(out, t.data, static_cast<size_t>(n) * sizeof(float)); return;
    case gguf::tensor_type::F16: {
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      std::memcpy(bits.data(), t.data, bits.size() * 2);
      kernels::half_to_float(out, bits.data(), n);
      return;
    }
    case gguf::tensor_type::BF16: {
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      std::memcpy(bits.data(), t.data, bits.size() * 2);
      kernels::bf16_to_float(out, bits.data(), n);
      return;
    }
    default: break;
  }
  const std::optional<WeightType> q = weight_type_of(t.type);
  check(q.has_value(), "{}: tensor '{}' is {}: Attend reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K "
        "and Q6_K tensors", file.path().string(), t.name, type_name(t.type));
  kernels::dequantize_row(nn::quant_type(*q), out, t.data, n);  // rows are whole blocks: the reader checked
}

}  // namespace

namespace {

// Attend's weight types and their ggml type ids, both ways.
constexpr std::pair<WeightType, uint32_t> kGgmlTypes[] = {
    {WeightType::F32, gguf::tensor_type::F32},   {WeightType::F16, gguf::tensor_type::F16},
    {WeightType::BF16, gguf::tensor_type::BF16}, {WeightType::Q8_0, gguf::tensor_type::Q8_0},
    {WeightType::Q4_0, gguf::tensor_type::Q4_0}, {WeightType::Q4_1, gguf::tensor_type::Q4_1},
    {WeightType::Q5_0, gguf::tensor_type::Q5_0}, {WeightType::Q5_1, gguf::tensor_type::Q5_1},
    {WeightType::Q4_K, gguf::tensor_type::Q4_K}, {WeightType::Q5_K, gguf::tensor_type::Q5_K},
    {WeightType::Q6_K, gguf::tensor_type::Q6_K},
};

}  // namespace

std::optional<WeightType> gguf_weight_type(uint32_t id) {
  for (const auto& [type, ggml] : kGgmlTypes)
    if (ggml == id) return type;
  return std::nullopt;
}

uint32_t gguf_type_id(WeightType type) {
  for (const auto& [t, ggml] : kGgmlTypes)
    if (t == type) return ggml;
  throw Error(fmt::format("weight type {} has no GGUF type", weight_type_name(type)));
}

bool is_gguf_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in && fs::is_regular_file(path) && in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

namespace {

// BERT (llama.cpp's bert: an encoder of post-LN blocks, read for embeddings; a pooler and a classifier when the
// file has them).
std::vector<GgufPlace> bert_places(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.ffn_hidden();
  std::vector<GgufPlace> m = {{"token_embd.weight", "embed.tokens.weight", 0, c.vocab_size},
                              {"position_embd.weight", "embed.positions.weight", 0, c.max_seq_len}};
  if (c.type_vocab_size > 0) m.push_back({"token_types.weight", "embed.token_types.weight", 0, c.type_vocab_size});
  for (const char* k : {"weight", "bias"}) m.push_back({std::string("token_embd_norm.") + k, std::string("embed.norm.") + k, 0, C});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string g = fmt::format("blk.{}.", i), a = fmt::format("encoder.layers.{}.", i);
    for (const char* k : {"weight", "bias"}) {
      m.push_back({g + "attn_q." + k, a + "attn.qkv." + k, 0, C});
      m.push_back({g + "attn_k." + k, a + "attn.qkv." + k, C, C});
      m.push_back({g + "attn_v." + k, a + "attn.qkv." + k, 2 * C, C});
      m.push_back({g + "attn_output." + k, a + "attn.o." + k, 0, C});
      m.push_back({g + "attn_output_norm." + k, a + "attn_norm." + k, 0, C});
      m.push_back({g + "ffn_up." + k, a + "ffn.up." + k, 0, F});
      m.push_back({g + "ffn_down." + k, a + "ffn.down." + k, 0, C});
      m.push_back({g + "layer_output_norm." + k, a + "ffn_norm." + k, 0, C});
    }
  }
  if (c.pooler)
    for (const char* k : {"weight", "bias"}) m.push_back({std::string("cls.") + k, std::string("pooler.dense.") + k, 0, C});
  if (c.n_classes > 0)
    for (const char* k : {"weight", "bias"})
      m.push_back({std::string("cls.output.") + k, std::string("classifier.") + k, 0, c.n_classes});
  return m;
}

}  // namespace

std::vector<GgufPlace> gguf_places(const ModelConfig& c, const std::string& arch, bool output) {
  if (arch == "bert") return bert_places(c);
  std::vector<GgufPlace> m;
  const int64_t V = c.vocab_size, C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head(), F = c.ffn_hidden();
  m.push_back({"token_embd.weight", "embed.tokens.weight", 0, V});
  if (arch == "gpt2") m.push_back({"position_embd.weight", "embed.positions.weight", 0, c.max_seq_len});
  const bool neox = arch == "qwen2" || arch == "qwen3" || arch == "gemma3";
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string g = fmt::format("blk.{}.", i), a = decoder_block(i);
    std::vector<const char*> kinds = {"weight"};
    if (c.bias) kinds.push_back("bias");
    for (const char* k : kinds) m.push_back({g + "attn_norm." + k, a + "attn_norm." + k, 0, C});
    for (const char* k : kinds) {
      if (arch == "gpt2") m.push_back({g + "attn_qkv." + k, a + "attn.qkv." + k, 0, (H + 2 * Hkv) * D});
    }
    if (arch != "gpt2") {
      std::vector<const char*> qkv_kinds = {"weight"};
      if (c.qkv_bias || c.bias) qkv_kinds.push_back("bias");
      for (const char* k : qkv_kinds) {
        m.push_back({g + "attn_q." + k, a + "attn.qkv." + k, 0, H * D, neox ? H : 0});
        m.push_back({g + "attn_k." + k, a + "attn.qkv." + k, H * D, Hkv * D, neox ? Hkv : 0});
        m.push_back({g + "attn_v." + k, a + "attn.qkv." + k, (H + Hkv) * D, Hkv * D});
      }
    }
    if (c.qk_norm)  // one head's gains, in the head's (NEOX) order
      for (const char* which : {"q_norm", "k_norm"})
        m.push_back({g + "attn_" + which + ".weight", a + "attn." + which + ".weight", 0, D, 1});
    for (const char* k : kinds) m.push_back({g + "attn_output." + k, a + "attn.o." + k, 0, C});
    if (c.sandwich_norm) m.push_back({g + "post_attention_norm.weight", a + "attn_post_norm.weight", 0, C});
    for (const char* k : kinds) m.push_back({g + "ffn_norm." + k, a + "ffn_norm." + k, 0, C});
    if (is_gated(c.activation)) m.push_back({g + "ffn_gate.weight", a + "ffn.gate.weight", 0, F});
    for (const char* k : kinds) m.push_back({g + "ffn_up." + k, a + "ffn.up." + k, 0, F});
    for (const char* k : kinds) m.push_back({g + "ffn_down." + k, a + "ffn.down." + k, 0, C});
    if (c.sandwich_norm) m.push_back({g + "post_ffw_norm.weight", a + "ffn_post_norm.weight", 0, C});
  }
  m.push_back({"output_norm.weight", "decoder.norm.weight", 0, C});
  if (c.bias) m.push_back({"output_norm.bias", "decoder.norm.bias", 0, C});
  if (output) m.push_back({"output.weight", c.tie_embeddings ? "embed.tokens.weight" : "lm_head.weight", 0, V});
  return m;
}

std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  const kernels::RopeScaling plain{.base = c.rope_base};
  kernels::RopeScaling scaled = plain;
  scaled.llama3_factor = c.rope_llama3_factor, scaled.llama3_low_freq_factor = c.rope_llama3_low_freq_factor;
  scaled.llama3_high_freq_factor = c.rope_llama3_high_freq_factor, scaled.original_context = c.rope_original_context;
  std::vector<float> factors(static_cast<size_t>(c.d_head() / 2));
  for (int64_t i = 0; i < c.d_head() / 2; ++i)
    factors[i] = static_cast<float>(kernels::rope_frequency(i, c.d_head(), plain) /
                                    kernels::rope_frequency(i, c.d_head(), scaled));
  return factors;
}

double gemma3_attention_scale(const ModelConfig& c) {
  return c.n_layers == 62 ? 1.0 / std::sqrt(static_cast<double>(c.d_model / c.n_heads))
                          : 1.0 / std::sqrt(static_cast<double>(c.d_head()));
}

namespace {

// Llama 3.1's RoPE scaling from a rope_freqs tensor (llama.cpp's converter stores the factor each frequency is
// divided by, not the parameters). The factor is the largest; the factors depend on the trained context L0 and the
// low and high frequency factors only through L0/low and L0/high (scaled together they give the same factors), so
// low is taken as 1. Frequencies between the two bands give 1/factor_i = (1 − s)/f + s with s = (L0/λ_i − 1)/(high −
// 1), a line in 1/λ_i: two of them give L0 and high. With fewer, where only the bands' edges tell, the published
// parameters and any power-of-two context are tried. The parameters are kept where they give every factor; an
// error naming the tensor where none do.
void read_llama3_factors(const gguf::Reader& file, const gguf::TensorInfo& t, ModelConfig& c) {
  const std::string origin = file.path().string();
  const int64_t half = c.d_head() / 2;
  check(t.type == gguf::tensor_type::F32 && t.dims.size() == 1 && t.dims[0] == half,
        "{}: tensor 'rope_freqs.weight' is {} [{}], expected F32 [{}] (one factor a frequency)", origin,
        type_name(t.type), fmt::join(t.dims, ", "), half);
  std::vector<float> factors(static_cast<size_t>(half));
  std::memcpy(factors.data(), t.data, factors.size() * sizeof(float));
  const double largest = *std::max_element(factors.begin(), factors.end());
  check(std::isfinite(largest) && largest >= 1.0, "{}: rope_freqs.weight's largest factor is {}, expected at least 1",
        origin, largest);
  auto gives_the_factors = [&](int64_t context, double high) {
    ModelConfig candidate = c;
    candidate.rope_llama3_factor = largest, candidate.rope_llama3_low_freq_factor = 1.0;
    candidate.rope_llama3_high_freq_factor = high, candidate.rope_original_context = context;
    const std::vector<float> want = llama3_rope_factors(candidate);
    for (int64_t i = 0; i < half; ++i)
      if (!(std::abs(want[i] - factors[i]) <= 1e-5 * want[i])) return false;
    c = candidate;
    return true;
  };
  // The smooth band's line through its first and last frequency.
  std::vector<std::pair<double, double>> band;  // (1/λ_i, s_i)
  for (int64_t i = 0; i < half; ++i) {
    const double f = factors[i];
    if (f > 1.0 + 1e-4 && f < largest * (1.0 - 1e-4)) {
      const double inverse_wavelength = kernels::rope_frequency(i, c.d_head(), {.base = c.rope_base}) / (2.0 * M_PI);
      band.emplace_back(inverse_wavelength, (1.0 / f - 1.0 / largest) / (1.0 - 1.0 / largest));
    }
  }
  if (band.size() >= 2) {
    const auto [x0, s0] = band.front();
    const auto [x1, s1] = band.back();
    const double a = (s1 - s0) / (x1 - x0), b = s0 - a * x0;  // s = a/λ + b = (L0/λ − 1)/(high − 1)
    if (b < 0.0) {
      const double high = std::round((1.0 - 1.0 / b) * 1e6) / 1e6;  // 4, not 4 and a rounding error
      const double context = std::round(-a / b);
      if (context >= 1.0 && context <= 1e9 && gives_the_factors(static_cast<int64_t>(context), high)) return;
    }
  }
  for (const double high : {4.0, 2.0, 8.0})
    for (int64_t context = 1; context <= (int64_t{1} << 24); context *= 2)
      if (gives_the_factors(context, high)) return;
  throw Error(fmt::format("{}: rope_freqs.weight holds RoPE factors that Llama 3.1's scaling (factor {}) does not give "
                          "for any trained context; load the Hugging Face checkpoint instead",
                          origin, largest));
}

// Gemma 3's sliding-window layers: `attention.sliding_window_pattern` is a period k (layers k−1, 2k−1, ... see
// everything) or, in later files, one flag a layer (true: sliding), which must follow one period; 6 when absent.
int64_t gemma3_pattern(const gguf::Reader& file, const std::string& key, int64_t n_layers) {
  const std::string origin = file.path().string();
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return 6;
  if (v->type != gguf::ValueType::Array) return static_cast<int64_t>(file.get_uint(key));
  check(v->element_type == gguf::ValueType::Bool && static_cast<int64_t>(v->array.size()) == n_layers,
        "{}: {} is an array of {} {}, expected one bool a layer ({})", origin, key, v->array.size(),
        gguf::value_type_name(v->element_type), n_layers);
  int64_t k = 0;
  for (int64_t i = 0; i < n_layers && k == 0; ++i)
    if (!v->array[static_cast<size_t>(i)].b) k = i + 1;
  for (int64_t i = 0; i < n_layers; ++i)
    check(v->array[static_cast<size_t>(i)].b == (k == 0 || (i + 1) % k != 0),
          "{}: {}: layer {} breaks the period {} of full-attention layers; Attend's sliding windows follow one", origin,
          key, i, k);
  return k;
}

}  // namespace

namespace {

// Whether the LM head is the token embedding: no output.weight, or one that holds the same bytes (llama.cpp's GPT-2
// converter writes the tied matrix twice; read as two, a tied model came back untied, its head a second copy).
bool output_is_the_embedding(const gguf::Reader& file) {
  const gguf::TensorInfo* output = file.tensor("output.weight");
  if (output == nullptr) return true;
  const gguf::TensorInfo* embedding = file.tensor("token_embd.weight");
  return embedding != nullptr && output->type == embedding->type && output->dims == embedding->dims &&
         output->bytes == embedding->bytes && std::memcmp(output->data, embedding->data, output->bytes) == 0;
}

}  // namespace

ModelConfig config_from_gguf(const gguf::Reader& file) {
  const std::string origin = file.path().string();
  const std::string arch = file.get_string("general.architecture");
  check(arch == "gpt2" || arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma3" || arch == "bert",
        "{}: general.architecture '{}': Attend reads GGUF models of the architectures gpt2, llama (Mistral's files "
        "are llama), qwen2, qwen3, gemma3 and bert", origin, arch);
  auto key = [&](const char* name) { return arch + "." + name; };
  check(file.string_or("general.type", "model") != "adapter", "{}: a GGUF LoRA adapter, not a model (llama.cpp applies it with --lora to its base; "
          "Attend's --lora takes PEFT adapter directories)", origin);
  const gguf::TensorInfo* embd = file.tensor("token_embd.weight");
  check(embd != nullptr && embd->dims.size() == 2, "{}: no 2-dimensional tensor 'token_embd.weight'", origin);
  ModelConfig c;
  c.architecture = Architecture::Decoder;
  c.vocab_size = embd->dims[1];
  c.d_model = static_cast<int64_t>(file.get_uint(key("embedding_length")));
  c.n_layers = static_cast<int64_t>(file.get_uint(key("block_count")));
  c.n_heads = static_cast<int64_t>(file.get_uint(key("attention.head_count")));
  c.d_ff = static_cast<int64_t>(file.get_uint(key("feed_forward_length")));
  c.max_seq_len = static_cast<int64_t>(file.get_uint(key("context_length")));
  c.tie_embeddings = output_is_the_embedding(file);
  if (arch == "gpt2") {
    c.position = PositionKind::Learned, c.norm = NormKind::LayerNorm, c.bias = true, c.activation = FfnKind::GELUTanh;
    c.norm_eps = file.float_or(key("attention.layer_norm_epsilon"), 1e-5);
    return validated(c, origin);
  }
  if (arch == "bert") {
    // BERT: post-LN blocks with biases, learned positions and token types, a norm over the embeddings, exact GELU
    // (BERT's own; llama.cpp computes its tanh approximation), pooled by pooling_type.
    check(!file.bool_or(key("attention.causal"), false), "{}: {} is true: a BERT encoder attends both ways", origin,
          key("attention.causal"));
    c.architecture = Architecture::Encoder, c.position = PositionKind::Learned, c.norm = NormKind::LayerNorm;
    c.pre_norm = false, c.bias = true, c.embedding_norm = true, c.activation = FfnKind::GELU, c.mlm_head = false;
    c.norm_eps = file.float_or(key("attention.layer_norm_epsilon"), 1e-12);
    const gguf::TensorInfo* types = file.tensor("token_types.weight");
    c.type_vocab_size = types != nullptr && types->dims.size() == 2 ? types->dims[1] : 0;
    const uint64_t pooling = file.uint_or(key("pooling_type"), 2);  // llama.cpp's: 1 mean, 2 cls
    check(pooling == 1 || pooling == 2, "{}: {} is {}: Attend pools by mean (1) or the first token (2)", origin,
          key("pooling_type"), pooling);
    c.pooling = pooling == 1 ? Pooling::Mean : Pooling::CLS;
    c.pooler = file.tensor("cls.weight") != nullptr;
    if (const gguf::TensorInfo* out = file.tensor("cls.output.weight")) {
      check(c.pooler && out->dims.size() == 2, "{}: a classifier (cls.output.weight) without its pooler (cls.weight)",
            origin);
      c.n_classes = out->dims[1];
      if (file.find(key("classifier.output_labels")) != nullptr) {
        c.class_names = file.get_strings(key("classifier.output_labels"));
        check(static_cast<int64_t>(c.class_names.size()) == c.n_classes, "{}: {} names {} classes, the classifier has {}",
              origin, key("classifier.output_labels"), c.class_names.size(), c.n_classes);
      }
    }
    return validated(c, origin);
  }
  c.position = PositionKind::RoPE, c.norm = NormKind::RMSNorm, c.bias = false, c.activation = FfnKind::SwiGLU;
  c.n_kv_heads = static_cast<int64_t>(file.uint_or(key("attention.head_count_kv"), static_cast<uint64_t>(c.n_heads)));
  c.norm_eps = file.float_or(key("attention.layer_norm_rms_epsilon"), 1e-5);
  c.rope_base = file.float_or(key("rope.freq_base"), 10000.0);
  // A head of key_length values (Qwen3's and Gemma's head_dim), d_model / heads when absent; RoPE turns all of it.
  check(c.n_heads > 0, "{}: {} is 0; a model has at least one head", origin, key("attention.head_count"));
  const uint64_t plain = static_cast<uint64_t>(c.d_model / c.n_heads);
  const uint64_t head = file.uint_or(key("attention.key_length"), plain);
  check(head > 0 && head <= (1u << 16) && file.uint_or(key("attention.value_length"), head) == head,
        "{}: {} is {} and {} {}: Attend needs keys and values of one head size", origin, key("attention.key_length"),
        head, key("attention.value_length"), file.uint_or(key("attention.value_length"), head));
  if (head != plain) c.head_dim = static_cast<int64_t>(head);
  check(file.uint_or(key("rope.dimension_count"), head) == head,
        "{}: {}: RoPE on part of each head is not supported (Attend rotates the whole head)", origin,
        key("rope.dimension_count"));
  // RoPE scaling: linear (positions × 1/factor; Gemma 3's global layers only), or Llama 3.1's factors as a tensor.
  const std::string scaling = file.string_or(key("rope.scaling.type"), "none");
  if (scaling == "linear") {
    const double factor = file.float_or(key("rope.scaling.factor"), 1.0);
    check(factor >= 1.0, "{}: {} is {}, expected at least 1", origin, key("rope.scaling.factor"), factor);
    c.rope_position_scale = 1.0 / factor;
  } else {
    check(scaling == "none", "{}: {} '{}': Attend reads none and linear RoPE scaling from GGUF (yarn, longrope not "
          "yet)", origin, key("rope.scaling.type"), scaling);
  }
  if (const gguf::TensorInfo* freqs = file.tensor("rope_freqs.weight")) read_llama3_factors(file, *freqs, c);
  c.sliding_window = static_cast<int64_t>(file.uint_or(key("attention.sliding_window"), 0));
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3" || arch == "gemma3";
  if (arch == "gemma3") {
    // Gemma 3: GELU-gated FFN, two more norms a block, head norms, embeddings × √d_model, local layers with their
    // own unscaled base. llama.cpp's converter stores every norm's 1 + γ (read back as γ, norm_unit_offset).
    c.activation = FfnKind::GeGLU, c.sandwich_norm = true, c.norm_unit_offset = true, c.scale_embeddings = true;
    c.rope_local_base = file.float_or(key("rope.freq_base_swa"), 10000.0);
    if (c.sliding_window > 0) {  // a period past the last layer: every layer slides (pattern 0)
      const int64_t k = gemma3_pattern(file, key("attention.sliding_window_pattern"), c.n_layers);
      c.sliding_window_pattern = k > c.n_layers ? 0 : k;
    }
    const double softcap = file.float_or(key("final_logit_softcapping"), 0.0);
    check(softcap == 0.0, "{}: {} is {}: logit soft-capping is not supported", origin, key("final_logit_softcapping"),
          softcap);
    // Scores scaled as llama.cpp scales them (gemma3_attention_scale); 0 keeps Attend's 1/√head_dim.
    const double scale = gemma3_attention_scale(c);
    if (scale != 1.0 / std::sqrt(static_cast<double>(c.d_head()))) c.attention_scale = scale;
  }
  return validated(c, origin);
}

Model load_gguf_model(const fs::path& path) {
  const gguf::Reader file(path);
  const std::string origin = path.string();
  const ModelConfig c = config_from_gguf(file);
  const std::string arch = file.get_string("general.architecture");
  // Each parameter's pieces (Q, K, V make one matrix), checked against the configuration.
  struct Piece {
    const gguf::TensorInfo* tensor;
    GgufPlace place;
  };
  std::map<std::string, std::vector<Piece>> pieces;
  std::set<std::string> used;
  for (const GgufPlace& t : gguf_places(c, arch, !c.tie_embeddings)) {
    const gguf::TensorInfo* info = file.tensor(t.gguf);
    check(info != nullptr, "{}: no tensor '{}', which a {} model of this configuration has", origin, t.gguf, arch);
    check(is_float_type(info->type) || weight_type_of(info->type).has_value(),
          "{}: tensor '{}' is {}: Attend reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K",
          origin, t.gguf, type_name(info->type));
    pieces[t.attend].push_back({info, t});
    used.insert(t.gguf);
  }
  if (c.tie_embeddings && file.tensor("output.weight") != nullptr) used.insert("output.weight");  // the embedding's copy
  for (const gguf::TensorInfo& t : file.tensors())  // rope_freqs: read into the configuration
    check(used.contains(t.name) || (t.name == "rope_freqs.weight" && c.rope_llama3_factor > 0.0),
          "{}: unexpected tensor '{}': not part of a {} model of this configuration", origin, t.name, arch);
  // A matrix every piece of which is quantized is used as its blocks, where they lie in the file, when the model
  // multiplies it or looks its rows up (the token table); it gets no float values.
  auto all_quantized = [&](const std::string& name) {
    const auto it = pieces.find(name);
    return it != pieces.end() && std::all_of(it->second.begin(), it->second.end(), [](const Piece& x) {
             return weight_type_of(x.tensor->type).has_value();
           });
  };
  // A matrix the file stores in one 16-bit type (an F16 or BF16 file's) is run as it is stored: packed in that
  // type, without float values, as quantized blocks are (its values were that type's already, so nothing is
  // rounded): decoding reads 2 bytes a weight, and the model holds them, as llama.cpp does, not 2 + 4.
  auto all_half = [&](const std::string& name) -> std::optional<WeightType> {
    const auto it = pieces.find(name);
    if (it == pieces.end()) return std::nullopt;
    for (const WeightType half : {WeightType::F16, WeightType::BF16})
      if (std::all_of(it->second.begin(), it->second.end(),
                      [&](const Piece& x) { return x.tensor->type == gguf_type_id(half); }))
        return half;
    return std::nullopt;
  };
  Model model = Model::for_loading(c, [&](const Parameter& p) {
    return p.value.rank() == 2 && (is_projection(p.role) || p.name == "embed.tokens.weight") &&
           (all_quantized(p.name) || all_half(p.name));
  });
  const int64_t D = c.d_head();
  for (auto& [name, list] : pieces) {
    Parameter* p = model.find(name);
    check(p != nullptr, "{}: tensor '{}' has no place in the model", origin, list.front().place.gguf);
    const int64_t C = p->value.rank() == 1 ? 1 : p->value.size(-1);
    int64_t covered = 0;
    for (const Piece& piece : list) {
      // A vector's "rows" are its values.
      const std::vector<int64_t> dims = p->value.rank() == 1 ? std::vector<int64_t>{piece.place.rows}
                                                             : std::vector<int64_t>{C, piece.place.rows};
      check(piece.tensor->dims == dims, "{}: tensor '{}' has dims [{}], the configuration implies [{}]", origin,
            piece.place.gguf, fmt::join(piece.tensor->dims, ", "), fmt::join(dims, ", "));
      covered += piece.place.rows;
    }
    check(covered == p->numel() / C, "{}: '{}' is filled by {} rows of {}", origin, name, covered, p->numel() / C);
    std::sort(list.begin(), list.end(), [](const Piece& a, const Piece& b) { return a.place.row < b.place.row; });
    if (p->has_values()) {
      for (const Piece& piece : list) {
        float* rows = p->value.data() + piece.place.row * C;
        values_of(file, *piece.tensor, rows);
        release_pages(piece.tensor->data, static_cast<int64_t>(piece.tensor->bytes));
        if (piece.place.rope_heads > 0) {  // Hugging Face's halves to Attend's pairs
          const std::vector<float> hf(rows, rows + piece.place.rows * C);
          rope_rows_from_hf(rows, hf.data(), piece.place.rope_heads, D, C);
        }
      }
      if (c.norm_unit_offset && is_norm_gain(p->role))  // the file's 1 + γ (exact for gains of 1/2 and up)
        for (float& g : p->value.span()) g -= 1.0f;
      continue;
    }
    if (const std::optional<WeightType> half = all_half(name)) {  // 16-bit rows, Q and K's RoPE halves to pairs
      p->storage = *half;
      p->packed.resize(static_cast<size_t>(p->numel()));
      for (const Piece& piece : list) {
        uint16_t* rows = p->packed.data() + piece.place.row * C;
        if (piece.place.rope_heads > 0)
          rope_row_bytes_from_hf(rows, piece.tensor->data, piece.place.rope_heads, D, C * 2);
        else
          std::memcpy(rows, piece.tensor->data, piece.tensor->bytes);
        release_pages(piece.tensor->data, static_cast<int64_t>(piece.tensor->bytes));  // read once, into our copy
      }
      continue;
    }
    // Blocks: each piece a segment where it lies in the mapping; rows whose RoPE halves become pairs (qwen2,
    // qwen3's Q and K) are moved whole into memory of their own.
    std::vector<QuantizedRows> segments;
    for (const Piece& piece : list) {
      const WeightType type = *weight_type_of(piece.tensor->type);
      const auto bytes = static_cast<int64_t>(piece.tensor->bytes);
      if (piece.place.rope_heads > 0) {
        std::vector<uint8_t> moved(static_cast<size_t>(bytes));
        rope_row_bytes_from_hf(moved.data(), piece.tensor->data, piece.place.rope_heads, D, bytes / piece.place.rows);
        segments.push_back(QuantizedRows::owning(piece.place.rows, type, std::move(moved)));
        continue;
      }
      // Rows right after the previous piece's in the file, of its type (Q, K and V of one type): one segment.
      if (!segments.empty() && segments.back().owner == file.mapping() && segments.back().type == type &&
          segments.back().data + segments.back().bytes == piece.tensor->data) {
        segments.back().rows += piece.place.rows, segments.back().bytes += bytes;
        continue;
      }
      QuantizedRows s;
      s.rows = piece.place.rows, s.type = type, s.data = piece.tensor->data, s.bytes = bytes, s.owner = file.mapping();
      segments.push_back(std::move(s));
    }
    nn::set_quantized(*p, std::move(segments));
    // Rows repacked eight at a time are read from the copy: their pages of the file leave this process's
    // resident set (the page cache keeps them; an export that reads the blocks faults them back in).
    for (const QuantizedRows& s : p->quantized)
      if (!s.repacked.empty() && s.owner == file.mapping()) release_pages(s.data, s.rows / 8 * 8 * (s.bytes / s.rows));
  }
  return model;
}

// The pre-tokenizer regexes of llama.cpp's BPE vocabularies by tokenizer.ggml.pre (those of the models' own
// tokenizer.json files).
const char* gguf_split_regex(std::string_view pre) {
  if (pre == "llama-bpe" || pre == "llama3")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pre == "qwen2")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return nullptr;
}

std::optional<std::string> gguf_chat_template(const fs::path& path) {
  const gguf::Reader file(path);
  if (file.find("tokenizer.chat_template") == nullptr) return std::nullopt;
  std::string source = file.get_string("tokenizer.chat_template");
  check(tokenize::is_valid_utf8(source), "{}: tokenizer.chat_template is not valid UTF-8", path.string());
  return source;
}

namespace {

// Protobuf's wire format, as much as a SentencePiece ModelProto needs (sentencepiece.cpp reads it).
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_uint(std::string& out, int field, uint64_t v) {
  put_key(out, field, 0);
  put_varint(out, v);
}

// A llama-kind vocabulary (SentencePiece BPE: pieces with scores and types) as the ModelProto SentencePiece's
// own tokenizer.model would hold, for Tokenizer::from_sentencepiece. llama.cpp's SPM tokenizer merges by score
// (SentencePiece's BPE), prefixes a space unless tokenizer.ggml.add_space_prefix is false, keeps repeated spaces
// unless tokenizer.ggml.remove_extra_whitespaces is true, and falls back to <0xXX> byte pieces.
std::string sentencepiece_proto(const gguf::Reader& file, const std::vector<std::string>& tokens,
                                const std::vector<int64_t>& types) {
  const std::string origin = file.path().string();
  const std::vector<float> scores =
      file.find("tokenizer.ggml.scores") ? file.get_floats("tokenizer.ggml.scores") : std::vector<float>{};
  check(scores.size() == tokens.size(), "{}: tokenizer.ggml.scores has {} entries, tokens {}", origin, scores.size(),
        tokens.size());
  check(types.size() == tokens.size(), "{}: a llama vocabulary needs tokenizer.ggml.token_type for each token", origin);
  std::string proto;
  bool bytes = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    check(types[i] >= 1 && types[i] <= 6, "{}: tokenizer.ggml.token_type[{}] is {}, expected 1-6", origin, i, types[i]);
    bytes = bytes || types[i] == 6;
    std::string piece;
    put_bytes(piece, 1, tokens[i]);
    uint32_t bits;
    std::memcpy(&bits, &scores[i], 4);
    put_key(piece, 2, 5);
    for (int b = 0; b < 4; ++b) piece.push_back(static_cast<char>(bits >> (8 * b)));
    put_uint(piece, 3, static_cast<uint64_t>(types[i]));
    put_bytes(proto, 1, piece);
  }
  std::string trainer;
  put_uint(trainer, 3, 2);  // model_type BPE
  put_uint(trainer, 35, bytes ? 1 : 0);  // byte_fallback
  put_bytes(proto, 2, trainer);
  std::string normalizer;
  put_bytes(normalizer, 1, "identity");
  put_uint(normalizer, 3, file.bool_or("tokenizer.ggml.add_space_prefix", true) ? 1 : 0);
  put_uint(normalizer, 4, file.bool_or("tokenizer.ggml.remove_extra_whitespaces", false) ? 1 : 0);
  put_uint(normalizer, 5, 1);  // escape whitespaces as ▁
  put_bytes(proto, 3, normalizer);
  return proto;
}

// A bert-kind vocabulary (WordPiece in llama.cpp's "phantom space" form: a word's first piece written with a
// leading ▁, a continuing piece bare, control tokens as they are) as the tokenizer.json of BERT's uncased
// pipeline, which llama.cpp's WPM tokenizer follows: BertNormalizer (lowercase, accents stripped, Chinese
// characters split), BertPreTokenizer, WordPiece with ##, and [CLS] … [SEP] around a text.
std::string wordpiece_json(const gguf::Reader& file, const std::vector<std::string>& tokens,
                           const std::vector<int64_t>& types) {
  const std::string origin = file.path().string();
  check(types.size() == tokens.size(), "{}: a bert vocabulary needs tokenizer.ggml.token_type for each token", origin);
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  const std::string space = "\xe2\x96\x81";  // ▁
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string piece = tokens[i];
    if (types[i] == 3) {  // control: [CLS], [SEP], [PAD], [MASK], [UNK]
      added.push_back({{"id", i}, {"content", piece}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", true}});
    } else if (piece.starts_with(space)) {
      piece = piece.substr(space.size());
    } else {
      piece = "##" + piece;
    }
    check(!vocab.contains(piece), "{}: tokenizer.ggml.tokens[{}] is '{}', which another token already is as WordPiece",
          origin, i, piece);
    vocab[piece] = i;
  }
  auto token_of = [&](const char* key, const char* fallback) -> std::string {
    const std::string k = fmt::format("tokenizer.ggml.{}", key);
    if (file.find(k) == nullptr) return fallback;
    const uint64_t id = file.get_uint(k);
    check(id < tokens.size(), "{}: {} is {}, past the {} tokens", origin, k, id, tokens.size());
    return tokens[id];
  };
  // llama.cpp's WPM tokenizer starts a text with the BOS id (101, BERT's [CLS], when the file names none) and
  // ends it with the separator's (102).
  const std::string cls = token_of("cls_token_id", token_of("bos_token_id", tokens.size() > 101 ? tokens[101].c_str() : "[CLS]").c_str());
  const std::string sep = token_of("seperator_token_id", tokens.size() > 102 ? tokens[102].c_str() : "[SEP]");
  const std::string unk = token_of("unknown_token_id", "[UNK]");
  check(vocab.contains(cls) && vocab.contains(sep) && vocab.contains(unk),
        "{}: a bert vocabulary needs its [CLS], [SEP] and [UNK] tokens ('{}', '{}', '{}')", origin, cls, sep, unk);
  auto special = [&](const std::string& t) {
    return nlohmann::json{{"id", t}, {"ids", {vocab[t]}}, {"tokens", {t}}};
  };
  auto piece = [](const char* kind, const std::string& id, int type) {
    return nlohmann::json{{kind, {{"id", id}, {"type_id", type}}}};
  };
  const nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                      {"strip_accents", nullptr}, {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {piece("SpecialToken", cls, 0), piece("Sequence", "A", 0), piece("SpecialToken", sep, 0)}},
                          {"pair", {piece("SpecialToken", cls, 0), piece("Sequence", "A", 0), piece("SpecialToken", sep, 0),
                                    piece("Sequence", "B", 1), piece("SpecialToken", sep, 1)}},
                          {"special_tokens", {{cls, special(cls)}, {sep, special(sep)}}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", unk}, {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100}, {"vocab", std::move(vocab)}}},
  };
  return j.dump();
}

}  // namespace

std::optional<Tokenizer> load_gguf_tokenizer(const fs::path& path) {
  const gguf::Reader file(path);
  const std::string origin = path.string();
  if (file.find("tokenizer.ggml.model") == nullptr) return std::nullopt;
  const std::string kind = file.get_string("tokenizer.ggml.model");
  check(kind == "gpt2" || kind == "llama" || kind == "bert", "{}: tokenizer.ggml.model '{}': Attend reads GGUF "
        "tokenizers of kinds gpt2 (byte-level BPE), llama (SentencePiece) and bert (WordPiece) so far; give a "
        "tokenizer.json with --tokenizer, or --prompt-ids", origin, kind);
  const std::vector<std::string> tokens = file.get_strings("tokenizer.ggml.tokens");
  const std::vector<std::string> merges =
      file.find("tokenizer.ggml.merges") ? file.get_strings("tokenizer.ggml.merges") : std::vector<std::string>{};
  const std::vector<int64_t> types =
      file.find("tokenizer.ggml.token_type") ? file.get_ints("tokenizer.ggml.token_type") : std::vector<int64_t>{};
  check(types.empty() || types.size() == tokens.size(), "{}: tokenizer.ggml.token_type has {} entries, tokens {}",
        origin, types.size(), tokens.size());
  // GGUF's strings are UTF-8, and a vocabulary is rebuilt as JSON (or protobuf strings), which holds nothing else.
  for (const auto& [key, list] : {std::pair{"tokenizer.ggml.tokens", &tokens}, {"tokenizer.ggml.merges", &merges}})
    for (size_t i = 0; i < list->size(); ++i)
      check(tokenize::is_valid_utf8((*list)[i]), "{}: {}[{}] is not valid UTF-8", origin, key, i);
  const std::string pre = file.string_or("tokenizer.ggml.pre", "gpt-2");
  // The special tokens' roles, and whether a prompt starts with BOS (llama.cpp's defaults: yes for SentencePiece
  // and Llama 3's BPE, no for other BPE) or ends with EOS, as tokenizer_config.json says them.
  nlohmann::json config = nlohmann::json::object();
  for (const auto& [key, role] : {std::pair{"bos", "bos_token"}, {"eos", "eos_token"}, {"unknown", "unk_token"},
                                  {"padding", "pad_token"}}) {
    const std::string id_key = fmt::format("tokenizer.ggml.{}_token_id", key);
    if (file.find(id_key) == nullptr) continue;
    const uint64_t id = file.get_uint(id_key);
    check(id < tokens.size(), "{}: {} is {}, past the {} tokens", origin, id_key, id, tokens.size());
    config[role] = tokens[id];
  }
  const bool add_bos = file.bool_or("tokenizer.ggml.add_bos_token", kind == "llama" || pre == "llama-bpe" || pre == "llama3");
  const bool add_eos = file.bool_or("tokenizer.ggml.add_eos_token", false);
  // (A bert vocabulary's [CLS] … [SEP] come from its post-processor, wordpiece_json.)
  if (kind != "bert" && ((add_bos && config.contains("bos_token")) || (add_eos && config.contains("eos_token"))))
    config["add_bos_token"] = add_bos && config.contains("bos_token"), config["add_eos_token"] = add_eos && config.contains("eos_token");
  auto configured = [&](Tokenizer t) {
    t.apply_config(config.dump(), origin + " (tokenizer.ggml.*_token_id)");
    return t;
  };
  if (kind == "llama") return configured(Tokenizer::from_sentencepiece(sentencepiece_proto(file, tokens, types), origin + " (tokenizer.ggml.*)"));
  if (kind == "bert") return configured(Tokenizer::from_json(wordpiece_json(file, tokens, types), origin + " (tokenizer.ggml.*)"));
  // The vocabulary as a tokenizer.json, which Attend's Hugging Face pipeline reads.
  // (nlohmann::json, not ordered_json: an ordered object finds each key by a linear search, and a vocabulary of
  // 128k tokens took seconds so.)
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    // Types (llama.cpp's llama_token_type): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    if (!types.empty() && (types[i] == 3 || types[i] == 4))
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", types[i] == 3}});
  }
  nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                       {"use_regex", true}};
  nlohmann::json pre_tokenizer;
  if (pre == "gpt-2" || pre == "default") {
    pre_tokenizer = byte_level;
  } else if (const char* regex = gguf_split_regex(pre)) {
    nlohmann::json split = {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"},
                                    {"invert", false}};
    byte_level["use_regex"] = false;
    pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
  } else {
    throw Error(fmt::format("{}: tokenizer.ggml.pre '{}': Attend knows the pre-tokenizers gpt-2, llama-bpe and qwen2 so "
                            "far; give a tokenizer.json with --tokenizer, or --prompt-ids", origin, pre));
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", pre == "llama-bpe" || pre == "llama3"}, {"vocab", std::move(vocab)}, {"merges", merges}}},
  };
  return configured(Tokenizer::from_json(j.dump(), origin + " (tokenizer.ggml.*)"));
}

int load_gguf_lora(Model& model, const fs::path& path, const std::string& name, double multiplier) {
  const gguf::Reader file(path);
  const std::string origin = path.string();
  const std::string type = file.string_or("general.type", ""), kind = file.string_or("adapter.type", "");
  check(type == "adapter", "{}: not a GGUF LoRA adapter (general.type '{}', expected 'adapter'): a model file is "
        "--model's", origin, type);
  check(kind == "lora", "{}: a GGUF adapter of type '{}'; Attend reads LoRA adapters ('lora')", origin, kind);
  const ModelConfig& c = model.config();
  std::string arch;
  try {
    arch = gguf_architecture(c);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: a GGUF LoRA needs a model of one of llama.cpp's layouts ({})", origin, e.what()));
  }
  check(arch != "bert", "{}: llama.cpp's LoRA adapters are for generating models (gpt2, llama, qwen2, qwen3, "
        "gemma3); this model is a bert encoder", origin);
  const std::string file_arch = file.get_string("general.architecture");
  check(file_arch == arch, "{}: an adapter for {} models; this model is {}", origin, file_arch, arch);
  const double alpha = file.float_or("adapter.lora.alpha", 0.0);
  check(std::isfinite(alpha) && std::abs(alpha) <= 1e6, "{}: adapter.lora.alpha is {}, expected a finite number "
        "within ±10⁶", origin, alpha);

  // The file's pairs by base tensor, and each pair's place among the model's. A pair updates the rows of one
  // projection, or of several in a fused tensor (GPT-2's attn_qkv: q, k and v), its parts.
  struct Part {
    std::string target;
    int64_t first = 0, rows = 0;   // the part's rows of the tensor
    std::vector<int64_t> columns;  // the file's ranks (A's rows, B's columns) that make its adapter
  };
  struct Pair {
    const gguf::TensorInfo *a = nullptr, *b = nullptr;
    std::vector<Part> parts;
  };
  std::map<std::string, Pair> pairs;
  std::vector<std::string> skipped;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.ends_with("_norm.weight")) {  // norms a LoRA extraction carried along: llama.cpp skips them too
      skipped.push_back(t.name);
      continue;
    }
    const bool is_a = t.name.ends_with(".lora_a"), is_b = t.name.ends_with(".lora_b");
    check(is_a || is_b, "{}: tensor '{}' is neither a .lora_a nor a .lora_b", origin, t.name);
    check(is_float_type(t.type) || weight_type_of(t.type).has_value(), "{}: tensor '{}' is {}: Attend reads F32, F16, "
          "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K tensors", origin, t.name, type_name(t.type));
    Pair& p = pairs[t.name.substr(0, t.name.size() - 7)];
    (is_a ? p.a : p.b) = &t;
  }
  std::map<std::string, const GgufPlace*> place_of;
  const std::vector<GgufPlace> places = gguf_places(c, arch, arch == "gpt2" || !c.tie_embeddings);
  for (const GgufPlace& place : places) place_of[place.gguf] = &place;
  // The targets each tensor adapts: llama.cpp's names of the projections (GPT-2's fused attn_qkv holds q, k and v).
  const std::vector<std::pair<std::string, std::vector<std::string>>> kTargets = {
      {".attn_qkv.weight", {"q", "k", "v"}}, {".attn_q.weight", {"q"}},       {".attn_k.weight", {"k"}},
      {".attn_v.weight", {"v"}},             {".attn_output.weight", {"o"}}, {".ffn_up.weight", {"up"}},
      {".ffn_gate.weight", {"gate"}},        {".ffn_down.weight", {"down"}}};
  const int64_t q_rows = c.n_heads * c.d_head(), kv_rows = c.kv_heads() * c.d_head();
  std::set<std::string> targets;
  std::map<std::string, LoraConfig::Rank> per_module;  // each part at its own rank and the file's alpha
  for (auto& entry : pairs) {  // not a structured binding: the lambda below takes `base`, and clang cannot
    const std::string& base = entry.first;  // capture one under OpenMP
    Pair& p = entry.second;
    check(p.a != nullptr && p.b != nullptr, "{}: '{}' has {} but not {}", origin, base,
          p.a != nullptr ? ".lora_a" : ".lora_b", p.a != nullptr ? ".lora_b" : ".lora_a");
    const auto at = place_of.find(base);
    check(at != place_of.end(), "{}: '{}' is no tensor of a {} model of this shape", origin, base, arch);
    const auto t = std::find_if(kTargets.begin(), kTargets.end(), [&](const auto& k) { return base.ends_with(k.first); });
    const bool edge = base == "token_embd.weight" || base == "output.weight";
    check(t != kTargets.end(), "{}: an adapter on '{}'{}: Attend adapts the attention and FFN projections (attn_q, "
          "attn_k, attn_v, attn_qkv, attn_output, ffn_up, ffn_gate, ffn_down){}", origin, base,
          edge ? ", which llama.cpp applies" : "", edge ? "; merge this one into the model (llama-export-lora)" : "");
    const GgufPlace& place = *at->second;
    const Parameter* w = model.find(place.attend);
    check(w != nullptr, "{}: the model has no '{}' for '{}'", origin, place.attend, base);
    const int64_t in = w->value.size(1), out = place.rows;
    const int64_t r = p.a->dims.size() == 2 ? p.a->dims[1] : 0;
    check(p.a->dims == std::vector<int64_t>{in, r} && r >= 1 && p.b->dims == std::vector<int64_t>{r, out},
          "{}: '{}' has lora_a [{}] and lora_b [{}]; the model's tensor needs [{}, r] and [r, {}]", origin, base,
          fmt::join(p.a->dims, ", "), fmt::join(p.b->dims, ", "), in, out);
    check(r <= nn::kMaxLoraRank, "{}: '{}' has rank {}; at most {} is read", origin, base, r, nn::kMaxLoraRank);
    std::vector<int64_t> every(static_cast<size_t>(r));
    for (int64_t j = 0; j < r; ++j) every[static_cast<size_t>(j)] = j;
    if (t->second.size() == 1) {
      p.parts.push_back({t->second.front(), 0, out, every});
    } else {
      // A fused tensor's parts: q, k, v. Where each of B's columns is non-zero in one part's rows only (the
      // projections' own adapters stacked, as Attend writes them), each part takes its columns, at their number's
      // rank, and a part with none takes no adapter; a column zero in every row (it adds nothing) goes with the
      // nearest column before it that a part holds (after it, at the start), as stacked blocks lie. Else (an
      // adapter trained on the fused tensor, or B all zero) every part takes the whole pair.
      check(q_rows + 2 * kv_rows == out, "{}: '{}' has {} rows; q, k and v take {}", origin, base, out,
            q_rows + 2 * kv_rows);
      p.parts = {{"q", 0, q_rows, {}}, {"k", q_rows, kv_rows, {}}, {"v", q_rows + kv_rows, kv_rows, {}}};
      std::vector<float> b(static_cast<size_t>(out * r));
      values_of(file, *p.b, b.data());
      std::vector<Part*> owner(static_cast<size_t>(r), nullptr);  // the one part whose rows use column j
      bool disjoint = true;
      for (int64_t j = 0; j < r && disjoint; ++j)
        for (Part& part : p.parts)
          for (int64_t row = part.first; row < part.first + part.rows; ++row)
            if (b[static_cast<size_t>(row * r + j)] != 0.0f) {
              disjoint = disjoint && (owner[j] == nullptr || owner[j] == &part);
              owner[j] = &part;
              break;
            }
      const auto first_owned = std::find_if(owner.begin(), owner.end(), [](const Part* o) { return o != nullptr; });
      disjoint = disjoint && first_owned != owner.end();
      for (int64_t j = 0; j < r && disjoint; ++j) {
        if (owner[j] == nullptr) owner[j] = j == 0 ? *first_owned : owner[j - 1];
        owner[j]->columns.push_back(j);
      }
      for (Part& part : p.parts)
        if (!disjoint) part.columns = every;
      std::erase_if(p.parts, [](const Part& part) { return part.columns.empty(); });
    }
    for (const Part& part : p.parts) {
      // The update (alpha / r)·B·A of the file's r over the part's rank: alpha / rank is the part's scale, its B
      // columns times rank / r (alpha 0 or negative: a scale of 1, the file's scale in B; below).
      const auto rank = static_cast<int64_t>(part.columns.size());
      targets.insert(part.target);
      per_module[nn::lora_module_key(place.attend, part.target)] = {.r = rank,
                                                                    .alpha = alpha > 0.0 ? alpha : double(rank)};
    }
  }
  check(!pairs.empty(), "{}: a LoRA adapter without tensors", origin);
  if (!skipped.empty())
    log::warn("{}: {} norm tensor(s) skipped, as llama.cpp skips them (such as '{}')", origin, skipped.size(),
              skipped.front());

  // Each part at its rank with the file's alpha (alpha 0: the rank), so that the update is multiplier · (alpha /
  // r) · B·A, as llama.cpp's; what the file does not cover takes no adapter.
  LoraConfig lora;
  lora.dropout = 0.0;
  lora.targets = nn::in_target_order(targets);
  // A file with one rank on every block of each projection it adapts is a set as a LoRA run's own (config.json can
  // describe it: it saves, trains on); any other keeps its pairs module by module.
  if (const std::optional<LoraConfig::Rank> one = nn::one_rank_on_every_block(model, lora.targets, per_module))
    lora.r = one->r, lora.alpha = one->alpha;
  else
    lora.per_module = std::move(per_module);
  lora.name = name, lora.multiplier = multiplier;
  const int slot = model.add_lora(lora);
  for (const auto& [base, p] : pairs) {
    const GgufPlace& place = *place_of.at(base);
    const Parameter& w = *model.find(place.attend);
    const int64_t in = w.value.size(1), r = p.a->dims[1];
    std::vector<float> a(static_cast<size_t>(r * in)), b(static_cast<size_t>(place.rows * r));
    values_of(file, *p.a, a.data());
    values_of(file, *p.b, b.data());
    if (place.rope_heads > 0) {  // B's rows in Attend's order, as the weight's (qwen2, qwen3, gemma3)
      const std::vector<float> file_order = b;
      rope_rows_from_hf(b.data(), file_order.data(), place.rope_heads, c.d_head(), r);
    }
    for (const LowRankUpdate* u : nn::updates_on_rows(w, slot, place.row, place.rows, origin + ": " + base)) {
      const int64_t rows = u->B->value.size(0), first = u->row0 - place.row;
      const auto part = std::find_if(p.parts.begin(), p.parts.end(), [&](const Part& x) { return x.first == first; });
      check(part != p.parts.end() && part->rows == rows, "{}: '{}' is on rows the file's '{}' does not adapt", origin,
            u->A->name, base);
      const auto rank = static_cast<int64_t>(part->columns.size());
      check(u->A->value.size(0) == rank, "{}: '{}' took rank {} for the file's {}", origin, u->A->name,
            u->A->value.size(0), rank);
      // B's part as the part's own scale wants it: alpha / r of the file over alpha / rank; with alpha 0 the
      // scale is 1 in both; a negative alpha, which no scale of Attend's takes, goes into B whole.
      const double factor = alpha > 0.0 ? double(rank) / double(r) : alpha < 0.0 ? alpha / double(r) : 1.0;
      float* ua = u->A->value.data();
      float* ub = u->B->value.data();
      for (int64_t k = 0; k < rank; ++k) {
        const int64_t j = part->columns[static_cast<size_t>(k)];
        std::copy(a.data() + j * in, a.data() + (j + 1) * in, ua + k * in);
        for (int64_t row = 0; row < rows; ++row)
          ub[row * rank + k] = static_cast<float>(b[static_cast<size_t>((first + row) * r + j)] * factor);
      }
    }
  }
  log::info("{}: GGUF LoRA, {} tensor pairs, alpha {}", origin, pairs.size(), alpha);
  return slot;
}

}  // namespace attend::formats
