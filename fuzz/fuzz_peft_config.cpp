// PEFT's adapter_config.json (attend/model_dir.h: parse_peft_config): what parses is a LoRA configuration with a
// rank of at least 1, a positive alpha and either module names, each named once, or one pattern of at most 256
// characters that PCRE2 compiles (or "all-linear"). A parsed pattern is then matched against module names as
// load_peft_adapter matches it (re.fullmatch, under PCRE2's match limit): each match ends, with an answer or an
// attend::Error, never a hang (libFuzzer's timeout) or a crash.
#include "fuzz_util.h"
#include "tokenize/pretokenize.h"

#include <attend/error.h>
#include <attend/model_dir.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    const PeftConfig c = parse_peft_config(attend::fuzz::text(data, size), "adapter_config.json");
    if (c.lora.r < 1 || !(c.lora.alpha > 0.0) || c.target_modules.empty() == c.target_pattern.empty())
      fuzz::fail("an invalid LoRA configuration parsed");
    if (c.target_pattern.size() > 256) fuzz::fail("a pattern past the bound parsed");
    for (size_t i = 0; i < c.target_modules.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (c.target_modules[i] == c.target_modules[j]) fuzz::fail("a module named twice parsed");
    if (!c.target_pattern.empty()) {
      std::string lower = c.target_pattern;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (lower == "all-linear") return 0;
      const tokenize::RegexSplitter pattern(c.target_pattern, "target_modules");  // compiled once by the parser
      for (const char* module : {"model.layers.0.self_attn.q_proj", "transformer.h.11.attn.c_attn",
                                 "bert.encoder.layer.3.attention.output.dense", ""})
        (void)pattern.matches_whole(module);
    }
  } catch (const Error&) {
  }
  return 0;
}
