// PEFT's LoRA files: adapter_config.json and adapter_model.safetensors, with PEFT's tensor names
// (base_model.model.<the Hugging Face module>.lora_A.weight, A (r, in) and B (out, r)) for each family's
// Hugging Face layout:
//
//   family              modules (block N)                                              Attend's targets
//   GPT-2               transformer.h.N.attn.c_attn (q, k and v in one), attn.c_proj,   q k v, o, up, down
//                       mlp.c_fc, mlp.c_proj
//   Llama, Mistral,     model.layers.N.self_attn.q_proj … o_proj, mlp.up_proj,         q, k, v, o, up, gate,
//   Qwen, Gemma 3       gate_proj, down_proj                                           down
//   BERT                [bert.]encoder.layer.N.attention.self.query, key, value,       q, k, v, o, up, down
//                       attention.output.dense, intermediate.dense, output.dense
//   T5                  encoder.block.N.layer.0.SelfAttention.q … o, layer.1.          q, k, v, o (self and
//                       DenseReluDense.wi (wi_0, wi_1 gated), wo; decoder.block.N.     cross), up, gate, down
//                       layer.1.EncDecAttention.q … o, layer.2.DenseReluDense
//
// A module holding several of Attend's adapters (GPT-2's c_attn with q and v adapted) is written as one adapter of
// their summed rank: A stacked, B block-diagonal. Every module is written with the file's one rank (the largest;
// smaller ones padded with zero rows of A and columns of B, which change nothing) and lora_alpha chosen so that
// PEFT's alpha / r (or alpha / √r) is the adapters' scale; adapters held module by module (LoraConfig::per_module)
// keep each module's rank and scale, the others' in rank_pattern and alpha_pattern. Which modules a file adapts, and
// at which rank and alpha, is PEFT's own choice (PeftModules: target_modules, exclude_modules, layers_to_transform,
// layers_pattern, rank_pattern, alpha_pattern). Reading a fused module gives each target it holds the
// module's A and its rows of B: the same W + s·B·A. B's rows of the Llama family's q_proj and k_proj are in
// Hugging Face's order, permuted per head as the weights are (hf_llama.h); A's are not.
//
// modules_to_save (modules trained whole beside the adapters: a classification head, the embeddings): classifier.*,
// the pooler's (bert.pooler.dense.*), the token embeddings (transformer.wte, model.embed_tokens, …) and an untied
// LM head, saved whole as PEFT saves them (base_model.model.classifier.weight).
#include "formats/gguf_model.h"
#include "formats/hf_bert.h"
#include "formats/hf_gpt2.h"
#include "formats/hf_llama.h"
#include "formats/hf_t5.h"
#include "nn/layers.h"
#include "nn/lora.h"
#include "tokenize/pretokenize.h"

#include "core/json_fields.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/safetensors.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

namespace attend {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::ordered_json;
using formats::RowMapping;

// One adaptable Hugging Face module: its path in the model class (without PEFT's "base_model.model."), its name
// without the block (what target_modules lists: "attn.c_attn"), and the rows of Attend's weight it holds.
struct Module {
  std::string path, suffix;
  std::string weight;
  int64_t row0 = 0, rows = 0;
  int64_t rope_heads = 0;  // B's rows are that many heads of q or k in Hugging Face's half order
};

// A target's rows in one of Attend's weights: self-attention's qkv holds q, k, v; cross-attention's q holds q and its
// kv holds k, v; o, up, gate, down their whole weight.
struct TargetRows {
  std::string target;
  int64_t row0 = 0, rows = 0;
};

std::vector<TargetRows> targets_of(const ModelConfig& c, const std::string& weight, int64_t rows) {
  const int64_t q = c.n_heads * c.d_head(), kv = c.kv_heads() * c.d_head();
  const std::vector<std::string> targets = nn::lora_targets_of(weight);
  if (targets.size() == 3) return {{"q", 0, q}, {"k", q, kv}, {"v", q + kv, kv}};
  if (targets.size() == 2) return {{"k", 0, kv}, {"v", kv, kv}};
  if (targets.size() == 1) return {{targets.front(), 0, rows}};
  return {};
}

bool adaptable(const std::string& weight) {
  for (const char* w : {"attn.qkv.weight", "cross_attn.q.weight", "cross_attn.kv.weight", "attn.o.weight",
                        "ffn.up.weight", "ffn.gate.weight", "ffn.down.weight"})
    if (weight.ends_with(w)) return true;
  return false;
}

// The module's name after its block index: "h.3.attn.c_attn" → "attn.c_attn".
std::string suffix_of(const std::string& path) {
  for (const char* block : {".h.", ".layers.", ".layer.", ".block."}) {
    const size_t at = path.find(block);
    if (at == std::string::npos) continue;
    const size_t dot = path.find('.', at + std::string(block).size());
    if (dot != std::string::npos) return path.substr(dot + 1);
  }
  return path;
}

enum class Family { Gpt2, Llama, Bert, T5 };

Family family_of(const ModelConfig& c) {
  if (c.architecture == Architecture::Encoder) return Family::Bert;
  if (c.architecture == Architecture::EncoderDecoder) return Family::T5;
  return c.position == PositionKind::Learned ? Family::Gpt2 : Family::Llama;
}

// The prefix of BERT's encoder in the class the model exports as: BertModel has none.
std::string bert_prefix(const ModelConfig& c) { return c.n_classes == 0 && !c.mlm_head ? "" : "bert."; }

// Every tensor of the family's layout that is a weight or a head, and where it lies in Attend's parameters.
std::vector<RowMapping> mappings_of(const ModelConfig& c) {
  switch (family_of(c)) {
    case Family::Bert:
      return formats::bert_mappings(c, bert_prefix(c), "cls.predictions.bias");
    case Family::T5:
      return formats::t5_mappings(c);
    case Family::Gpt2: {
      std::vector<RowMapping> m;  // GPT2LMHeadModel's paths: the body under "transformer.", the head beside it
      for (const formats::Mapping& g : formats::gpt2_mappings(c))
        m.push_back({g.hf == "lm_head.weight" ? g.hf : "transformer." + g.hf, g.attend, 0});
      return m;
    }
    case Family::Llama: {
      const int64_t q = c.n_heads * c.d_head(), kv = c.kv_heads() * c.d_head();
      std::vector<RowMapping> m = {{"model.embed_tokens.weight", "embed.tokens.weight"}};
      if (!c.tie_embeddings) m.push_back({"lm_head.weight", "lm_head.weight"});
      for (int64_t i = 0; i < c.n_layers; ++i) {
        const std::string hf = fmt::format("model.layers.{}.", i), at = formats::decoder_block(i);
        m.push_back({hf + "self_attn.q_proj.weight", at + "attn.qkv.weight", 0});
        m.push_back({hf + "self_attn.k_proj.weight", at + "attn.qkv.weight", q});
        m.push_back({hf + "self_attn.v_proj.weight", at + "attn.qkv.weight", q + kv});
        m.push_back({hf + "self_attn.o_proj.weight", at + "attn.o.weight"});
        if (is_gated(c.activation)) m.push_back({hf + "mlp.gate_proj.weight", at + "ffn.gate.weight"});
        m.push_back({hf + "mlp.up_proj.weight", at + "ffn.up.weight"});
        m.push_back({hf + "mlp.down_proj.weight", at + "ffn.down.weight"});
      }
      return m;
    }
  }
  return {};
}

// The adaptable modules of `model`'s layout, in the layout's order.
std::vector<Module> modules_of(const Model& model) {
  const ModelConfig& c = model.config();
  const std::vector<RowMapping> all = mappings_of(c);
  std::vector<Module> out;
  for (size_t i = 0; i < all.size(); ++i) {
    const RowMapping& m = all[i];
    if (!m.hf.ends_with(".weight") || !adaptable(m.attend)) continue;
    const Parameter* p = model.find(m.attend);
    check(p != nullptr, "peft: the model has no '{}'", m.attend);
    int64_t end = p->value.size(0);  // the next mapping into the same weight starts where this one ends
    for (const RowMapping& n : all)
      if (n.attend == m.attend && n.row > m.row) end = std::min(end, n.row);
    Module module{m.hf.substr(0, m.hf.size() - 7), "", m.attend, m.row, end - m.row, 0};
    module.suffix = suffix_of(module.path);
    if (family_of(c) == Family::Llama && (module.suffix == "self_attn.q_proj" || module.suffix == "self_attn.k_proj"))
      module.rope_heads = module.suffix == "self_attn.q_proj" ? c.n_heads : c.kv_heads();
    out.push_back(std::move(module));
  }
  return out;
}

// The parameters of the modules saved beside the adapters, and their Hugging Face names.
std::vector<RowMapping> saved_module_tensors(const ModelConfig& c, const std::vector<std::string>& modules) {
  std::vector<RowMapping> out;
  for (const RowMapping& m : mappings_of(c))
    for (const std::string& module : modules)
      if (nn::saved_module_holds(module, m.attend)) out.push_back(m);
  return out;
}

// PEFT's names of the modules saved beside the adapters: the classifier's and pooler's as Attend's, the
// embeddings' as the family's modules ("wte", "embed_tokens", "word_embeddings", "shared"; "lm_head").
constexpr const char* kEmbeddingModules[] = {"wte", "embed_tokens", "word_embeddings", "shared", "lm_head"};

std::vector<std::string> peft_modules_to_save(const ModelConfig& c) {
  std::vector<std::string> out;
  for (const std::string& module : c.lora_modules_to_save) {
    if (module != "embeddings") {
      out.push_back(module);
      continue;
    }
    for (const RowMapping& t : saved_module_tensors(c, {module})) {
      const std::string path = t.hf.substr(0, t.hf.size() - 7);  // without ".weight"
      out.push_back(path.substr(path.rfind('.') + 1));
    }
  }
  return out;
}

const char* task_type(const ModelConfig& c) {
  switch (family_of(c)) {
    case Family::Bert: return c.n_classes > 0 ? "SEQ_CLS" : c.mlm_head ? nullptr : "FEATURE_EXTRACTION";
    case Family::T5: return "SEQ_2_SEQ_LM";
    default: return "CAUSAL_LM";
  }
}

bool matches(const std::string& path, const std::vector<std::string>& patterns) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& t) { return path == t || path.ends_with("." + t); });
}

// "all-linear" in any case, as PEFT compares it.
bool all_linear(const std::string& pattern) {
  std::string lower(pattern);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return lower == "all-linear";
}

// target_modules as a string: a regular expression PEFT matches with Python's re.fullmatch, here PCRE2's (Perl's
// syntax, which Python's follows), whose matching is bounded: a pattern that would backtrack without end (nested
// repetitions) is an error naming it, not a hang. PEFT's patterns name modules by alternatives
// (".*\.(q_proj|v_proj)$"); a bound on the length keeps a file from asking for a huge compiled pattern.
constexpr size_t kMaxTargetPattern = 256;

using Anchor = tokenize::RegexSplitter::Anchor;

// A pattern that does not compile: "<where>: target_modules '(q_proj': missing closing parenthesis at offset 7".
tokenize::RegexSplitter target_regex(const std::string& pattern, const std::string& where) {
  return tokenize::RegexSplitter(pattern, where + ": target_modules", Anchor::whole);
}

void check_target_pattern(const std::string& pattern, const std::string& where) {
  check(pattern.size() <= kMaxTargetPattern, "{}: target_modules is a pattern of {} characters, at most {} are read",
        where, pattern.size(), kMaxTargetPattern);
  if (!all_linear(pattern)) target_regex(pattern, where);
}

// PEFT's other options that name modules (exclude_modules as a pattern, rank_pattern's and alpha_pattern's keys,
// layers_pattern's names) are regular expressions too, bounded alike; a file gives at most this many keys or names.
constexpr size_t kMaxPatternKeys = 4096;

// The regular expressions PEFT builds from a rank_pattern or alpha_pattern key (get_pattern_key, for re.match) and
// from a layers_pattern name (check_target_module_exists; "" for none given), its first group the layer's number.
std::string pattern_key_regex(const std::string& key) { return "(.*\\.)?(" + key + ")$"; }
std::string layer_regex(const std::string& name) { return ".*\\." + name + "\\.(\\d+)\\."; }
constexpr const char* kAnyLayerRegex = ".*\\.[^.]*\\.(\\d+)\\.";

// `option`'s pattern `text` as `regex` (what PEFT matches with it): an error names it if it is too long or does not
// compile.
tokenize::RegexSplitter module_regex(const std::string& text, const std::string& regex, const std::string& where,
                                     std::string_view option, Anchor anchor) {
  check(text.size() <= kMaxTargetPattern, "{}: {} has a pattern of {} characters, at most {} are read", where, option,
        text.size(), kMaxTargetPattern);
  return tokenize::RegexSplitter(regex, fmt::format("{}: {} '{}'", where, option, text), anchor);
}

// A rank_pattern or alpha_pattern key for module `m` that PEFT matches with this module alone among the model's
// (pattern_key_regex): the shortest end of its name after a dot that does and starts with a name (which older PEFT,
// matching rf".*\.{key}$", takes too), else its whole name.
std::string pattern_key_for(const std::vector<Module>& modules, const Module& m) {
  const std::string& path = m.path;
  for (size_t at = path.rfind('.'); at != std::string::npos && at > 0; at = path.rfind('.', at - 1)) {
    const std::string key = path.substr(at + 1);
    if (std::isdigit(static_cast<unsigned char>(key.front()))) continue;  // "layers.0.…" reads better than "0.…"
    const tokenize::RegexSplitter regex(pattern_key_regex(key), "rank_pattern key", Anchor::start);
    if (std::count_if(modules.begin(), modules.end(), [&](const Module& o) { return regex.matches(o.path); }) == 1)
      return key;
  }
  return path;
}

}  // namespace

void save_peft_adapter(const Model& model, const fs::path& dir, const std::string& base_model) {
  const ModelConfig& c = model.config();
  check(model.has_lora() && c.lora_r > 0, "peft: the model has no LoRA adapters of its own to save");
  const int slot = nn::own_adapter_slot(model);
  const std::vector<Module> modules = modules_of(model);
  // The file's one rank: the largest a module needs (a fused one holds several adapters). Adapters with ranks and
  // alphas module by module (Model::lora_per_module) keep each module's: r and lora_alpha are the first module's,
  // rank_pattern and alpha_pattern give the others theirs.
  const bool per_module = model.lora_per_module();
  int64_t R = 0;
  double scale = 0.0;
  struct Adapted {
    const Module* m;
    std::vector<const LowRankUpdate*> us;
    int64_t rank;
    double scale;
  };
  std::vector<Adapted> adapted;
  for (const Module& m : modules) {
    std::vector<const LowRankUpdate*> us =
        nn::updates_on_rows(*model.find(m.weight), slot, m.row0, m.rows, "the module " + m.path);
    if (us.empty()) continue;
    for (const LowRankUpdate* u : us) {
      check(per_module || scale == 0.0 || u->scale == scale, "peft: '{}' has an adapter scale of its own", m.weight);
      if (!per_module) scale = u->scale;
    }
    const int64_t rank = nn::stacked_rank(us, m.rows);
    R = std::max(R, rank);
    adapted.push_back({&m, std::move(us), rank, 0.0});
    adapted.back().scale = adapted.back().us.front()->scale;
  }
  check(!adapted.empty(), "peft: none of the model's adapters lies on a module of its Hugging Face layout");
  auto alpha_of = [&](double s, int64_t r) {
    return c.lora_rslora ? s * std::sqrt(static_cast<double>(r)) : s * static_cast<double>(r);
  };
  if (per_module) R = adapted.front().rank, scale = adapted.front().scale;
  const double alpha = alpha_of(scale, R);
  json rank_pattern = json::object(), alpha_pattern = json::object();

  std::deque<Tensor> stored;  // the written tensors point into it: a deque keeps them where they are as it grows
  std::vector<NamedTensor> tensors;
  std::vector<std::string> targets;  // target_modules: module names after the block, unless one names more
  for (const auto& [m, us, own_rank, own_scale] : adapted) {
    const int64_t r = per_module ? own_rank : R;
    Tensor a({r, model.find(m->weight)->value.size(1)}), b({m->rows, r});  // zeros where no adapter is
    // A fused module's adapters at scales of their own: each one's B rows scaled to the module's.
    const double module_scale = per_module ? own_scale : scale;
    nn::stack_updates(us, m->row0, m->rows, r, a.data(), b.data(), [&](const LowRankUpdate& u) {
      return u.scale == module_scale ? 1.0f : static_cast<float>(u.scale / module_scale);  // (a set at scale 0: 1)
    });
    if (m->rope_heads > 0) {
      const Tensor pairs = b.clone();
      formats::rope_rows_to_hf(b.data(), pairs.data(), m->rope_heads, c.d_head(), r);
    }
    // A rank of its own, and an alpha where the file's lora_alpha would not give this module its scale at its rank.
    const double unit = c.lora_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
    if (per_module && (r != R || unit != module_scale)) {
      const std::string key = pattern_key_for(modules, *m);
      if (r != R) rank_pattern[key] = r;
      if (unit != module_scale) alpha_pattern[key] = alpha_of(module_scale, r);
    }
    const std::string name = "base_model.model." + m->path;
    stored.push_back(std::move(a));
    tensors.push_back({name + ".lora_A.weight", &stored.back()});
    stored.push_back(std::move(b));
    tensors.push_back({name + ".lora_B.weight", &stored.back()});
    if (std::find(targets.begin(), targets.end(), m->suffix) == targets.end()) targets.push_back(m->suffix);
  }
  // Each module by the shortest end of its name that no unadapted module shares ("q_proj"; GPT-2's "attn.c_proj"
  // when mlp.c_proj is not adapted), or by its full names when even the name after the block is shared (BERT's
  // "output.dense" with attention.output.dense not adapted).
  std::vector<std::string> target_modules;
  auto add = [&](const std::string& t) {
    if (std::find(target_modules.begin(), target_modules.end(), t) == target_modules.end()) target_modules.push_back(t);
  };
  auto unadapted_match = [&](const std::string& name) {
    return std::any_of(modules.begin(), modules.end(), [&](const Module& m) {
      return matches(m.path, {name}) &&
             std::none_of(adapted.begin(), adapted.end(), [&](const Adapted& a) { return a.m == &m; });
    });
  };
  for (const std::string& t : targets) {
    std::vector<std::string> ends;  // shortest first: "q_proj", then "self_attn.q_proj"
    for (size_t at = t.rfind('.'); at != std::string::npos; at = at == 0 ? std::string::npos : t.rfind('.', at - 1))
      ends.push_back(t.substr(at + 1));
    ends.push_back(t);
    const auto end = std::find_if_not(ends.begin(), ends.end(), unadapted_match);
    if (end != ends.end()) {
      add(*end);
      continue;
    }
    for (const Adapted& a : adapted)
      if (a.m->suffix == t) add(a.m->path);
  }
  for (const RowMapping& t : saved_module_tensors(c, c.lora_modules_to_save)) {
    stored.push_back(model.find(t.attend)->value.clone());
    tensors.push_back({"base_model.model." + t.hf, &stored.back()});
  }
  json config = {{"peft_type", "LORA"},
                 {"task_type", task_type(c) ? json(task_type(c)) : json(nullptr)},
                 {"base_model_name_or_path", base_model.empty() ? json(nullptr) : json(base_model)},
                 {"r", R},
                 {"lora_alpha", alpha},
                 {"lora_dropout", c.lora_dropout},
                 {"target_modules", target_modules},
                 {"use_rslora", c.lora_rslora},
                 {"use_dora", false},
                 {"bias", "none"},
                 {"fan_in_fan_out", family_of(c) == Family::Gpt2},  // GPT-2's Conv1D stores W as [in, out]
                 {"modules_to_save", c.lora_modules_to_save.empty() ? json(nullptr) : json(peft_modules_to_save(c))},
                 {"init_lora_weights", true},
                 {"inference_mode", true}};
  if (!rank_pattern.empty()) config["rank_pattern"] = rank_pattern;
  if (!alpha_pattern.empty()) config["alpha_pattern"] = alpha_pattern;
  fs::create_directories(dir);
  write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir / "adapter_config.json", config.dump(2) + "\n");
}

namespace {

// exclude_modules: a list of names or one pattern (the two forms target_modules has too), or null.
void read_names(const nlohmann::json& j, const char* key, const std::string& where, std::vector<std::string>& names,
                std::string& pattern) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (it->is_string()) {
    pattern = it->get<std::string>();
    module_regex(pattern, pattern, where, key, Anchor::whole);
    return;
  }
  check(it->is_array(), "{}: {} is {}, expected a list of module names or a regular expression", where, key,
        it->dump());
  for (const auto& m : *it) {
    check(m.is_string(), "{}: {} holds {}, expected names", where, key, m.dump());
    names.push_back(m.get<std::string>());
  }
}

// exclude_modules, rank_pattern, alpha_pattern, layers_to_transform, layers_pattern.
void read_module_options(std::string_view text, const nlohmann::json& j, const std::string& where, PeftConfig& peft) {
  read_names(j, "exclude_modules", where, peft.exclude_modules, peft.exclude_pattern);
  check(peft.exclude_modules.size() <= kMaxPatternKeys, "{}: exclude_modules names {} modules, at most {} are read",
        where, peft.exclude_modules.size(), kMaxPatternKeys);
  // The patterns' order is the file's (the first key that matches a module gives its value): read them again in it.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text, nullptr, false);
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    const auto it = ordered.find(key);
    if (it == ordered.end() || it->is_null()) continue;
    check(it->is_object(), "{}: {} is {}, expected an object of module patterns and values", where, key, it->dump());
    check(it->size() <= kMaxPatternKeys, "{}: {} has {} keys, at most {} are read", where, key, it->size(),
          kMaxPatternKeys);
    const bool ranks = std::string_view(key) == "rank_pattern";
    for (const auto& [pattern, value] : it->items()) {
      check(!pattern.empty(), "{}: {} has an empty key", where, key);
      module_regex(pattern, pattern_key_regex(pattern), where, key, Anchor::start);
      if (ranks) {
        check(value.is_number_integer() && value.get<int64_t>() >= 1 && value.get<int64_t>() <= nn::kMaxLoraRank,
              "{}: {} gives '{}' the rank {}, expected a whole number from 1 to {}", where, key, pattern, value.dump(),
              nn::kMaxLoraRank);
        peft.rank_pattern.emplace_back(pattern, value.get<int64_t>());
      } else {
        check(value.is_number() && value.get<double>() > 0.0 && std::isfinite(value.get<double>()),
              "{}: {} gives '{}' the alpha {}, expected a positive number", where, key, pattern, value.dump());
        peft.alpha_pattern.emplace_back(pattern, value.get<double>());
      }
    }
  }
  const auto layers = j.find("layers_to_transform");
  if (layers != j.end() && !layers->is_null()) {
    const nlohmann::json list = layers->is_array() ? *layers : nlohmann::json::array({*layers});
    check(list.size() <= kMaxPatternKeys, "{}: layers_to_transform names {} layers, at most {} are read", where,
          list.size(), kMaxPatternKeys);
    for (const auto& l : list) {  // (a negative number is no layer's: PEFT keeps it and matches nothing with it)
      check(l.is_number_integer(), "{}: layers_to_transform holds {}, expected layer numbers", where, l.dump());
      peft.layers_to_transform.push_back(l.get<int64_t>());
    }
  }
  // What PEFT's LoraConfig refuses (its __post_init__): the layer options beside target_modules as a pattern, and
  // layers_pattern without layers_to_transform.
  const bool has_layers = layers != j.end() && !layers->is_null();
  const auto pattern = j.find("layers_pattern");
  const bool has_pattern = pattern != j.end() && !pattern->is_null();
  check(peft.target_pattern.empty() || (!has_layers && !has_pattern), "{}: {} with target_modules as a pattern (PEFT "
        "refuses it: the pattern says which layers)", where, has_layers ? "layers_to_transform" : "layers_pattern");
  auto truthy = [](const nlohmann::json& v) {  // Python's bool() of the field
    return v.is_array() ? !v.empty() : v.is_string() ? !v.get<std::string>().empty() : v.is_number() ? v != 0 : !v.is_null();
  };
  check(!(has_pattern && truthy(*pattern)) || (has_layers && truthy(*layers)), "{}: layers_pattern without "
        "layers_to_transform (PEFT refuses it)", where);
  // None, "" and [] alike: any name before the number (PEFT's len(layers_pattern) == 0).
  if (pattern != j.end() && !pattern->is_null() && *pattern != "") {
    const nlohmann::json list = pattern->is_array() ? *pattern : nlohmann::json::array({*pattern});
    check(list.size() <= kMaxPatternKeys, "{}: layers_pattern has {} names, at most {} are read", where, list.size(),
          kMaxPatternKeys);
    for (const auto& l : list) {
      check(l.is_string(), "{}: layers_pattern holds {}, expected the name of the model's list of layers (such as "
            "\"layers\" or \"h\")", where, l.dump());
      module_regex(l.get<std::string>(), layer_regex(l.get<std::string>()), where, "layers_pattern", Anchor::start);
      peft.layers_pattern.push_back(l.get<std::string>());
    }
  }
}

}  // namespace

PeftConfig parse_peft_config(std::string_view text, std::string_view origin) {
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
  check(j.contains("target_modules") && (j["target_modules"].is_array() || j["target_modules"].is_string()),
        "{}: target_modules must be a list of module names or a regular expression", where);
  PeftConfig peft;
  LoraConfig& lora = peft.lora;
  lora.r = get("r", int64_t{8});
  lora.alpha = get("lora_alpha", 8.0);
  lora.rslora = get("use_rslora", false);
  lora.dropout = get("lora_dropout", 0.0);  // training's alone: a loaded adapter that trains on keeps it
  if (j["target_modules"].is_string()) {
    peft.target_pattern = j["target_modules"].get<std::string>();
    check_target_pattern(peft.target_pattern, where);
  }
  for (const auto& m : j["target_modules"].is_array() ? j["target_modules"] : nlohmann::json::array()) {
    check(m.is_string() && !m.get<std::string>().empty(), "{}: target_modules holds {}, expected names", where, m.dump());
    check(std::find(peft.target_modules.begin(), peft.target_modules.end(), m.get<std::string>()) ==
              peft.target_modules.end(),
          "{}: target module '{}' is named twice", where, m.get<std::string>());
    peft.target_modules.push_back(m.get<std::string>());
  }
  check(!peft.target_modules.empty() || !peft.target_pattern.empty(), "{}: target_modules is empty", where);
  read_module_options(text, j, where, peft);
  if (j.contains("modules_to_save") && !j["modules_to_save"].is_null()) {
    check(j["modules_to_save"].is_array(), "{}: modules_to_save is {}, expected a list of names", where,
          j["modules_to_save"].dump());
    for (const auto& m : j["modules_to_save"]) {
      const bool embedding = m.is_string() && std::any_of(std::begin(kEmbeddingModules), std::end(kEmbeddingModules),
                                                          [&](const char* e) { return m == e; });
      check(m.is_string() && (m == "classifier" || m == "pooler" || m == "score" || embedding),
            "{}: modules_to_save names {}: supported are a classification head (classifier, pooler) and the "
            "embeddings ({})", where, m.dump(), fmt::join(kEmbeddingModules, ", "));
      if (m == "score") continue;  // PEFT's default for other classes' heads
      const std::string module = embedding ? "embeddings" : m.get<std::string>();
      if (std::find(lora.modules_to_save.begin(), lora.modules_to_save.end(), module) == lora.modules_to_save.end())
        lora.modules_to_save.push_back(module);
    }
  }
  lora.targets = {"q"};  // for validate: the targets come from the modules the model has
  try {
    lora.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  lora.targets.clear();
  return peft;
}

struct PeftModules::Impl {
  PeftConfig peft;
  std::string where;
  std::optional<tokenize::RegexSplitter> target, exclude;
  std::vector<tokenize::RegexSplitter> ranks, alphas, layers;

  // Not excluded, and named by target_modules: the list's names end it (in the layers of layers_to_transform unless
  // it names the module whole), or the pattern matches all of it ("all-linear": every projection Attend adapts.
  // PEFT's takes every linear layer but the output layer, which on BERT also includes the pooler's and the MLM
  // head's dense layers and the classifier; an adapter on those is refused by name when its tensors are read).
  bool adapted(const std::string& path) const {
    if (exclude ? exclude->matches(path) : matches(path, peft.exclude_modules)) return false;
    if (!peft.target_pattern.empty()) return !target || target->matches(path);
    const auto& list = peft.target_modules;
    if (std::find(list.begin(), list.end(), path) != list.end()) return true;
    if (!matches(path, list)) return false;
    if (peft.layers_to_transform.empty()) return true;
    for (const tokenize::RegexSplitter& layer : layers) {
      std::string_view digits;
      if (!layer.matches(path, &digits)) continue;
      check(!digits.empty() && digits.size() <= 18 && std::all_of(digits.begin(), digits.end(), [](char ch) {
              return ch >= '0' && ch <= '9';
            }), "{}: layers_pattern '{}' finds '{}' in the module {}, not a layer's number", where, layer.pattern(),
            digits, path);
      const int64_t index = std::stoll(std::string(digits));
      const auto& wanted = peft.layers_to_transform;
      return std::find(wanted.begin(), wanted.end(), index) != wanted.end();
    }
    return false;  // no layer number in its name
  }
};

PeftModules::PeftModules(PeftConfig peft, std::string where) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.peft = std::move(peft), m.where = std::move(where);
  const PeftConfig& p = m.peft;
  if (!p.target_pattern.empty() && !all_linear(p.target_pattern)) m.target.emplace(target_regex(p.target_pattern, m.where));
  if (!p.exclude_pattern.empty())
    m.exclude.emplace(module_regex(p.exclude_pattern, p.exclude_pattern, m.where, "exclude_modules", Anchor::whole));
  for (const auto& entry : p.rank_pattern)
    m.ranks.push_back(
        module_regex(entry.first, pattern_key_regex(entry.first), m.where, "rank_pattern", Anchor::start));
  for (const auto& entry : p.alpha_pattern)
    m.alphas.push_back(
        module_regex(entry.first, pattern_key_regex(entry.first), m.where, "alpha_pattern", Anchor::start));
  for (const std::string& name : p.layers_pattern)
    m.layers.push_back(module_regex(name, layer_regex(name), m.where, "layers_pattern", Anchor::start));
  if (m.layers.empty())
    m.layers.push_back(module_regex("", kAnyLayerRegex, m.where, "layers_to_transform", Anchor::start));
}

PeftModules::~PeftModules() = default;

std::optional<LoraConfig::Rank> PeftModules::adapter(const std::string& module) const {
  const Impl& m = *impl_;
  if (!m.adapted(module)) return std::nullopt;
  LoraConfig::Rank rank{.r = m.peft.lora.r, .alpha = m.peft.lora.alpha};
  for (size_t i = 0; i < m.ranks.size(); ++i)
    if (m.ranks[i].matches(module)) {
      rank.r = m.peft.rank_pattern[i].second;
      break;
    }
  for (size_t i = 0; i < m.alphas.size(); ++i)
    if (m.alphas[i].matches(module)) {
      rank.alpha = m.peft.alpha_pattern[i].second;
      break;
    }
  return rank;
}

int load_peft_adapter(Model& model, const fs::path& dir, const std::string& name, double multiplier) {
  const fs::path config_path = dir / "adapter_config.json";
  if (fs::is_regular_file(dir) && is_gguf_file(dir)) return formats::load_gguf_lora(model, dir, name, multiplier);
  check(fs::exists(dir), "{}: no such adapter directory{}", dir.string(),
        dir.string().find(':') != std::string::npos ? " (a :SCALE after it must be a number)" : "");
  check(fs::exists(config_path), "{}: no adapter_config.json (a PEFT adapter directory holds it and "
        "adapter_model.safetensors)", dir.string());
  const std::string where = config_path.string();
  const PeftConfig peft = parse_peft_config(read_file(config_path), where);
  const ModelConfig& c = model.config();
  const std::vector<Module> modules = modules_of(model);
  // Attend's targets: those of the modules PEFT adapts.
  const PeftModules choice(peft, where);
  std::vector<const Module*> matched;
  std::set<std::string> targets;
  auto targets_in = [&](const Module& m) {
    std::vector<TargetRows> in;
    for (const TargetRows& t : targets_of(c, m.weight, model.find(m.weight)->value.size(0)))
      if (t.row0 >= m.row0 && t.row0 < m.row0 + m.rows) in.push_back(t);
    return in;
  };
  std::map<const Module*, LoraConfig::Rank> rank_of;
  for (const Module& m : modules)
    if (const std::optional<LoraConfig::Rank> rank = choice.adapter(m.path)) {
      matched.push_back(&m);
      rank_of[&m] = *rank;
      for (const TargetRows& t : targets_in(m)) targets.insert(t.target);
    }
  for (const std::string& t : peft.target_modules)
    check(std::any_of(modules.begin(), modules.end(), [&](const Module& m) { return matches(m.path, {t}); }),
          "{}: target module '{}' is none of this model's modules (they end in {})", where, t, [&] {
            std::vector<std::string> ends;
            for (const Module& m : modules)
              if (std::find(ends.begin(), ends.end(), m.suffix) == ends.end()) ends.push_back(m.suffix);
            return fmt::format("{}", fmt::join(ends, ", "));
          }());
  check(!matched.empty(), "{}: target_modules{} matches none of this model's modules (such as {}){}", where,
        peft.target_pattern.empty() ? "" : " '" + peft.target_pattern + "'",
        modules.empty() ? std::string("none") : modules.front().path,
        peft.layers_to_transform.empty() ? "" : " in layers_to_transform's layers");
  std::map<std::string, LoraConfig::Rank> per_module;
  for (const Module* m : matched)
    for (const TargetRows& t : targets_in(*m)) per_module[nn::lora_module_key(m->weight, t.target)] = rank_of.at(m);
  LoraConfig lora = peft.lora;
  lora.targets = nn::in_target_order(targets);
  check(name.empty() || lora.modules_to_save.empty(), "{}: modules_to_save in a second adapter set (the model has "
        "one classification head)", where);
  lora.name = name, lora.multiplier = multiplier;
  // r and lora_alpha on a target's every block, as a LoRA run's own adapters; else each module's own
  // (LoraConfig::per_module): some blocks only (layers_to_transform, a pattern), rank_pattern, alpha_pattern.
  const std::optional<LoraConfig::Rank> one = nn::one_rank_on_every_block(model, lora.targets, per_module);
  if (!one || one->r != lora.r || one->alpha != lora.alpha) lora.per_module = std::move(per_module);

  // Every tensor checked before the model changes: a file that cannot be read leaves no adapter set behind.
  const SafetensorsReader file(dir / "adapter_model.safetensors");
  std::set<std::string> used;
  auto expect_tensor = [&](const std::string& n, const Shape& shape, const std::string& why) {
    const TensorInfo* info = file.find(n);
    check(info != nullptr, "{}: no tensor '{}', which {} needs", file.origin(), n, why);
    check(info->shape == shape, "{}: '{}' has shape {}, the model needs {} ({})", file.origin(), n, info->shape, shape,
          why);
    used.insert(n);
  };
  const auto a_name = [](const Module* m) { return "base_model.model." + m->path + ".lora_A.weight"; };
  const auto b_name = [](const Module* m) { return "base_model.model." + m->path + ".lora_B.weight"; };
  for (const Module* m : matched) {
    const int64_t r = rank_of.at(m).r;
    const std::string why = fmt::format("r = {} on {}", r, m->path);
    expect_tensor(a_name(m), {r, model.find(m->weight)->value.size(1)}, why);
    expect_tensor(b_name(m), {m->rows, r}, why);
  }
  const std::vector<RowMapping> saved = name.empty() ? saved_module_tensors(c, lora.modules_to_save)
                                                     : std::vector<RowMapping>{};
  for (const RowMapping& t : saved) expect_tensor("base_model.model." + t.hf, model.find(t.attend)->value.shape(),
                                                  "modules_to_save");
  for (const TensorInfo& t : file.tensors())
    check(used.count(t.name) > 0, "{}: tensor '{}' is not one of the adapters adapter_config.json describes",
          file.origin(), t.name);

  const int slot = model.add_lora(lora);
  for (const Module* m : matched) {
    Parameter& w = *model.find(m->weight);
    const Tensor a = file.load(a_name(m));
    Tensor b = file.load(b_name(m));
    const int64_t r = a.size(0);
    if (m->rope_heads > 0) {
      const Tensor hf = b.clone();
      formats::rope_rows_from_hf(b.data(), hf.data(), m->rope_heads, c.d_head(), r);
    }
    for (const LowRankUpdate& u : w.lora) {
      if (u.adapter != slot || u.row0 < m->row0 || u.row0 >= m->row0 + m->rows) continue;
      check(u.A->value.numel() == a.numel(), "peft: '{}' took rank {} for the file's {}", u.A->name,
            u.A->value.size(0), r);
      std::copy(a.data(), a.data() + a.numel(), u.A->value.data());
      const int64_t rows = u.B->value.size(0);
      std::copy(b.data() + (u.row0 - m->row0) * r, b.data() + (u.row0 - m->row0 + rows) * r, u.B->value.data());
    }
  }
  for (const RowMapping& t : saved) {
    Parameter& p = *model.find(t.attend);
    const Tensor v = file.load("base_model.model." + t.hf);
    // A module held as stored (a GGUF file's 16-bit or quantized token table) becomes plain fp32 values first, so
    // that what multiplies or looks it up reads the adapter's values, not the stored ones.
    if (nn::held_as_stored(p)) model.set_storage(WeightType::F32, [&](const Parameter& q) { return &q == &p; });
    std::copy(v.data(), v.data() + v.numel(), p.value.data());
  }
  return slot;
}

}  // namespace attend
