// `attend generate`: text from a decoder-only model, streamed as it is made.
#include "commands.h"

#include <attend/error.h>
#include <attend/log.h>
#include <attend/generate.h>
#include <attend/model.h>
#include <attend/tokenizer.h>
#include <attend/model_dir.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace attend::cli {

namespace {

WeightType weights_type(const std::string& weights) {  // --weights, named
  WeightType type;
  check(parse_weight_type(weights, type),
        "--weights '{}': expected f32, bf16, f16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k", weights);
  return type;
}

}  // namespace

void settle_sampling(SamplingOptions& sampling) {
  if (sampling.temperature == 0.0) sampling.greedy = true, sampling.temperature = 1.0;  // the argmax: τ unused
  try {
    sampling.validate();
  } catch (const Error& e) {  // "sampling: top-p must be ..." as the option is spelled here
    std::string what = e.what();
    for (const auto& [from, to] : {std::pair{"sampling: temperature", "--temperature"}, {"sampling: top-k", "--top-k"},
                                   {"sampling: top-p", "--top-p"}})
      if (what.starts_with(from)) what = to + what.substr(std::string_view(from).size());
    throw Error(what);
  }
}

Model load_for_running(const std::string& dir, const std::vector<std::string>& lora, const std::string& weights,
                       WeightType fallback, std::vector<ServedAdapter>* adapters) {
  // A GGUF file keeps its own types (F32 ones too: an F32 file had run in the fallback's bf16) unless --weights names
  // one; a directory takes `fallback`.
  const bool as_stored = weights.empty() && is_gguf_file(dir);
  const WeightType type = weights.empty() ? fallback : weights_type(weights);
  const bool direct = (type == WeightType::BF16 || type == WeightType::F16) && !as_stored;
  Model model = direct ? load_model(dir, type) : load_model(dir);
  auto names = apply_lora(model, lora);
  if (adapters != nullptr) *adapters = std::move(names);
  if (!direct && !as_stored) model.set_storage(type);
  // For running: a matrix held as stored keeps no fp32 copy of its values (a module saved beside the adapters took
  // values for its own fp32 copy only).
  model.hold_as_stored();
  return model;
}

std::vector<ServedAdapter> apply_lora(Model& model, const std::vector<std::string>& specs) {
  std::vector<ServedAdapter> loaded;
  for (const std::string& spec : specs) {
    // NAME= before the path (a name holds no '/'), :SCALE after it (a number, else part of the path).
    std::string dir = spec, name;
    const size_t eq = dir.find('=');
    if (eq != std::string::npos && dir.substr(0, eq).find('/') == std::string::npos)
      name = dir.substr(0, eq), dir = dir.substr(eq + 1);
    double scale = 1.0;
    if (const size_t colon = dir.rfind(':'); colon != std::string::npos) {
      const std::string tail = dir.substr(colon + 1);
      char* end = nullptr;
      const double x = std::strtod(tail.c_str(), &end);
      if (!tail.empty() && end == tail.c_str() + tail.size()) {
        check(std::isfinite(x), "--lora '{}': the scale '{}' is not a finite number", spec, tail);
        scale = x, dir = dir.substr(0, colon);
      }
    }
    check(!dir.empty(), "--lora '{}': expected [NAME=]DIR[:SCALE]", spec);
    if (name.empty()) {  // the directory's own name ("runs/mine/" → "mine"), a file's without its extension
      std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
      if (p.filename().empty()) p = p.parent_path();
      name = std::filesystem::is_regular_file(p) ? p.stem().string() : p.filename().string();
    }
    for (const ServedAdapter& other : loaded)
      check(other.name != name, "--lora '{}': a second adapter named '{}' (give NAME=DIR)", spec, name);
    // The first adapter of a model without any becomes its own (merge-lora, inspect); the others sit beside it.
    const std::string slot_name = model.adapters().empty() ? "" : fmt::format("adapter{}", model.adapters().size());
    const int slot = load_peft_adapter(model, dir, slot_name, scale);
    log::info("--lora {}: adapter '{}' (slot {}), scale ×{}", dir, name, slot, scale);
    loaded.push_back({.name = name, .slot = slot, .scale = scale, .path = dir});
  }
  return loaded;
}

std::optional<Tokenizer> model_tokenizer(const std::string& model) {
  if (is_gguf_file(model)) return load_gguf_tokenizer(model);
  if (Tokenizer::found_in(model)) return Tokenizer::load(model);
  return std::nullopt;
}

void set_special_tokens(const Tokenizer* tokenizer, const GenerationDefaults& defaults, const Model& model,
                        GenerateOptions& options) {
  // The model directory's own list (generation_config.json, config.json) first, as Hugging Face's generate reads it;
  // else the tokenizer's EOS ([SEP] in BERT-style vocabularies).
  options.eos = defaults.eos;
  if (options.eos.empty() && tokenizer != nullptr) {
    std::optional<int32_t> eos = tokenizer->special_id(SpecialRole::Eos);
    if (!eos) eos = tokenizer->special_id(SpecialRole::Sep);
    if (eos) options.eos = {*eos};
  }
  if (model.config().architecture == Architecture::EncoderDecoder) {
    // The prompt is the source; the decoder starts from decoder_start_token_id (T5: the pad token), else from BOS
    // ([CLS] in BERT-style vocabularies), as Attend trains it.
    options.decoder_start = defaults.decoder_start;
    if (!options.decoder_start && tokenizer != nullptr) options.decoder_start = tokenizer->special_id(SpecialRole::Bos);
    if (!options.decoder_start && tokenizer != nullptr) options.decoder_start = tokenizer->special_id(SpecialRole::Cls);
  }
}

namespace {

// {"ids": [...], "text": "..."}: the interface's JSON, one object a line; invalid UTF-8 is replaced.
nlohmann::ordered_json generation_json(const std::vector<int32_t>& ids, const std::string& text) {
  return {{"ids", ids}, {"text", text}};
}

void print_json(const nlohmann::ordered_json& j) {
  fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate", "Generate text with a model directory, streaming tokens (encoder-decoder models read the prompt as the source)");
  static std::string model_dir;
  static std::vector<std::string> prompt, prompt_ids;
  static GenerateOptions options;
  static std::vector<std::string> stops;
  static bool json_output = false;
  static BeamOptions beam{.width = 0};
  cmd->add_option("--model", model_dir,
                  "A model directory (e.g. runs/brown-gpt/checkpoint, or a Hugging Face checkpoint); without a "
                  "tokenizer in it, give --prompt-ids and get ids")
      ->required();
  auto* text = cmd->add_option("--prompt", prompt, "The prompt as text; repeat it to generate for several in one batch");
  auto* ids = cmd->add_option("--prompt-ids", prompt_ids, "The prompt as token ids, e.g. \"464,2415,3332\" (repeatable)");
  text->excludes(ids);
  cmd->add_option("--max-new-tokens", options.max_new_tokens, "Tokens to generate at most")->capture_default_str();
  auto* greedy = cmd->add_flag("--greedy", options.sampling.greedy, "Always take the most likely token");
  cmd->add_option("--temperature", options.sampling.temperature, "Softmax temperature (sampling; 0 is --greedy)")
      ->capture_default_str()->excludes(greedy);
  cmd->add_option("--top-k", options.sampling.top_k, "Sample from the k most likely tokens (0: all)")
      ->capture_default_str()->excludes(greedy);
  cmd->add_option("--top-p", options.sampling.top_p, "Sample from the smallest set of probability ≥ p, in (0, 1]")
      ->capture_default_str()->excludes(greedy);
  cmd->add_option("--seed", options.sampling.seed, "Seed of the sampling")->capture_default_str();
  auto* beam_width = cmd->add_option("--beam", beam.width, "Beam search with this many beams instead of sampling")
                         ->check(at_least(1));
  beam_width->excludes(greedy);
  cmd->add_option("--length-penalty", beam.length_penalty, "Beam search: score = log p / length^α")
      ->capture_default_str()->needs(beam_width);
  cmd->add_option("--n-best", beam.n_best, "Beam search: print this many hypotheses, best first")
      ->capture_default_str()->needs(beam_width);
  cmd->add_option("--stop", stops, "Stop when the text contains this string (repeatable; not with --beam)")
      ->excludes(beam_width);
  static std::string weights;
  static std::vector<std::string> lora;
  cmd->add_option("--weights", weights, std::string(kWeightsHelp) + " (default: f32, or as a GGUF file stores them)");
  cmd->add_option("--lora", lora, kLoraHelp);
  static std::string kv_cache = "f32";
  cmd->add_option("--kv-cache", kv_cache, "f32, f16 or int8: how the KV cache stores keys and values (f16 halves its memory and reads)")
      ->capture_default_str();
  cmd->add_flag("--json", json_output, "Print {\"ids\": [...], \"text\": \"...\"} instead of streaming");
  static std::string eos_ids;
  cmd->add_option("--eos", eos_ids, "Stop at these token ids, e.g. \"128001,128009\" (default: the model directory's "
                                    "generation_config.json, else the tokenizer's end-of-sequence token)");
  cmd->callback([] {
    check(!prompt.empty() || !prompt_ids.empty(), "give the prompt with --prompt TEXT or --prompt-ids IDS");
    check(options.max_new_tokens >= 1, "--max-new-tokens must be at least 1, got {}", options.max_new_tokens);
    settle_sampling(options.sampling);
    Model model = load_for_running(model_dir, lora, weights, WeightType::F32);
    options.cache = parse_cache_type(kv_cache);
    // Without a tokenizer the model still runs on ids: --prompt-ids in, ids out.
    std::optional<Tokenizer> tokenizer = model_tokenizer(model_dir);
    check(tokenizer || prompt.empty(),
          "{}: no tokenizer (tokenizer.json, encoder.json + vocab.bpe, or tokenizer.model) to read --prompt; give "
          "--prompt-ids",
          model_dir);
    check(tokenizer || stops.empty(), "{}: no tokenizer to find --stop strings with", model_dir);
    if (tokenizer)
      check(tokenizer->vocab_size() <= model.config().vocab_size,
            "{}: the tokenizer has {} tokens, the model's vocabulary {}", model_dir, tokenizer->vocab_size(),
            model.config().vocab_size);
    const Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
    auto text_of = [&](const std::vector<int32_t>& ids) {
      if (tok != nullptr) return tok->decode(ids);
      std::string out;
      for (int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
      return out;
    };
    std::vector<std::vector<int32_t>> inputs;
    // A Hugging Face checkpoint's prompt (its directory has transformers' tokenizer_config.json) gets what the
    // tokenizer adds to a text, as transformers' tokenizer(prompt) does: Llama's and Gemma's BOS, per tokenizer.json's
    // post-processor and tokenizer_config.json. Attend's own models get their text encoded as their training data
    // was.
    const bool hf_prompt = model.config().architecture == Architecture::Decoder &&
                           std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer_config.json");
    for (const std::string& p : prompt) inputs.push_back(hf_prompt ? tok->encode_prompt(p) : tok->encode(p));
    for (const std::string& p : prompt_ids) inputs.push_back(parse_ids(p, "--prompt-ids"));
    for (const auto& input : inputs)
      for (int32_t id : input)
        check(id < model.config().vocab_size, "--prompt-ids: {} is not a token id of the model's vocabulary of {}", id,
              model.config().vocab_size);
    const std::vector<int32_t>& input = inputs[0];
    options.stop = stops;
    set_special_tokens(tok, read_generation_defaults(model_dir), model, options);
    if (!eos_ids.empty()) options.eos = parse_ids(eos_ids, "--eos");
    check_token_ids(options.eos, model.config().vocab_size, "end-of-sequence token");
    beam.decoder_start = options.decoder_start;
    beam.cache = options.cache;
    beam.vocab = sampled_vocab(model, tok);
    if (inputs.size() > 1) {  // several prompts: one batch, one line (or JSON object) per prompt
      check(beam.width == 0, "--beam takes one prompt at a time");
      for (const Generation& g : generate_batch(model, tok, inputs, options)) {
        if (json_output)
          print_json(generation_json(g.ids, tok ? g.text : text_of(g.ids)));
        else
          fmt::print("{}\n", tok ? g.text : text_of(g.ids));
      }
      return;
    }
    if (beam.width > 0) {
      const auto hypotheses = beam_search(model, input, options.max_new_tokens, options.eos, beam);
      if (json_output) {
        nlohmann::ordered_json j = generation_json(hypotheses[0].ids, text_of(hypotheses[0].ids));
        if (hypotheses.size() > 1)
          for (const Hypothesis& h : hypotheses)
            j["n_best"].push_back(nlohmann::ordered_json{{"ids", h.ids}, {"text", text_of(h.ids)}, {"score", h.score}});
        print_json(j);
        return;
      }
      for (const Hypothesis& h : hypotheses)
        fmt::print("{}{}\n", hypotheses.size() > 1 ? fmt::format("[{:.4f}] ", h.score) : "", text_of(h.ids));
      return;
    }
    std::string printed;
    std::vector<int32_t> so_far;
    std::optional<StreamDecoder> stream;
    if (tok != nullptr) stream.emplace(*tok);
    const Generation g = generate(model, tok, input, options, [&](int32_t id) {
      if (json_output) return true;
      // The text that later ids leave as it is: a character whose bytes span ids is printed once they have all come
      // (printed at once as U+FFFD, the rest of the line was lost when they had).
      std::string now;
      if (stream) {
        stream->push(id);
        now = stream->settled();
      } else {
        so_far.push_back(id);
        now = text_of(so_far);
      }
      // Not the start of a stop string that the next ids may complete (it would be cut from the text).
      now.resize(scan_stops(now, printed.size(), options.stop).end);
      if (now.size() > printed.size() && now.compare(0, printed.size(), printed) == 0) {
        fmt::print("{}", now.substr(printed.size()));
        std::fflush(stdout);
        printed = now;
      }
      return true;
    });
    const std::string text = tok ? g.text : text_of(g.ids);
    if (json_output) {
      print_json(generation_json(g.ids, text));
      return;
    }
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0)
      fmt::print("{}", text.substr(printed.size()));
    fmt::print("\n");
    std::fflush(stdout);  // the text first, then the figures on stderr
    const bool context_full = g.stopped_by == "length" && static_cast<int64_t>(g.ids.size()) < options.max_new_tokens;
    fmt::print(stderr, "{} tokens ({}), prompt {:.0f} ms, {:.1f} tokens/s\n", g.ids.size(),
               context_full ? fmt::format("length: the context of {} is full", model.config().max_seq_len) : g.stopped_by,
               1e3 * g.prompt_seconds, g.generate_seconds > 0 ? double(g.ids.size()) / g.generate_seconds : 0.0);
  });
}

}  // namespace attend::cli
