// Models on disk (docs/FORMATS.md, "The model directory"): Attend's model directory and Hugging Face's
// checkpoints (GPT-2, the Llama family). The model layer (attend/model.h) knows nothing of files; these
// read and write them.
//
//   attend::Model model = attend::load_model("runs/brown-gpt/checkpoint");
//   attend::save_model(model, "out", &tokenizer, attend::WeightType::BF16);
#pragma once

#include <attend/model.h>
#include <attend/safetensors.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attend {

class Tokenizer;

// Reads DIR/config.json and DIR/model.safetensors, checking every tensor against the configuration. Hugging
// Face checkpoint directories are read as published: GPT-2 (its config.json keys), the Llama family
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) and Gemma 3's text model
// (Gemma3ForCausalLM, or the language model of Gemma3ForConditionalGeneration), T5 (T5ForConditionalGeneration) and
// BERT (BertModel, BertForMaskedLM, BertForPreTraining, BertForSequenceClassification);
// one model.safetensors or shards with their index.
// `matrices` BF16 or F16: the model as set_storage(matrices) and hold_as_stored() make it, for running: a Hugging
// Face decoder of the Llama family or Gemma 3 has its matrices read straight into their 16 bits (a piece of rows at
// a time through fp32: 2 bytes a weight while loading, not 6); other models load as fp32, then are converted.
Model load_model(const std::filesystem::path& dir, WeightType matrices = WeightType::F32);
// What a model directory says about generating with it: the token ids of Hugging Face's generation_config.json, or
// of config.json for those it leaves out (as transformers derives one from the other). Empty where neither says.
struct GenerationDefaults {
  std::optional<int32_t> bos, pad, decoder_start;
  std::vector<int32_t> eos;  // any of them ends a sequence (Llama 3's instruct models list three)
};
// DIR/generation_config.json and DIR/config.json, either or both missing. Errors name the file and the key.
GenerationDefaults read_generation_defaults(const std::filesystem::path& dir);
// Copies what a model directory `source` says about generating and chatting, beside its weights, into `out`:
// generation_config.json (EOS ids), tokenizer_config.json (BOS/EOS, the chat template), special_tokens_map.json,
// chat_template.jinja; those it has and `out` lacks. Nothing when `source` is not a directory (a GGUF file).
void copy_generation_files(const std::filesystem::path& source, const std::filesystem::path& out);
// The same from the files' text (empty: no such file); the origins name them in errors.
GenerationDefaults parse_generation_defaults(std::string_view generation_config, std::string_view config,
                                             std::string_view generation_origin = "generation_config.json",
                                             std::string_view config_origin = "config.json");

// The configuration load_model(dir) would build, read without the weights (Hugging Face's config keys mapped).
ModelConfig load_model_config(const std::filesystem::path& dir);
// A GGUF file (llama.cpp's format) is read by load_model, load_model_config and read_generation_defaults too;
// its tokenizer (tokenizer.ggml.*) by this: nullopt when the file holds none, an error for a kind not read yet.
bool is_gguf_file(const std::filesystem::path& path);
std::optional<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& path);
// Its chat template (tokenizer.chat_template); nullopt when it has none.
std::optional<std::string> gguf_chat_template(const std::filesystem::path& path);

// Writes a decoder as one GGUF file (llama.cpp's format) of the architecture its options make it: gpt2 (learned
// positions, LayerNorm, biases, GELU), llama (RoPE, RMSNorm, SwiGLU; Mistral's window), qwen2 (llama's with
// q, k, v biases) or qwen3 (llama's with head norms, any head size), with the tokenizer as tokenizer.ggml.*
// (byte-level BPE) when given. `type`:
//   ""                   each weight as the model holds it: quantized blocks as they are, fp32 values as F32
//   f32, f16, bf16       every matrix in that type (norms and biases F32)
//   q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//                        every multiplied matrix in that block type, the LM head in Q6_K (Q8_0 for q8_0), the
//                        position table F32, as llama.cpp's llama-quantize does
//   q4_k_m, q5_k_m       llama.cpp's mixes: q4_k (q5_k), with Q6_K for attn_v and ffn_down in the first and last
//                        eighth of the layers and every third between, and Q5_K (Q6_K) for gpt2's fused attn_qkv
// A matrix whose rows are not whole blocks takes llama.cpp's fallback (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0).
// `importance` (from a RecordInputs over a calibration text) weighs each column's error in quantizing.
// `chat_template`, when not empty, is written as tokenizer.chat_template.
struct GgufExportOptions {
  std::string type;
  const InputStatistics* importance = nullptr;
  std::string chat_template;
};
std::vector<std::string> gguf_export_types();  // the types above but ""
// The GGUF architecture export_gguf writes a model of this configuration as ("gpt2", "llama", "qwen2", "qwen3",
// "gemma3", "bert"); an error names the option none of them can express.
std::string gguf_architecture(const ModelConfig& c);
void export_gguf(const Model& model, const std::filesystem::path& file, const Tokenizer* tokenizer = nullptr,
                 const GgufExportOptions& options = {});
// The model's own LoRA adapters as a GGUF LoRA file that llama.cpp applies with --lora to the model's GGUF file
// (export_gguf's, or its converter's): "<tensor>.lora_a" and ".lora_b" beside adapter.lora.alpha. A GGUF tensor
// that holds several adapted projections (gpt2's attn_qkv) gets them as one adapter of their summed rank.
void export_gguf_lora(const Model& model, const std::filesystem::path& file);
// Writes DIR/config.json, DIR/model.safetensors and, given one, DIR/tokenizer.json; each atomically.
// Weights are stored as F32 (bit-exact), or rounded to BF16 or F16 (half the size).
void save_model(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
                WeightType weights = WeightType::F32);

// Writes a decoder model in Hugging Face's GPT-2 layout: config.json with GPT-2's keys, model.safetensors
// with Conv1D weights [in, out] under GPT-2's names, and tokenizer.json when given. load_model reads the
// result back. Options GPT-2 cannot express (RMSNorm, RoPE, GQA, MoE, ...) are errors naming the option.
void export_hf_gpt2(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
                    DType dtype = DType::F32);
// Writes a decoder in Hugging Face's Llama layout (LlamaForCausalLM: config.json, model.safetensors,
// tokenizer.json when given); load_model reads it back bit for bit. Options Llama cannot express (LayerNorm,
// biases, learned positions, MoE, ...) are errors naming the option.
void export_hf_llama(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
                     DType dtype = DType::F32);
// Writes a Gemma-style decoder (sandwich norms of 1 + γ, q/k norms, GeGLU, scaled embeddings, local layers with
// a sliding window) in Hugging Face's Gemma3ForCausalLM layout; load_model reads it back bit for bit.
void export_hf_gemma3(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
                      DType dtype = DType::F32);
// Writes an encoder-decoder model with T5's options (relative position buckets with one table a stack, pre-LN
// RMSNorm, no biases, unscaled scores; ReLU, gated-GELU or gated-SiLU FFNs) in T5ForConditionalGeneration's layout.
void export_hf_t5(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
                  DType dtype = DType::F32);
// Writes an encoder with BERT's options (post-LN LayerNorm, learned positions, token types, a normed embedding) as
// BertForSequenceClassification (with a classification head), BertForMaskedLM (with a masked-LM head) or BertModel.
void export_hf_bert(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
                    DType dtype = DType::F32);
// Writes the model in the Hugging Face layout of its family (GPT-2, Llama/Mistral/Qwen, Gemma 3, T5, BERT), chosen
// from its options; an error names what no layout can express. Every export_hf* writes its tensors as `dtype` (F32,
// BF16 or F16), config.json's torch_dtype with them.
void export_hf(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer = nullptr,
               DType dtype = DType::F32);

// LoRA adapters in PEFT's files (adapter_config.json, adapter_model.safetensors with PEFT's names, as
// `PeftModel.save_pretrained` writes them) for each family's Hugging Face layout: GPT-2, the Llama family, BERT
// and T5 (formats/peft.cpp lists the modules). save writes the model's own adapters (Model::add_lora, or a LoRA
// run's checkpoint) and the modules trained beside them (a classification head); load adds the directory's
// adapters (its r, lora_alpha, target_modules, exclude_modules, rank_pattern, alpha_pattern, layers_to_transform,
// layers_pattern, use_rslora, lora_dropout) to the model, as its own (name "") or
// beside them (LoraConfig::name), their scale times `multiplier`, and returns their slot (Model::adapters).
// Errors name the file and the field or tensor.
void save_peft_adapter(const Model& model, const std::filesystem::path& dir, const std::string& base_model = "");
int load_peft_adapter(Model& model, const std::filesystem::path& dir, const std::string& name = "",
                      double multiplier = 1.0);
// adapter_config.json's text: the adapters' options (lora.targets empty: they follow from target_modules and the
// model's layout) and the module names it lists (load_peft_adapter reads it so; fuzz/ reaches it).
struct PeftConfig {
  LoraConfig lora;
  std::vector<std::string> target_modules;  // names a module's name ends with (PEFT's list form)
  // Or target_modules as one string, as PEFT takes it: a regular expression that a module's whole name must match
  // (re.fullmatch, on PCRE2, which reads Python's syntax), or "all-linear".
  std::string target_pattern;
  // exclude_modules: names a module's name ends with, or one regular expression for the whole name; those modules
  // take no adapter.
  std::vector<std::string> exclude_modules;
  std::string exclude_pattern;
  // rank_pattern and alpha_pattern in the file's order: a module takes the value of the first key (a regular
  // expression) that matches the end of its name after a dot, or all of it (PEFT's re.match(rf"(.*\.)?({key})$")),
  // else lora.r or lora.alpha.
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  // layers_to_transform (empty: every layer): with target_modules as a list, a module its list names by the end of
  // its name is adapted only in these layers: the number after layers_pattern's name (any of them, in turn) in the
  // module's name, or without layers_pattern the last number between two names after the first two (PEFT's
  // re.match(r".*\.[^.]*\.(\d+)\.")).
  std::vector<int64_t> layers_to_transform;
  std::vector<std::string> layers_pattern;
};
PeftConfig parse_peft_config(std::string_view text, std::string_view origin);
// Which modules a PeftConfig adapts, each with its rank and alpha, as PEFT decides (check_target_module_exists,
// get_pattern_key), its patterns compiled once: adapter("model.layers.0.self_attn.q_proj") is nullopt for a module
// it leaves alone. Errors name `where` and the pattern (one that backtracks without end: PCRE2's match limit).
class PeftModules {
 public:
  PeftModules(PeftConfig peft, std::string where);
  ~PeftModules();
  std::optional<LoraConfig::Rank> adapter(const std::string& module) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend
