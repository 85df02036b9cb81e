// `attend serve`: the OpenAI-compatible server (attend/server.h) on a model directory or GGUF file, until Ctrl-C
// or SIGTERM.
#include "commands.h"
#include "signals.h"

#include <attend/chat_template.h>
#include <attend/error.h>
#include <attend/model_dir.h>
#include <attend/server.h>
#include <attend/tokenizer.h>

#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace attend::cli {

namespace {

struct ServeSettings {
  std::string model, tokenizer_path, template_path, template_name, weights, kv_cache = "f16", alias, eos_ids;
  std::vector<std::string> lora;
  ServerOptions server;
};

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP with OpenAI's API: /v1/completions, "
                                          "/v1/chat/completions, /v1/embeddings, /v1/models, /health, /metrics, "
                                          "/tokenize, /detokenize, /lora-adapters, and a playground at / "
                                          "(docs/SERVER.md)");
  static ServeSettings s;
  ServerOptions& o = s.server;
  cmd->add_option("--model", s.model, "A model directory (Attend's or a Hugging Face checkpoint) or a GGUF file")->required();
  cmd->add_option("--host", o.host, "Address to listen on (0.0.0.0: every interface)")->capture_default_str();
  cmd->add_option("--port", o.port, "Port to listen on (0: any free one, printed)")
      ->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o.engine.max_sequences, "Sequences generated at once (continuous batching)")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--ctx", o.engine.context, "Positions per sequence (0: the model's context)")
      ->capture_default_str()->check(at_least(0));
  cmd->add_option("--kv-blocks", o.engine.kv_blocks, "KV-cache blocks of 32 positions shared by all sequences (0: "
                                                     "parallel × ctx / 32)")->capture_default_str();
  cmd->add_option("--kv-cache", s.kv_cache, "f32, f16 or int8: the KV cache's storage")->capture_default_str();
  cmd->add_option("--chunk", o.engine.chunk, "Prompt positions a sequence runs per step (a multiple of 32), and the "
                                             "unit of prefix sharing")->capture_default_str();
  cmd->add_flag_callback("--no-prefix-cache", [] { s.server.engine.prefix_cache = false; },
                         "Do not reuse the blocks of earlier prompts");
  cmd->add_option("--queue", o.engine.max_queue, "Requests waiting beyond which the server answers 429 (a request's "
                                                 "prompts wait as one each)")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--api-key", o.api_key, "Require 'Authorization: Bearer KEY' (default: the ATTEND_API_KEY variable, "
                                          "if set)")->envname("ATTEND_API_KEY");
  cmd->add_option("--alias", s.alias, "The model's id in the API (default: the directory's or file's name)");
  cmd->add_option("--timeout", o.request_timeout_s, "Seconds a completion may take before it ends")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--read-timeout", o.read_timeout_s, "Seconds a client may take to send its request")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--max-body", o.max_body_bytes, "Largest request body in bytes (larger: 413)")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--cors", o.cors_origin, "The origin whose web pages may call the API from a browser (CORS): \"*\" "
                                           "any, \"\" none, or one such as http://localhost:3000")->capture_default_str();
  cmd->add_option("--embedding-pooling", o.embedding_pooling, "Decoders' embeddings: last (the last token's state) "
                                                              "or mean")->check(CLI::IsMember({"last", "mean"}));
  cmd->add_option("--tokenizer", s.tokenizer_path, "The tokenizer, if not in the model directory");
  cmd->add_option("--template", s.template_path, "A chat template (.jinja, or a tokenizer_config.json), if not the model's");
  cmd->add_option("--template-name", s.template_name, "Which of a config's named templates (e.g. tool_use)");
  cmd->add_option("--lora", s.lora, std::string(kLoraHelp) + ". Each adapter is a model of its own in the API (its "
                  "NAME, or the directory's name): a request naming it runs with it alone, one naming the base "
                  "model without adapters, one naming none with all of them (at the scales POST /lora-adapters "
                  "sets); requests for different adapters are batched together");
  cmd->add_flag_callback("--lora-init-without-apply", [] { s.server.lora_apply = false; },
                         "Requests that name no model run without the adapters until POST /lora-adapters sets their "
                         "scales (llama-server's option)");
  cmd->add_option("--weights", s.weights, std::string(kWeightsHelp) + " (default: bf16, or as a GGUF file stores them)");
  cmd->add_option("--eos", s.eos_ids, "End completions at these token ids (default: the model's end tokens)");
  cmd->callback([] {
    o.engine.cache = parse_cache_type(s.kv_cache);
    o.model_name = !s.alias.empty() ? s.alias : std::filesystem::path(s.model).filename().string();
    if (o.model_name.empty()) o.model_name = std::filesystem::path(s.model).parent_path().filename().string();
    auto load = [] {
      std::vector<ServedAdapter> adapters;
      ServedModel m{load_for_running(s.model, s.lora, s.weights, WeightType::BF16, &adapters), std::nullopt,
                    std::nullopt, {}, {}};
      m.adapters = std::move(adapters);
      for (const ServedAdapter& a : m.adapters)
        check(a.name != o.model_name, "--lora: the adapter '{}' has the model's own name (give NAME=DIR or --alias)",
              a.name);
      m.tokenizer = s.tokenizer_path.empty() ? model_tokenizer(s.model) : Tokenizer::load(s.tokenizer_path);
      if (m.tokenizer) {
        check(m.tokenizer->vocab_size() <= m.model.config().vocab_size, "{}: the tokenizer has {} tokens, the model's "
              "vocabulary {}", s.model, m.tokenizer->vocab_size(), m.model.config().vocab_size);
        try {  // a model without a chat template still serves completions
          m.chat_template = model_chat_template(s.model, *m.tokenizer, s.template_path, s.template_name);
        } catch (const Error& e) {
          if (!s.template_path.empty()) throw;
          fmt::print(stderr, "serve: no chat template ({}); /v1/chat/completions will answer 400\n", e.what());
        }
        m.eos = reply_end_tokens(s.model, *m.tokenizer, m.chat_template ? &*m.chat_template : nullptr, s.eos_ids);
      } else if (!s.eos_ids.empty()) {
        m.eos = parse_ids(s.eos_ids, "--eos");
      }
      check_token_ids(m.eos, m.model.config().vocab_size, "end-of-sequence token");
      return m;
    };
    Server server(o, load);
    const StopOnSignal on_signal([&](int signal) {  // on the signal thread (signals.h)
      // While the model loads nothing has been served and nothing is being written: end at once, not after the load
      // (minutes for a large model read from a slow disk), as a clean stop does.
      if (server.loading()) {
        std::fputs("serve: stopped while the model was loading\n", stderr);
        std::fflush(nullptr);
        std::_Exit(0);
      }
      std::fputs(signal == SIGINT ? "serve: interrupted, stopping\n" : "serve: terminated, stopping\n", stderr);
      server.stop();
    });
    // Said once a signal stops the server as it should (a script waiting for this line may send one at once).
    fmt::print(stderr, "serve: listening on http://{}:{} (model '{}' loading)\n", o.host, server.port(), o.model_name);
    server.run();
  });
}

}  // namespace attend::cli
