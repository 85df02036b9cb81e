// `attend init` (a freshly initialised model directory from a config) and `attend inspect` (parameters,
// shapes, totals by part, and the memory training needs).
#include "commands.h"

#include <attend/error.h>
#include <attend/chat_template.h>
#include <attend/eval.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/tokenizer.h>
#include <attend/model_dir.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <utility>

namespace attend::cli {

namespace {

// The projections a model's adapters sit on: its recorded targets less gate where the FFN is not gated (PEFT's list
// semantics: a target a model lacks adapts nothing; config.json keeps the list as given, for resume's check).
std::string adapted_targets(const ModelConfig& c) {
  std::vector<std::string> out;
  for (const std::string& t : c.lora_targets)
    if (t != "gate" || is_gated(c.activation)) out.push_back(t);
  return fmt::format("{}", fmt::join(out, ", "));
}

// "r = 8 on q, v", or for adapters read with ranks module by module (a PEFT rank_pattern, a GGUF LoRA file's pairs)
// "ranks module by module on q, v".
std::string lora_summary(const Model& model) {
  const ModelConfig& c = model.config();
  return model.lora_per_module() ? fmt::format("ranks module by module on {}", adapted_targets(c))
                                 : fmt::format("r = {} on {}", c.lora_r, adapted_targets(c));
}

// 124439808 → "124,439,808"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024.0 && u < 4) n /= 1024.0, ++u;
  return fmt::format("{:.1f} {}", n, units[u]);
}

void add_init(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "Create a model directory with freshly initialised weights from a config");
  static std::string config_path, out, tokenizer;
  static std::vector<std::string> sets;
  cmd->add_option("--config", config_path, "Model options as config.json (docs/FORMATS.md); defaults otherwise");
  cmd->add_option("--set", sets, "Override one option: KEY=VALUE (repeatable), e.g. --set d_model=256");
  cmd->add_option("--tokenizer", tokenizer, "A tokenizer to save beside the model (sets vocab_size to its size)");
  cmd->add_option("-o,--output", out, "The model directory to write")->required();
  cmd->callback([] {
    ModelConfig config = config_path.empty() ? ModelConfig{} : ModelConfig::from_json(read_file(config_path), config_path);
    std::optional<Tokenizer> tok;
    if (!tokenizer.empty()) {
      tok.emplace(Tokenizer::load(tokenizer));
      config.vocab_size = tok->vocab_size();
    }
    for (const std::string& s : sets) {
      const size_t eq = s.find('=');
      check(eq != std::string::npos && eq > 0, "--set '{}': expected KEY=VALUE", s);
      config.set(s.substr(0, eq), s.substr(eq + 1));
    }
    config.validate();
    const Model model(config);
    save_model(model, out, tok ? &*tok : nullptr);
    fmt::print("{}: {} model, {} parameters\n", out, architecture_name(config.architecture),
               grouped(model.count().total()));
  });
}

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Print a model's parameters with their shapes, totals by part, and memory");
  static std::string dir;
  static std::vector<std::string> lora;
  static bool json_output = false, summary = false;
  cmd->add_option("model", dir, "A model directory (Attend's or a Hugging Face checkpoint) or a GGUF file")->required();
  cmd->add_option("--lora", lora, "[NAME=]DIR[:SCALE]: a PEFT LoRA adapter directory or llama.cpp's GGUF LoRA file on "
                  "the model: its adapters counted and listed (repeat for several)");
  cmd->add_flag("--json", json_output, "Print one JSON object instead of tables");
  cmd->add_flag("--summary", summary, "Leave out the per-tensor table");
  cmd->callback([] {
    Model model = load_model(dir);
    apply_lora(model, lora);
    const ModelConfig& c = model.config();
    const ParameterCount n = model.count();
    const double weights = 4.0 * double(n.total());
    // What trains: everything, or a LoRA model's adapters alone (their gradients and moments are all it adds).
    int64_t trainable_count = 0;
    for (const Parameter* p : model.parameters())
      if (!p->frozen) trainable_count += p->numel();
    const double trainable = 4.0 * double(trainable_count);
    const bool enc_dec = c.architecture == Architecture::EncoderDecoder;
    if (json_output) {
      nlohmann::ordered_json j;
      j["architecture"] = architecture_name(c.architecture);
      j["parameters"] = {{"embeddings", n.embeddings}, {"attention", n.attention}, {"ffn", n.ffn},
                         {"norms", n.norms},           {"heads", n.heads},         {"adapters", n.adapters},
                         {"total", n.total()},         {"trainable", trainable_count}};
      j["tensors"] = nlohmann::ordered_json::array();
      for (const Parameter* p : model.parameters())
        j["tensors"].push_back({{"name", p->name},
                                {"shape", std::vector<int64_t>(p->value.shape().begin(), p->value.shape().end())},
                                {"role", role_name(p->role)}});
      j["memory_bytes"] = {{"weights", weights}, {"gradients", trainable}, {"adamw_moments", 2 * trainable}};
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("{}: {}, {} layer{}{}, d_model {}, {} heads ({} key/value), d_ff {}, vocabulary {}, context {}\n", dir,
               architecture_name(c.architecture), c.n_layers, c.n_layers == 1 ? "" : "s",
               enc_dec ? fmt::format(" + {} decoder", c.decoder_layers()) : "",
               c.d_model, c.n_heads, c.kv_heads(), c.ffn_hidden(), c.vocab_size, c.max_seq_len);
    if (!summary) {
      size_t width = 4;
      for (const Parameter* p : model.parameters()) width = std::max(width, p->name.size());
      fmt::print("\n{:<{}}  {:<16} {:>14}  {}\n", "name", width, "shape", "parameters", "role");
      for (const Parameter* p : model.parameters())
        fmt::print("{:<{}}  {:<16} {:>14}  {}\n", p->name, width, p->value.shape().str(), grouped(p->numel()),
                   role_name(p->role));
    }
    // The notes' formulas (002 §3.3, 001 §11) beside the counts: 4·d² per attention, 8·d² per FFN of d_ff = 4d.
    const int64_t d = c.d_model;
    const int64_t blocks = c.n_layers + (enc_dec ? c.decoder_layers() : 0);
    const int64_t attention_layers = blocks + (enc_dec ? c.decoder_layers() : 0);  // + cross-attention
    fmt::print("\n{:<12} {:>14}   {}\n", "part", "parameters", "notes' formula, no biases");
    fmt::print("{:<12} {:>14}   V·d{} = {}\n", "embeddings", grouped(n.embeddings),
               c.position == PositionKind::Learned ? " + T·d" : "",
               grouped(c.vocab_size * d + (c.position == PositionKind::Learned ? c.max_seq_len * d : 0)));
    fmt::print("{:<12} {:>14}   {} attention layers × 4·d² = {}\n", "attention", grouped(n.attention), attention_layers,
               grouped(attention_layers * 4 * d * d));
    fmt::print("{:<12} {:>14}   {} FFNs × {}·d·d_ff{}\n", "ffn", grouped(n.ffn), blocks,
               is_gated(c.activation) ? 3 : 2, c.n_experts > 0 ? " (× experts in MoE blocks)" : "");
    fmt::print("{:<12} {:>14}\n", "norms", grouped(n.norms));
    fmt::print("{:<12} {:>14}   {}\n", "heads", grouped(n.heads), c.tie_embeddings ? "LM head tied to the embedding" : "");
    if (n.adapters > 0)
      fmt::print("{:<12} {:>14}   LoRA {}: {:.2f}% of the model, the only part that trains\n", "adapters",
                 grouped(n.adapters), lora_summary(model),
                 100.0 * double(n.adapters) / double(n.total()));
    fmt::print("{:<12} {:>14}\n", "total", grouped(n.total()));
    fmt::print("\nmemory (fp32): weights {}, gradients {}, AdamW moments {}; training {} before activations\n",
               bytes(weights), bytes(trainable), bytes(2 * trainable), bytes(weights + 3 * trainable));
  });
}

// The chat template a model carries (a GGUF file's, or a directory's), to write into a GGUF file; "" for none.
std::string model_chat_template(const std::string& model) {
  if (is_gguf_file(model)) return gguf_chat_template(model).value_or("");
  const std::filesystem::path dir(model), config = dir / "tokenizer_config.json";
  const bool has = std::filesystem::exists(dir / "chat_template.jinja") || std::filesystem::exists(dir / "chat_template.json") ||
                   (std::filesystem::exists(config) && nlohmann::json::parse(read_file(config), nullptr, false).contains("chat_template"));
  return has ? ChatTemplate::from_model_dir(dir).source() : "";  // a base model has none
}

namespace fs = std::filesystem;

// --dtype of a Hugging Face export: "auto" is the source checkpoint's torch_dtype (a BF16 checkpoint came back as F32,
// twice the size), f32 for a model of Attend's or a GGUF file.
DType export_dtype(const std::string& option, const std::string& source) {
  if (option == "f32") return DType::F32;
  if (option == "bf16") return DType::BF16;
  if (option == "f16") return DType::F16;
  check(option == "auto", "--dtype '{}': expected auto, f32, bf16 or f16", option);
  const fs::path config = fs::path(source) / "config.json";
  if (!fs::is_directory(source) || !fs::exists(config)) return DType::F32;
  const auto j = nlohmann::json::parse(read_file(config), nullptr, /*allow_exceptions=*/false);
  const auto t = j.is_object() ? j.find("torch_dtype") : j.end();
  if (t == j.end() || !t->is_string()) return DType::F32;
  return *t == "bfloat16" ? DType::BF16 : *t == "float16" ? DType::F16 : DType::F32;
}

// What a Hugging Face layout written from `source` still lacks of it: its generation files (copy_generation_files);
// config.json's token ids (the source's, else its generation defaults: a Mistral's greedy run went past its EOS
// after export). Shards and an index of an earlier model in `out` are removed (they were left beside the new
// model.safetensors).
void finish_hf_export(const std::string& source, const fs::path& out) {
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors.index.json" || (name.starts_with("model-") && name.ends_with(".safetensors")))
      fs::remove(entry.path());
  }
  const bool directory = fs::is_directory(source);
  copy_generation_files(source, out);
  auto config = nlohmann::ordered_json::parse(read_file(out / "config.json"));
  nlohmann::json source_config;
  if (directory && fs::exists(fs::path(source) / "config.json"))
    source_config = nlohmann::json::parse(read_file(fs::path(source) / "config.json"), nullptr, false);
  const GenerationDefaults defaults = read_generation_defaults(source);
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"}) {
    if (config.contains(key)) continue;
    if (source_config.is_object() && source_config.contains(key)) {
      config[key] = source_config[key];
      continue;
    }
    const std::string k = key;
    if (k == "bos_token_id" && defaults.bos) config[key] = *defaults.bos;
    if (k == "pad_token_id" && defaults.pad) config[key] = *defaults.pad;
    if (k == "decoder_start_token_id" && defaults.decoder_start) config[key] = *defaults.decoder_start;
    if (k == "eos_token_id" && !defaults.eos.empty())
      config[key] = defaults.eos.size() == 1 ? nlohmann::ordered_json(defaults.eos[0]) : nlohmann::ordered_json(defaults.eos);
  }
  write_file_atomic(out / "config.json", config.dump(2) + "\n");
}

// A model with LoRA adapters written by a format that holds no adapters would lose them silently (its exports ran as
// the base): say what writes them.
void check_no_adapters(const Model& model, const std::string& dir, const std::string& writer) {
  check(!model.has_lora(), "{}: the model carries LoRA adapters ({}), which {} does not write: `attend "
        "merge-lora` writes the model with them merged in (then export that), `attend export --format peft` or "
        "`--format gguf-lora` the adapters alone", dir, lora_summary(model), writer);
}

void add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Write a model in a Hugging Face layout: its family's (hf), or one named (hf-gpt2: GPT2LMHeadModel; "
                "hf-llama: LlamaForCausalLM, MistralForCausalLM, Qwen2/Qwen3ForCausalLM; hf-gemma3: Gemma3ForCausalLM; "
                "hf-t5: T5ForConditionalGeneration; hf-bert: BertForMaskedLM, BertForSequenceClassification, BertModel); "
                "or as one GGUF file for llama.cpp (gguf: gpt2, llama, qwen2, qwen3, gemma3, bert); or a LoRA model's "
                "adapters as PEFT saves them (peft: GPT-2, the Llama family, BERT, T5) or as a GGUF LoRA for llama.cpp's "
                "--lora (gguf-lora: GPT-2 and the Llama family)");
  static std::string dir, out, format = "hf", type, dtype = "auto";
  static std::vector<std::string> lora;
  cmd->add_option("--model", dir, "A model directory or GGUF file")->required();
  cmd->add_option("--format", format, "hf (the model's family), hf-gpt2, hf-llama, hf-gemma3, hf-t5, hf-bert, gguf, "
                                      "peft or gguf-lora")
      ->capture_default_str();
  cmd->add_option("--lora", lora, "peft, gguf-lora: a PEFT adapter directory on the model to write instead of the "
                                  "model's own adapters; with --format gguf, the adapter as a GGUF LoRA (PEFT to "
                                  "llama.cpp)");
  cmd->add_option("--type", type, "gguf: the weights' type: f32, f16, bf16, or a quantization (see `attend quantize`); "
                                  "default: as the model holds them");
  cmd->add_option("--dtype", dtype, "hf layouts: the tensors' type: f32, bf16, f16, or auto (the source checkpoint's "
                                    "torch_dtype; f32 for Attend's models and GGUF files)")
      ->capture_default_str();
  cmd->add_option("-o,--output", out, "The directory to write (gguf: the file)")->required();
  cmd->callback([] {
    check(dtype == "auto" || format.starts_with("hf"), "--dtype is an option of the hf formats (gguf: --type)");
    Model model = load_model(dir);
    check(lora.size() <= 1 && (lora.empty() || !model.has_lora()), "--lora: export writes one set of adapters: a "
          "LoRA checkpoint's own, or one PEFT directory's on a base");
    if (format == "gguf" && !lora.empty()) format = "gguf-lora";  // an adapter as GGUF: llama.cpp's LoRA file
    check(lora.empty() || format == "peft" || format == "gguf-lora", "--lora is an option of --format peft, gguf and "
          "gguf-lora");
    apply_lora(model, lora);
    const std::optional<Tokenizer> tok = model_tokenizer(dir);
    if (format == "gguf-lora") {
      export_gguf_lora(model, out);
      fmt::print("{}: GGUF LoRA for {} ({})\n", out, gguf_architecture(model.config()), lora_summary(model));
      return;
    }
    if (format == "peft") {  // a LoRA model's adapters alone, as PEFT saves them
      save_peft_adapter(model, out);
      fmt::print("{}: PEFT LoRA adapter ({})\n", out, lora_summary(model));
      return;
    }
    check_no_adapters(model, dir, "--format " + format);
    if (format != "gguf") model.ensure_values();  // Hugging Face's layouts hold float values
    if (format == "gguf") {
      export_gguf(model, out, tok ? &*tok : nullptr, {.type = type, .chat_template = model_chat_template(dir)});
      fmt::print("{}: GGUF {} ({}){}\n", out, gguf_architecture(model.config()), type.empty() ? "weights as held" : type,
                 tok ? ", with its tokenizer" : "");
      return;
    }
    check(type.empty(), "--type is an option of --format gguf");
    using Export = void (*)(const Model&, const std::filesystem::path&, const Tokenizer*, DType);
    const std::pair<const char*, Export> formats[] = {
        {"hf", export_hf},           {"hf-gpt2", export_hf_gpt2}, {"hf-llama", export_hf_llama},
        {"hf-gemma3", export_hf_gemma3}, {"hf-t5", export_hf_t5},  {"hf-bert", export_hf_bert}};
    const auto it = std::find_if(std::begin(formats), std::end(formats), [](const auto& f) { return format == f.first; });
    check(it != std::end(formats), "--format '{}': expected hf, hf-gpt2, hf-llama, hf-gemma3, hf-t5, hf-bert, gguf, peft "
          "or gguf-lora", format);
    const DType stored = export_dtype(dtype, dir);
    it->second(model, out, tok ? &*tok : nullptr, stored);
    finish_hf_export(dir, out);
    const std::string architecture =
        nlohmann::json::parse(read_file(std::filesystem::path(out) / "config.json"))["architectures"][0];
    fmt::print("{}: Hugging Face {} layout (config.json, model.safetensors in {}{})\n", out, architecture,
               stored == DType::BF16 ? "bf16" : stored == DType::F16 ? "f16" : "f32",
               tok ? ", tokenizer.json" : "");
  });
}

void add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quantize", "Quantize a model to ggml's blocks and write it as a GGUF file (llama.cpp's types and mixes; "
                  "llama.cpp runs the file, and so does attend generate|eval|chat --model FILE.gguf)");
  static std::string dir, out, type, calibration;
  static int64_t calibration_tokens = 32768;
  cmd->add_option("--model", dir, "A model directory or GGUF file")->required();
  cmd->add_option("--type", type,
                  "q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k (every matrix; the LM head Q6_K, or Q8_0 under "
                  "q8_0), or llama.cpp's mixes q4_k_m, q5_k_m (more bits for attn_v and ffn_down in some layers)")
      ->required();
  cmd->add_option("-o,--output", out, "The GGUF file to write")->required();
  cmd->add_option("--calibration", calibration,
                  "A text file: run the model over it and weigh each input column's quantization error by its mean "
                  "squared activation (llama.cpp's importance matrix)");
  cmd->add_option("--calibration-tokens", calibration_tokens, "Tokens of --calibration to run at most")
      ->capture_default_str();
  cmd->callback([] {
    check(type != "f32" && type != "f16" && type != "bf16" && !type.empty(),
          "--type '{}': a quantized type (for float types use attend export --format gguf --type)", type);
    const auto start = std::chrono::steady_clock::now();
    const Model model = load_model(dir);
    check_no_adapters(model, dir, "attend quantize");
    if (model.holds_quantized())
      fmt::print(stderr, "attend quantize: warning: {} is quantized already; its matrices are quantized again from their "
                         "dequantized values, which adds the second rounding to the first (quantize the F16 or F32 "
                         "model where there is one)\n", dir);
    const std::optional<Tokenizer> tok = model_tokenizer(dir);
    InputStatistics stats;
    if (!calibration.empty()) {
      check(tok.has_value(), "{}: no tokenizer to read --calibration with", dir);
      std::vector<int32_t> tokens = tok->encode(read_file(calibration));
      check(tokens.size() >= 2, "{}: too short to calibrate with ({} tokens)", calibration, tokens.size());
      if (static_cast<int64_t>(tokens.size()) > calibration_tokens) tokens.resize(static_cast<size_t>(calibration_tokens));
      const RecordInputs recording(stats);
      const EvalResult r = evaluate_lm(model, tokens, {.stride = model.config().max_seq_len});
      fmt::print("calibration: {} tokens of {}, perplexity {:.3f}\n", r.tokens + 1, calibration, r.perplexity);
    }
    export_gguf(model, out, tok ? &*tok : nullptr, {.type = type, .importance = calibration.empty() ? nullptr : &stats,
                                                    .chat_template = model_chat_template(dir)});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{}: {} {}, {:.1f} MB, in {:.1f} s\n", out, gguf_architecture(model.config()), type,
               static_cast<double>(std::filesystem::file_size(out)) / 1e6, seconds);
  });
}

}  // namespace

// `attend merge-lora`: a LoRA model's adapters (its own, or a PEFT directory's on a base) folded into its
// weights, W + s·B·A, written as a plain model directory.
void add_merge_lora(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "merge-lora", "Fold LoRA adapters into the weights (W + (alpha/r)·B·A) and write a plain model: a LoRA run's "
                    "checkpoint, or a base with a PEFT adapter (--lora)");
  static std::string dir, out;
  static std::vector<std::string> lora;
  cmd->add_option("--model", dir, "A model directory or GGUF file: a LoRA run's checkpoint, or the base of --lora")->required();
  cmd->add_option("--lora", lora, kLoraHelp);
  cmd->add_option("-o,--output", out, "The directory to write")->required();
  cmd->callback([] {
    // Written over its own input, a LoRA checkpoint lost its adapters and kept an optimizer state that no longer
    // matched; a Hugging Face base became Attend's layout.
    std::error_code same_error;
    check(!(fs::exists(out) && fs::equivalent(dir, out, same_error)),
          "merge-lora: --output {} is the --model directory: write the merged model to another directory", out);
    Model model = load_model(dir);
    apply_lora(model, lora);
    check(model.has_lora(), "{}: the model has no LoRA adapters to merge (give --lora DIR for a PEFT adapter)", dir);
    const size_t sets = model.adapters().size();
    const std::string first = lora_summary(model);
    model.merge_lora();
    const std::optional<Tokenizer> tok = model_tokenizer(dir);
    save_model(model, out, tok ? &*tok : nullptr);
    copy_generation_files(dir, out);  // its EOS ids and chat template, as the base had them
    fmt::print("{}: merged {} LoRA adapter set{} (the first {}); {} parameters{}\n", out, sets,
               sets == 1 ? "" : "s", first, grouped(model.count().total()),
               tok ? ", with its tokenizer" : "");
  });
}

void add_model_commands(CLI::App& app) {
  add_init(app);
  add_inspect(app);
  add_export(app);
  add_quantize(app);
  add_merge_lora(app);
}

}  // namespace attend::cli
