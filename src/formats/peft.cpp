// PEFT's LoRA files: adapter_config.json and adapter_model.safetensors, with PEFT's tensor names
// (base_model.model.<the Hugging Face module>.lora_A.weight, A (r, in) and B (out, r)). The Llama family's
// layout so far (Llama, Mistral, Qwen2, Qwen3, Gemma 3: model.layers.N.self_attn.q_proj, mlp.up_proj, ...):
// B's rows of q_proj and k_proj are in Hugging Face's order, permuted per head as the weights are
// (hf_llama.h), A's are not (A mixes the input channels, which RoPE does not touch).
#include "formats/hf_llama.h"

#include "core/json_fields.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/safetensors.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <type_traits>

namespace attend {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::ordered_json;

// Attend's targets and the Llama layout's modules.
constexpr std::pair<const char*, const char*> kModules[] = {
    {"q", "self_attn.q_proj"}, {"k", "self_attn.k_proj"}, {"v", "self_attn.v_proj"}, {"o", "self_attn.o_proj"},
    {"up", "mlp.up_proj"},     {"gate", "mlp.gate_proj"}, {"down", "mlp.down_proj"}};

std::string module_of(const std::string& target) {
  for (const auto& [t, m] : kModules)
    if (target == t) return m;
  throw Error(fmt::format("peft: no Hugging Face module for target '{}'", target));
}

// The adapter of target `t` in block i: Attend's A and B names, PEFT's, and how many heads B's rows hold for
// RoPE's permutation (0: none).
struct AdapterNames {
  std::string a, b, peft_a, peft_b;
  int64_t rope_heads = 0;
};

AdapterNames names_of(const ModelConfig& c, int64_t i, const std::string& t, const std::string& name = "") {
  const std::string block = fmt::format("decoder.layers.{}.", i);
  const std::string suffix = name.empty() ? ".weight" : "." + name + ".weight";
  const std::string attend = t == "q" || t == "k" || t == "v" ? block + "attn.qkv." + t + "."
                             : t == "o"                         ? block + "attn.o."
                                                                : block + "ffn." + t + ".";
  const std::string peft = fmt::format("base_model.model.model.layers.{}.{}.", i, module_of(t));
  return {attend + "lora_A" + suffix, attend + "lora_B" + suffix, peft + "lora_A.weight", peft + "lora_B.weight",
          t == "q" ? c.n_heads : t == "k" ? c.kv_heads() : 0};
}

void check_llama_layout(const ModelConfig& c, const std::string& where) {
  check(c.architecture == Architecture::Decoder && c.position == PositionKind::RoPE,
        "{}: PEFT adapters are read and written for the Llama family's layout (a decoder with RoPE) so far; "
        "this model is {} with {} positions", where, architecture_name(c.architecture),
        c.position == PositionKind::Learned ? "learned" : "other");
}

}  // namespace

void save_peft_adapter(const Model& model, const fs::path& dir, const std::string& base_model) {
  const ModelConfig& c = model.config();
  check(model.has_lora(), "peft: the model has no LoRA adapters to save");
  check_llama_layout(c, dir.string());
  std::vector<Tensor> stored;
  stored.reserve(2 * static_cast<size_t>(c.n_layers) * c.lora_targets.size());
  std::vector<NamedTensor> tensors;
  for (int64_t i = 0; i < c.n_layers; ++i)
    for (const std::string& t : c.lora_targets) {
      if (t == "gate" && !is_gated(c.activation)) continue;
      const AdapterNames n = names_of(c, i, t);
      const Parameter* a = model.find(n.a);
      const Parameter* b = model.find(n.b);
      check(a != nullptr && b != nullptr, "peft: the model has no adapter '{}'", n.a);
      stored.push_back(a->value.clone());
      tensors.push_back({n.peft_a, &stored.back()});
      stored.emplace_back(b->value.shape());
      if (n.rope_heads > 0)
        formats::rope_rows_to_hf(stored.back().data(), b->value.data(), n.rope_heads, c.d_head(), c.lora_r);
      else
        std::copy(b->value.data(), b->value.data() + b->numel(), stored.back().data());
      tensors.push_back({n.peft_b, &stored.back()});
    }
  std::vector<std::string> modules;
  for (const std::string& t : c.lora_targets) {
    if (t == "gate" && !is_gated(c.activation)) continue;
    const std::string m = module_of(t);
    modules.push_back(m.substr(m.find('.') + 1));  // "q_proj": PEFT matches it against every module's name
  }
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"base_model_name_or_path", base_model.empty() ? json(nullptr) : json(base_model)},
                 {"r", c.lora_r},
                 {"lora_alpha", c.lora_alpha},
                 {"lora_dropout", c.lora_dropout},
                 {"target_modules", modules},
                 {"use_rslora", c.lora_rslora},
                 {"use_dora", false},
                 {"bias", "none"},
                 {"fan_in_fan_out", false},
                 {"modules_to_save", nullptr},
                 {"init_lora_weights", true},
                 {"inference_mode", true}};
  fs::create_directories(dir);
  write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir / "adapter_config.json", config.dump(2) + "\n");
}

LoraConfig parse_peft_config(std::string_view text, std::string_view origin) {
  const nlohmann::json j = parse_json(text, origin);
  const std::string where(origin);
  check(j.is_object(), "{}: expected a JSON object", where);
  auto get = [&](const char* key, auto fallback) {
    using T = decltype(fallback);
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    check(std::is_same_v<T, std::string> ? it->is_string()
          : std::is_same_v<T, bool>      ? it->is_boolean()
          : std::is_integral_v<T>        ? it->is_number_integer()
                                         : it->is_number(),
          "{}: '{}' is {}, of the wrong type", where, key, it->dump());
    return it->template get<T>();
  };
  check(get("peft_type", std::string()) == "LORA", "{}: peft_type is '{}', expected LORA", where,
        get("peft_type", std::string()));
  check(!get("use_dora", false), "{}: use_dora: DoRA adapters are not supported", where);
  check(get("bias", std::string("none")) == "none", "{}: bias '{}': adapters that train biases are not supported",
        where, get("bias", std::string()));
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    check(!j.contains(key) || j[key].is_null() || j[key].empty(), "{}: '{}' (ranks or alphas per module) is not "
          "supported", where, key);
  check(!j.contains("layers_to_transform") || j["layers_to_transform"].is_null(),
        "{}: layers_to_transform (adapters on some layers only) is not supported", where);
  check(!j.contains("modules_to_save") || j["modules_to_save"].is_null() || j["modules_to_save"].empty(),
        "{}: modules_to_save (whole modules trained beside the adapters) is not supported yet", where);
  check(j.contains("target_modules") && j["target_modules"].is_array(),
        "{}: target_modules must be a list of module names (a regular expression is not supported)", where);
  LoraConfig lora;
  lora.r = get("r", int64_t{8});
  lora.alpha = get("lora_alpha", 8.0);
  lora.rslora = get("use_rslora", false);
  lora.dropout = get("lora_dropout", 0.0);  // training's alone: a loaded adapter that trains on keeps it
  lora.targets.clear();
  for (const auto& m : j["target_modules"]) {
    check(m.is_string(), "{}: target_modules holds {}, expected names", where, m.dump());
    const std::string name = m.get<std::string>();
    std::string target;
    for (const auto& [t, module] : kModules) {
      const std::string full = module, last = full.substr(full.find('.') + 1);
      if (name == last || name == full) target = t;
    }
    check(!target.empty(), "{}: target module '{}' is not one of q_proj, k_proj, v_proj, o_proj, up_proj, gate_proj, "
          "down_proj", where, name);
    check(std::find(lora.targets.begin(), lora.targets.end(), target) == lora.targets.end(),
          "{}: target module '{}' is named twice", where, name);
    lora.targets.push_back(target);
  }
  try {
    lora.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  return lora;
}

int load_peft_adapter(Model& model, const fs::path& dir, const std::string& name, double multiplier) {
  const fs::path config_path = dir / "adapter_config.json";
  check(fs::exists(config_path), "{}: no adapter_config.json (a PEFT adapter directory holds it and "
        "adapter_model.safetensors)", dir.string());
  const std::string where = config_path.string();
  LoraConfig lora = parse_peft_config(read_file(config_path), where);
  lora.name = name, lora.multiplier = multiplier;
  const ModelConfig& c = model.config();
  check_llama_layout(c, where);
  const int slot = model.add_lora(lora);
  const SafetensorsReader file(dir / "adapter_model.safetensors");
  std::set<std::string> used;
  for (int64_t i = 0; i < c.n_layers; ++i)
    for (const std::string& t : lora.targets) {
      if (t == "gate" && !is_gated(c.activation)) continue;
      const AdapterNames n = names_of(model.config(), i, t, name);
      Parameter* a = model.find(n.a);
      Parameter* b = model.find(n.b);
      for (const auto& [name, p] : {std::pair{n.peft_a, a}, std::pair{n.peft_b, b}}) {
        const TensorInfo* info = file.find(name);
        check(info != nullptr, "{}: no tensor '{}', which r = {} on {} needs", file.origin(), name, lora.r, t);
        check(info->shape == p->value.shape(), "{}: '{}' has shape {}, the model needs {}", file.origin(), name,
              info->shape, p->value.shape());
        used.insert(name);
      }
      file.load_into(n.peft_a, a->value.view());
      if (n.rope_heads > 0) {
        const Tensor hf = file.load(n.peft_b);
        formats::rope_rows_from_hf(b->value.data(), hf.data(), n.rope_heads, c.d_head(), lora.r);
      } else {
        file.load_into(n.peft_b, b->value.view());
      }
    }
  for (const TensorInfo& t : file.tensors())
    check(used.count(t.name) > 0, "{}: tensor '{}' is not one of the adapters adapter_config.json describes",
          file.origin(), t.name);
  return slot;
}

}  // namespace attend
