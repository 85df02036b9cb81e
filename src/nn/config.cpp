// ModelConfig: config.json in and out, and the consistency checks. Every field is listed once, in
// for_each_field; reading, writing and `--set` all walk that list.
#include <attend/error.h>
#include <attend/model.h>

#include "core/enum_names.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <span>
#include <utility>

namespace attend {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr EnumName<Architecture> kArchitectures[] = {
    {Architecture::Decoder, "decoder"}, {Architecture::Encoder, "encoder"}, {Architecture::EncoderDecoder, "encoder-decoder"}};
constexpr EnumName<NormKind> kNorms[] = {{NormKind::LayerNorm, "layernorm"}, {NormKind::RMSNorm, "rmsnorm"}};
constexpr EnumName<FfnKind> kFfns[] = {
    {FfnKind::ReLU, "relu"}, {FfnKind::GELU, "gelu"}, {FfnKind::GELUTanh, "gelu_tanh"}, {FfnKind::SwiGLU, "swiglu"}};
constexpr EnumName<PositionKind> kPositions[] = {{PositionKind::None, "none"},       {PositionKind::Learned, "learned"},
                                                 {PositionKind::Sinusoidal, "sinusoidal"}, {PositionKind::RoPE, "rope"},
                                                 {PositionKind::ALiBi, "alibi"},     {PositionKind::T5, "t5"}};
constexpr EnumName<Pooling> kPoolings[] = {{Pooling::CLS, "cls"}, {Pooling::Mean, "mean"}};
constexpr EnumName<InitScheme> kInits[] = {{InitScheme::GPT2, "gpt2"}, {InitScheme::Xavier, "xavier"}};

template <typename E>
std::span<const EnumName<E>> names_of();
template <> std::span<const EnumName<Architecture>> names_of() { return kArchitectures; }
template <> std::span<const EnumName<NormKind>> names_of() { return kNorms; }
template <> std::span<const EnumName<FfnKind>> names_of() { return kFfns; }
template <> std::span<const EnumName<PositionKind>> names_of() { return kPositions; }
template <> std::span<const EnumName<Pooling>> names_of() { return kPoolings; }
template <> std::span<const EnumName<InitScheme>> names_of() { return kInits; }

template <typename E>
const char* name_of(E value) {
  return enum_name<E>(names_of<E>(), value);
}

// "norm_placement" is a bool in the struct and a name in the file.
struct Placement {
  bool& pre_norm;
};

// Calls f(name, field) for every field of config.json, in the file's order.
template <typename Config, typename F>
void for_each_field(Config& c, F&& f) {
  f("architecture", c.architecture);
  f("vocab_size", c.vocab_size);
  f("d_model", c.d_model);
  f("n_layers", c.n_layers);
  f("n_decoder_layers", c.n_decoder_layers);
  f("n_heads", c.n_heads);
  f("n_kv_heads", c.n_kv_heads);
  f("d_ff", c.d_ff);
  f("ffn_multiple_of", c.ffn_multiple_of);
  f("activation", c.activation);
  f("max_seq_len", c.max_seq_len);
  f("position", c.position);
  f("rope_base", c.rope_base);
  f("rope_base_scale", c.rope_base_scale);
  f("rope_ntk_factor", c.rope_ntk_factor);
  f("rope_position_scale", c.rope_position_scale);
  f("t5_num_buckets", c.t5_num_buckets);
  f("t5_max_distance", c.t5_max_distance);
  f("norm", c.norm);
  f("norm_eps", c.norm_eps);
  Placement placement{c.pre_norm};
  f("norm_placement", placement);
  f("residual_scale", c.residual_scale);
  f("bias", c.bias);
  f("attention_scale", c.attention_scale);
  f("attention_kernel", c.attention_kernel);
  f("scale_embeddings", c.scale_embeddings);
  f("tie_embeddings", c.tie_embeddings);
  f("embedding_dropout", c.embedding_dropout);
  f("attention_dropout", c.attention_dropout);
  f("residual_dropout", c.residual_dropout);
  f("ffn_dropout", c.ffn_dropout);
  f("n_experts", c.n_experts);
  f("moe_top_k", c.moe_top_k);
  f("moe_capacity_factor", c.moe_capacity_factor);
  f("moe_aux_loss_weight", c.moe_aux_loss_weight);
  f("moe_normalize_weights", c.moe_normalize_weights);
  f("moe_every", c.moe_every);
  f("pooling", c.pooling);
  f("n_classes", c.n_classes);
  f("init", c.init);
  f("init_std", c.init_std);
  f("init_qk_scale", c.init_qk_scale);
  f("seed", c.seed);
}

// Reads one JSON value into a field, or says what was expected.
struct Reader {
  std::string_view origin;

  std::string where(const char* key) const { return fmt::format("{}: '{}'", origin, key); }

  template <typename T>
  void operator()(const char* key, T& field, const json& v) const {
    if constexpr (std::is_same_v<T, bool>) {
      check(v.is_boolean(), "{} is {}, expected true or false", where(key), v.dump());
      field = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      check(v.is_number_integer(), "{} is {}, expected an integer", where(key), v.dump());
      if constexpr (std::is_unsigned_v<T>) {
        check(v.is_number_unsigned(), "{} is {}, expected a non-negative integer", where(key), v.dump());
        field = v.get<T>();
      } else {
        const int64_t x = v.get<int64_t>();
        check(x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max(), "{} = {} is out of range",
              where(key), x);
        field = static_cast<T>(x);
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      check(v.is_number(), "{} is {}, expected a number", where(key), v.dump());
      field = v.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      check(v.is_string(), "{} is {}, expected a string", where(key), v.dump());
      field = v.get<std::string>();
    } else if constexpr (std::is_same_v<T, Placement>) {
      check(v.is_string(), "{} is {}, expected \"pre\" or \"post\"", where(key), v.dump());
      const auto s = v.get<std::string>();
      check(s == "pre" || s == "post", "{}: '{}', expected one of pre, post", where(key), s);
      field.pre_norm = s == "pre";
    } else {  // an enum
      check(v.is_string(), "{} is {}, expected a string", where(key), v.dump());
      field = parse_enum<T>(names_of<T>(), v.get<std::string>(), where(key));
    }
  }
};

template <typename T>
ordered_json to_value(const T& field) {
  if constexpr (std::is_same_v<T, Placement>)
    return field.pre_norm ? "pre" : "post";
  else if constexpr (std::is_enum_v<T>)
    return name_of(field);
  else
    return field;
}

}  // namespace

const char* architecture_name(Architecture a) { return name_of(a); }

int64_t ModelConfig::ffn_hidden() const {
  if (d_ff > 0) return d_ff;
  if (activation != FfnKind::SwiGLU) return 4 * d_model;
  // SwiGLU has three matrices instead of two: 2/3 of 4·d keeps the parameter count (001 §11).
  const int64_t m = ffn_multiple_of > 0 ? ffn_multiple_of : 1;
  const int64_t hidden = (8 * d_model + 2) / 3;  // ⌈8d/3⌉
  return (hidden + m - 1) / m * m;
}

int64_t ModelConfig::decoder_layers() const {
  return architecture == Architecture::EncoderDecoder && n_decoder_layers > 0 ? n_decoder_layers : n_layers;
}

void ModelConfig::validate() const {
  check(vocab_size > 0, "config: vocab_size must be positive, got {}", vocab_size);
  check(d_model > 0 && n_heads > 0, "config: d_model and n_heads must be positive, got d_model={} n_heads={}", d_model,
        n_heads);
  check(d_model % n_heads == 0, "config: d_model {} is not divisible by n_heads {}", d_model, n_heads);
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
        "config: RoPE rotates pairs of channels, so d_head = d_model / n_heads = {} must be even", d_head());
  check(position != PositionKind::Sinusoidal || d_model % 2 == 0,
        "config: sinusoidal positions pair sines and cosines, so d_model must be even, got {}", d_model);
  check(rope_base > 1.0 && rope_base_scale > 0.0 && rope_ntk_factor > 0.0 && rope_position_scale > 0.0,
        "config: rope_base must be > 1 and the RoPE scalings positive");
  check(t5_num_buckets >= 2 && t5_max_distance > t5_num_buckets / 4,
        "config: t5_num_buckets must be at least 2 and t5_max_distance above num_buckets/4, got {} and {}",
        t5_num_buckets, t5_max_distance);
  check(norm_eps > 0.0, "config: norm_eps must be positive, got {}", norm_eps);
  check(std::isfinite(residual_scale) && residual_scale > 0.0, "config: residual_scale must be positive, got {}",
        residual_scale);
  check(attention_scale >= 0.0, "config: attention_scale must be non-negative (0 means 1/√d_head), got {}",
        attention_scale);
  check(attention_kernel == "flash" || attention_kernel == "reference" || attention_kernel == "linear",
        "config: 'attention_kernel': '{}', expected one of flash, reference, linear", attention_kernel);
  check(attention_kernel != "linear" || (position == PositionKind::None || position == PositionKind::Learned ||
                                         position == PositionKind::Sinusoidal || position == PositionKind::RoPE),
        "config: the linear attention kernel takes no score bias, so position cannot be alibi or t5");
  check(attention_kernel != "linear" || architecture != Architecture::EncoderDecoder,
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
  check(n_classes == 0 || architecture == Architecture::Encoder,
        "config: n_classes applies to encoder models (a classification head), not {}", architecture_name(architecture));
  check(init_std > 0.0 && init_qk_scale > 0.0, "config: init_std and init_qk_scale must be positive");
}

std::string ModelConfig::to_json() const {
  ordered_json j = ordered_json::object();
  ModelConfig copy = *this;
  for_each_field(copy, [&](const char* key, auto& field) { j[key] = to_value(field); });
  return j.dump(2) + "\n";
}

ModelConfig ModelConfig::from_json(std::string_view text, std::string_view origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  check(j.is_object(), "{}: expected a JSON object of model options, found {}", origin, j.type_name());
  ModelConfig c;
  const Reader read{origin};
  std::vector<std::string> known;
  for_each_field(c, [&](const char* key, auto& field) {
    known.emplace_back(key);
    if (auto it = j.find(key); it != j.end()) read(key, field, *it);
  });
  for (const auto& [key, value] : j.items())
    check(std::find(known.begin(), known.end(), key) != known.end(),
          "{}: unknown option '{}' (docs/FORMATS.md lists the options of config.json)", origin, key);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  return c;
}

void ModelConfig::set(std::string_view key, std::string_view value) {
  json v;
  try {
    v = json::parse(value);
  } catch (const json::parse_error&) {
    v = std::string(value);  // a bare word: a name such as rmsnorm
  }
  bool found = false;
  const Reader read{"--set"};
  for_each_field(*this, [&](const char* k, auto& field) {
    if (key == k) {
      read(k, field, v);
      found = true;
    }
  });
  check(found, "--set: unknown option '{}' (docs/FORMATS.md lists the options of config.json)", key);
}

}  // namespace attend
