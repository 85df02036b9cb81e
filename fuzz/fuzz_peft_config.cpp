// PEFT's adapter_config.json (attend/model_dir.h: parse_peft_config): what parses is a LoRA configuration with a
// rank of at least 1, a positive alpha and either module names, each named once, or one pattern of at most 256
// characters that PCRE2 compiles (or "all-linear"), with rank_pattern and alpha_pattern keys, exclude_modules and
// layers_pattern that compile as PEFT builds them and ranks and alphas in range (layers_to_transform as PEFT keeps
// it: a negative number, which no layer's is, adapts nothing). Module names then go
// through PeftModules as load_peft_adapter sends them (PEFT's choice, under PCRE2's match limit): each ends, with an
// answer or an attend::Error, never a hang (libFuzzer's timeout) or a crash.
#include "fuzz_util.h"

#include <attend/error.h>
#include <attend/model_dir.h>

#include <optional>
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
    if (c.rank_pattern.size() > 4096 || c.alpha_pattern.size() > 4096 || c.layers_to_transform.size() > 4096)
      fuzz::fail("more pattern keys or layers than the bound parsed");
    for (const auto& [key, r] : c.rank_pattern)
      if (r < 1 || key.empty() || key.size() > 256) fuzz::fail("a bad rank_pattern entry parsed");
    for (const auto& [key, alpha] : c.alpha_pattern)
      if (!(alpha > 0.0) || key.empty() || key.size() > 256) fuzz::fail("a bad alpha_pattern entry parsed");
    // Every module name through PEFT's choice (each pattern compiled once by the parser already).
    const PeftModules modules(c, "adapter_config.json");
    for (const char* module : {"model.layers.0.self_attn.q_proj", "transformer.h.11.attn.c_attn",
                               "bert.encoder.layer.3.attention.output.dense", "encoder.block.1.layer.0.SelfAttention.q",
                               "decoder.block.0.layer.1.EncDecAttention.k", ""})
      if (const std::optional<LoraConfig::Rank> rank = modules.adapter(module))
        if (rank->r < 1 || !(rank->alpha > 0.0)) fuzz::fail("a module got an invalid rank or alpha");
  } catch (const Error&) {
  }
  return 0;
}
