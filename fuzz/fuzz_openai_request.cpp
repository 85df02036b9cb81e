// attend serve's request bodies (serve/openai.h): the first byte picks the endpoint (completions, chat completions,
// embeddings, tokenize, detokenize, POST /lora-adapters), the rest is the body. A body is refused with an ApiError
// (an attend::Error) naming the field, or parsed into values inside the ranges the parser promises.
#include "fuzz_util.h"
#include "serve/openai.h"

#include <cmath>

namespace {

// A list of adapters as the parser promises it: ids 0-63, each once, scales within ±1e6.
void check_lora(const attend::serve::LoraScales& lora) {
  for (size_t i = 0; i < lora.size(); ++i) {
    const auto [id, scale] = lora[i];
    if (id < 0 || id > 63) attend::fuzz::fail("openai: a lora id out of [0, 63]");
    if (!(std::abs(scale) <= 1e6)) attend::fuzz::fail("openai: a lora scale out of [-1e6, 1e6]");
    for (size_t j = 0; j < i; ++j)
      if (lora[j].first == id) attend::fuzz::fail("openai: a lora id listed twice");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  if (size == 0) return 0;
  const int which = data[0] % 6;
  const std::string_view body = fuzz::text(data + 1, size - 1);
  try {
    switch (which) {
      case 0:
      case 1: {
        const serve::CompletionRequest r = serve::parse_completion_request(body, which == 1);
        if (r.n < 1 || r.n > 128) fuzz::fail("openai: n out of [1, 128]");
        if (!(r.temperature >= 0 && r.temperature <= 2)) fuzz::fail("openai: temperature out of [0, 2]");
        if (!(r.top_p > 0 && r.top_p <= 1)) fuzz::fail("openai: top_p out of (0, 1]");
        if (r.max_tokens && *r.max_tokens < 1) fuzz::fail("openai: max_tokens below 1");
        if (r.logprobs < -1 || r.logprobs > 20) fuzz::fail("openai: logprobs out of range");
        if (which == 0 && r.prompts.empty()) fuzz::fail("openai: a completion without prompts");
        if (which == 1 && (!r.messages.is_array() || r.messages.empty())) fuzz::fail("openai: a chat without messages");
        for (const auto& m : r.messages)  // what the template reads: text content, developer as system
          if (!m.is_object() || !m["content"].is_string() || m["role"] == "developer")
            fuzz::fail("openai: a chat message not made into the template's text");
        for (const std::string& s : r.stop)
          if (s.empty()) fuzz::fail("openai: an empty stop string");
        for (const auto& [id, bias] : r.logit_bias)
          if (id < 0 || !(bias >= -100 && bias <= 100)) fuzz::fail("openai: a logit bias out of range");
        if (r.lora) check_lora(*r.lora);
        break;
      }
      case 2: {
        const serve::EmbeddingRequest r = serve::parse_embedding_request(body);
        if (r.inputs.empty()) fuzz::fail("openai: embeddings without inputs");
        if (r.lora) check_lora(*r.lora);
        break;
      }
      case 3: serve::parse_tokenize_request(body); break;
      case 4:
        for (int32_t id : serve::parse_detokenize_request(body))
          if (id < 0) fuzz::fail("openai: a negative token id");
        break;
      case 5: check_lora(serve::parse_lora_adapters_request(body)); break;
    }
  } catch (const serve::ApiError& e) {
    if (e.status != 400) fuzz::fail("openai: a parse error that is not 400");
  } catch (const Error&) {
    fuzz::fail("openai: a parse error that is not an ApiError");
  }
  return 0;
}
