// `attend serve`: an OpenAI-compatible HTTP server on the serving engine (attend/engine.h).
//
//   POST /v1/completions, /v1/chat/completions (streamed as server-sent events with "stream": true),
//   /v1/embeddings; GET /v1/models, /health (503 while the model loads), /metrics (Prometheus text);
//   POST /tokenize, /detokenize; GET and POST /lora-adapters; GET / (a playground page). docs/SERVER.md describes
//   each.
//
// The server listens at once and loads the model on another thread, so that /health can say "loading". Errors
// are OpenAI's JSON ({"error": {"message", "type", "param", "code"}}) with a 4xx status for the client's mistakes.
#pragma once

#include <attend/chat_template.h>
#include <attend/engine.h>
#include <attend/model.h>
#include <attend/tokenizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attend {

// A LoRA adapter `attend serve --lora [NAME=]DIR[:SCALE]` loaded: its id in the API, its slot in the model
// (Model::adapters), the SCALE it was loaded with and its directory.
struct ServedAdapter {
  std::string name;
  int slot = 0;
  double scale = 1.0;
  std::string path;
};

// What the server runs: the model and what it needs besides (a tokenizer for text, a chat template for chat).
struct ServedModel {
  Model model;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::vector<int32_t> eos;  // the tokens that end a completion (EOS, end of turn)
  // LoRA adapters (`attend serve --lora NAME=DIR`) with their slots in the model (Model::adapters). Each is a
  // model of its own in the API: a request naming it runs with that adapter alone, one naming the base model
  // without them, one naming none with all of them; requests for different adapters share the engine's steps.
  // A request's "lora" list (llama-server's: {"id": index here, "scale"}) picks them and their scales instead, and
  // POST /lora-adapters sets the scales of the requests that name neither (llama-server's global scales).
  std::vector<ServedAdapter> adapters;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (port() says which)
  std::string api_key;                // non-empty: /v1/*, /tokenize and /detokenize need "Authorization: Bearer KEY"
  std::string model_name = "attend";  // the id /v1/models lists (with the adapters'); requests naming another get 404
  EngineOptions engine;
  size_t max_body_bytes = 8u << 20;   // larger request bodies get 413
  int request_timeout_s = 600;        // a completion's deadline
  int read_timeout_s = 30;            // a client that sends its request slower than this is dropped
  std::string embedding_pooling;      // decoders: "last" (default) or "mean"; encoders use their own (CLS or mean)
  // Browsers' cross-origin requests (CORS): the origin allowed in Access-Control-Allow-Origin ("*": any, as
  // llama-server and vLLM allow by default); empty: none (no header, preflights refused).
  std::string cors_origin = "*";
  // false: requests that name no model run without the adapters until POST /lora-adapters gives them scales
  // (llama-server's --lora-init-without-apply).
  bool lora_apply = true;
};

class Server {
 public:
  // Binds the address (an error names it when it cannot) and starts loading with `load` on another thread.
  Server(ServerOptions options, std::function<ServedModel()> load);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Whether the model is still loading (/health answers 503 "loading").
  bool loading() const;
  // Serves until stop() (from another thread, or the signal thread). When the model fails to load the server
  // stops by itself and run() throws an Error naming the failure (as llama-server exits): nothing could be served.
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend
