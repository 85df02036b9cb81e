// `attend init` (a freshly initialised model directory from a config) and `attend inspect` (parameters,
// shapes, totals by part, and the memory training needs).
#include "commands.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/tokenizer.h>
#include <attend/model_dir.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

namespace attend::cli {

namespace {

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
  static bool json_output = false, summary = false;
  cmd->add_option("model", dir, "A model directory (config.json + model.safetensors)")->required();
  cmd->add_flag("--json", json_output, "Print one JSON object instead of tables");
  cmd->add_flag("--summary", summary, "Leave out the per-tensor table");
  cmd->callback([] {
    const Model model = load_model(dir);
    const ModelConfig& c = model.config();
    const ParameterCount n = model.count();
    const double weights = 4.0 * double(n.total());
    const bool enc_dec = c.architecture == Architecture::EncoderDecoder;
    if (json_output) {
      nlohmann::ordered_json j;
      j["architecture"] = architecture_name(c.architecture);
      j["parameters"] = {{"embeddings", n.embeddings}, {"attention", n.attention}, {"ffn", n.ffn},
                         {"norms", n.norms},           {"heads", n.heads},         {"total", n.total()}};
      j["tensors"] = nlohmann::ordered_json::array();
      for (const Parameter* p : model.parameters())
        j["tensors"].push_back({{"name", p->name},
                                {"shape", std::vector<int64_t>(p->value.shape().begin(), p->value.shape().end())},
                                {"role", role_name(p->role)}});
      j["memory_bytes"] = {{"weights", weights}, {"gradients", weights}, {"adamw_moments", 2 * weights}};
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("{}: {}, {} layers{}, d_model {}, {} heads ({} key/value), d_ff {}, vocabulary {}, context {}\n", dir,
               architecture_name(c.architecture), c.n_layers,
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
    fmt::print("{:<12} {:>14}\n", "total", grouped(n.total()));
    fmt::print("\nmemory (fp32): weights {}, gradients {}, AdamW moments {}; training {} before activations\n",
               bytes(weights), bytes(weights), bytes(2 * weights), bytes(4 * weights));
  });
}

void add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Write a model in a Hugging Face layout: its family's (hf), or one named (hf-gpt2: GPT2LMHeadModel; "
                "hf-llama: LlamaForCausalLM, MistralForCausalLM, Qwen2/Qwen3ForCausalLM; hf-gemma3: Gemma3ForCausalLM; hf-t5: T5ForConditionalGeneration; hf-bert: BertForMaskedLM, BertForSequenceClassification, BertModel)");
  static std::string dir, out, format = "hf";
  cmd->add_option("--model", dir, "A model directory")->required();
  cmd->add_option("--format", format, "hf (the model's family), hf-gpt2, hf-llama, hf-gemma3, hf-t5 or hf-bert")->capture_default_str();
  cmd->add_option("-o,--output", out, "The directory to write")->required();
  cmd->callback([] {
    using Export = void (*)(const Model&, const std::filesystem::path&, const Tokenizer*);
    const std::pair<const char*, Export> formats[] = {
        {"hf", export_hf},           {"hf-gpt2", export_hf_gpt2}, {"hf-llama", export_hf_llama},
        {"hf-gemma3", export_hf_gemma3}, {"hf-t5", export_hf_t5},  {"hf-bert", export_hf_bert}};
    const auto it = std::find_if(std::begin(formats), std::end(formats), [](const auto& f) { return format == f.first; });
    check(it != std::end(formats), "--format '{}': expected hf, hf-gpt2, hf-llama, hf-gemma3, hf-t5 or hf-bert", format);
    const Model model = load_model(dir);
    std::optional<Tokenizer> tok;
    if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) tok.emplace(Tokenizer::load(dir));
    it->second(model, out, tok ? &*tok : nullptr);
    const std::string architecture =
        nlohmann::json::parse(read_file(std::filesystem::path(out) / "config.json"))["architectures"][0];
    fmt::print("{}: Hugging Face {} layout (config.json, model.safetensors{})\n", out, architecture,
               tok ? ", tokenizer.json" : "");
  });
}

}  // namespace

void add_model_commands(CLI::App& app) {
  add_init(app);
  add_inspect(app);
  add_export(app);
}

}  // namespace attend::cli
