// Each subcommand of `attend` lives in its own file and registers itself here.
#pragma once

#include <attend/server.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace attend {
enum class WeightType;
class ChatTemplate;
class Model;
class Tokenizer;
struct GenerateOptions;
struct GenerationDefaults;
struct SamplingOptions;
}  // namespace attend

namespace attend::cli {

// Thrown to end `attend` with this exit status after a command finished its work its own way: training stopped by
// Ctrl-C or SIGTERM, its checkpoint written, exits 128 + the signal's number as an interrupted program does, so
// that a script (`set -e`, `&&`) does not go on as if the run were complete.
struct ExitStatus {
  int code;
};

// The tokens that end a sequence and, for encoder-decoder models, the decoder's start token: the model directory's
// (generation_config.json, config.json), else the tokenizer's EOS (or [SEP]) and BOS (or [CLS]), as training used.
void set_special_tokens(const Tokenizer* tokenizer, const GenerationDefaults& defaults, const Model& model,
                        GenerateOptions& options);

// Checks an option's value is a number of at least `lo` (CLI11's PositiveNumber said "not in range 0.000000 to"
// and a number of 309 digits).
inline CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        double x = 0;
        if (CLI::detail::lexical_cast(text, x) && x >= lo) return {};
        std::ostringstream say;
        say << "expected a number of at least " << lo << ", got '" << text << "'";
        return say.str();
      },
      "", "at_least");
}

// The sampling options of generate and chat, checked before the model loads: a temperature of 0 is greedy decoding
// (as OpenAI's API and llama.cpp take it); anything else out of range is an error naming the option.
void settle_sampling(SamplingOptions& sampling);

// Token ids written "1,2,3", "1 2 3", "[1, 2]" or one per line; anything else is an error naming `origin`
// and the bad entry.
std::vector<int32_t> parse_ids(const std::string& text, std::string_view origin);
// Each id below `vocab` (the model's vocabulary): else an error naming `what` and the id (an end token past it was
// accepted and never matched).
void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, std::string_view what);

// --weights: how a model's matrices are kept for running. Rounds and packs them (Model::set_storage); an error
// naming the accepted types for any other name.
inline constexpr const char* kWeightsHelp =
    "how the matrices are kept for running: f32, bf16, f16 (rounded and packed: half the bytes), or quantized to "
    "ggml's blocks: q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k (8.5 to 4.5 bits a weight)";
// The tokenizer a model carries: a GGUF file's tokenizer.ggml.*, or a directory's tokenizer.json (encoder.json +
// vocab.bpe, tokenizer.model); nullopt when there is none.
std::optional<Tokenizer> model_tokenizer(const std::string& model);
// A model's chat template: --template (a .jinja file or a tokenizer_config.json) when given, else the model
// directory's (chat_template.jinja, tokenizer_config.json) or a GGUF file's tokenizer.chat_template with the
// tokenizer's BOS and EOS as the template's. An error says what was looked for.
ChatTemplate model_chat_template(const std::string& model, const Tokenizer& tokenizer, const std::string& template_path,
                                 const std::string& template_name);
// The tokens that end a reply: the model's (generation_config.json, config.json), the template's eos_token and the
// tokenizer's EOS; or the ids of `eos` ("1,2") when given.
std::vector<int32_t> reply_end_tokens(const std::string& model, const Tokenizer& tokenizer, const ChatTemplate* tmpl,
                                      const std::string& eos);
// --lora [NAME=]DIR[:SCALE], repeatable: PEFT LoRA adapter directories (or llama.cpp's GGUF LoRA files) the model
// runs with, each's output times SCALE (default 1). Returns each adapter's name (NAME, else the directory's own name
// or the file's without its extension), slot (Model::adapters), SCALE and path.
inline constexpr const char* kLoraHelp =
    "[NAME=]DIR[:SCALE]: a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors), or "
    "llama.cpp's GGUF LoRA file, to run the model with, its output times SCALE (default 1); repeat for several at "
    "once";
std::vector<ServedAdapter> apply_lora(Model& model, const std::vector<std::string>& specs);
// The model at `dir` for running with `lora` and `weights` (load_model, apply_lora, then Model::set_storage and
// hold_as_stored): `weights` names a type; without it a GGUF file runs as it stores its matrices (F32, F16, BF16 or
// quantized) and a directory in `fallback`. A 16-bit type, given or the fallback for a directory, is read straight
// into 16 bits (load_model's `matrices`: 2 bytes a weight while loading, not 6), and the adapters then join it in fp32 (small; a PEFT module saved beside them stays fp32
// too). The adapters (apply_lora's list) go to *adapters when given.
Model load_for_running(const std::string& dir, const std::vector<std::string>& lora, const std::string& weights,
                       WeightType fallback, std::vector<ServedAdapter>* adapters = nullptr);

// "loss L nats (B bits), perplexity P" for a loss per byte of text in nats (`attend train`, `attend eval`).
std::string per_byte_summary(double loss_per_byte);

// Adds `attend info`: version, threads, GEMM backend and CPU features.
void add_info_command(CLI::App& app);
// Adds `attend tokenizer train|info`, `attend tokenize` and `attend detokenize`.
void add_tokenizer_commands(CLI::App& app);
// Adds `attend init`, `attend inspect`, `attend export` and `attend quantize`.
void add_model_commands(CLI::App& app);
// Adds `attend train`, `attend schedule` and `attend plot`.
void add_train_commands(CLI::App& app);
// Adds `attend generate`.
void add_generate_command(CLI::App& app);
// Adds `attend eval`, `attend eval-seq2seq` and `attend eval-classify`.
void add_eval_command(CLI::App& app);
// Adds `attend chat-template`.
void add_chat_template_command(CLI::App& app);
// Adds `attend chat`.
void add_chat_command(CLI::App& app);
// Adds `attend serve`.
void add_serve_command(CLI::App& app);

}  // namespace attend::cli
