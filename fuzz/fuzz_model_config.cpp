// config.json as load_model reads it: Hugging Face's GPT-2, Llama-family, Gemma 3 (its own keys, or a multimodal
// config's text_config), T5 or BERT keys, or Attend's own fields. A config that loads must write a config.json that loads
// to the same config.
#include "fuzz_util.h"
#include "formats/hf_gpt2.h"
#include "formats/hf_bert.h"
#include "formats/hf_gemma3.h"
#include "formats/hf_llama.h"
#include "formats/hf_t5.h"

#include <attend/model.h>

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  const std::string_view text = fuzz::text(data, size);
  try {
    const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const ModelConfig c = formats::is_hf_gpt2_config(parsed)     ? formats::config_from_hf_gpt2(parsed, "config.json")
                          : formats::is_hf_llama_config(parsed)  ? formats::config_from_hf_llama(parsed, "config.json")
                          : formats::is_hf_gemma3_config(parsed) ? formats::config_from_hf_gemma3(parsed, "config.json")
                          : formats::is_hf_t5_config(parsed)     ? formats::config_from_hf_t5(parsed, "config.json")
                          : formats::is_hf_bert_config(parsed)   ? formats::config_from_hf_bert(parsed, "config.json")
                                                                 : ModelConfig::from_json(text);
    (void)c.ffn_hidden();
    (void)c.decoder_layers();
    const std::string saved = c.to_json();
    std::string again;
    try {
      again = ModelConfig::from_json(saved).to_json();
    } catch (const Error& e) {
      fuzz::fail(std::string("a loaded config wrote a config.json it cannot read: ") + e.what());
    }
    if (again != saved) fuzz::fail("config.json does not survive a write and a read:\n" + saved + "\n" + again);
  } catch (const Error&) {
  }
  return 0;
}
