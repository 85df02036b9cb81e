// OpenAI's API as `attend serve` speaks it: the request bodies of /v1/completions, /v1/chat/completions,
// /v1/embeddings, /tokenize and /detokenize read and checked field by field (every parser of outside input here
// has a fuzz target: fuzz/openai_request.cpp), and the error body clients expect.
#pragma once

#include <attend/error.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace attend::serve {

// An error with its HTTP status and OpenAI's fields: {"error": {"message", "type", "param", "code"}}.
class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : Error(message), status(status), param(std::move(param)), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string param, type, code;
};
std::string error_body(const std::string& message, std::string_view type, std::string_view param = {},
                       std::string_view code = {});

// One prompt of /v1/completions: text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

// llama-server's list of LoRA adapters and their scales, [{"id": 0, "scale": 0.5}, ...]: each adapter by its index
// among `attend serve --lora` (0-63), its scale a number in [-1e6, 1e6], none listed twice.
using LoraScales = std::vector<std::pair<int64_t, double>>;

// /v1/completions and /v1/chat/completions (chat: messages instead of prompt).
struct CompletionRequest {
  bool chat = false;
  std::string model;                    // empty when not given
  std::vector<Prompt> prompts;          // completions: one or more (a batch); each gets n choices
  nlohmann::json messages;              // chat: the array, each content one string (parts joined) and
                                        // "developer" read as "system"
  nlohmann::json tools;                 // chat: the tools array, or null
  std::optional<int64_t> max_tokens;    // max_tokens or max_completion_tokens
  int64_t n = 1;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;                    // an extension, as llama.cpp and vLLM take it
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  int64_t logprobs = -1;                // completions: logprobs (0-5); chat: top_logprobs when logprobs is true
  bool echo = false;                    // completions: the prompt before the completion
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool ignore_eos = false;              // an extension (vLLM, llama.cpp): generate past end-of-sequence tokens
  std::string user;
  // llama-server's extension: the LoRA adapters this request runs with and their scales; those not listed are off.
  // nullopt: not given.
  std::optional<LoraScales> lora;
};

// Throws ApiError (400) naming the field: malformed JSON, a field of the wrong type or out of range, a missing
// prompt or messages, a request Attend does not serve (suffix, best_of ≠ n, response_format other than text).
CompletionRequest parse_completion_request(std::string_view body, bool chat);

// /v1/embeddings.
struct EmbeddingRequest {
  std::string model;
  std::vector<Prompt> inputs;  // input: a string, strings, ids, or lists of ids
  bool base64 = false;         // encoding_format "base64" (little-endian float32), else "float"
  std::optional<LoraScales> lora;  // as CompletionRequest's
};
EmbeddingRequest parse_embedding_request(std::string_view body);

// POST /lora-adapters (llama-server's): the body is the list itself, the scales every request that names no
// adapters of its own then runs with (those not listed: 0).
LoraScales parse_lora_adapters_request(std::string_view body);

// /tokenize ({"content", "add_special", "with_pieces"}) and /detokenize ({"tokens"}), llama.cpp's server's shape.
struct TokenizeRequest {
  std::string content;
  bool add_special = true;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
std::vector<int32_t> parse_detokenize_request(std::string_view body);

}  // namespace attend::serve
