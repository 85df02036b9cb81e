// PEFT's adapter_config.json (attend/model_dir.h: parse_peft_config): what parses is a LoRA configuration with a
// rank of at least 1, a positive alpha and either module names, each named once, or one pattern of at most 256
// characters without counted repetitions (a regular expression std::regex compiled, or "all-linear").
#include "fuzz_util.h"

#include <attend/error.h>
#include <attend/model_dir.h>

#include <algorithm>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    const PeftConfig c = parse_peft_config(attend::fuzz::text(data, size), "adapter_config.json");
    if (c.lora.r < 1 || !(c.lora.alpha > 0.0) || c.target_modules.empty() == c.target_pattern.empty())
      fuzz::fail("an invalid LoRA configuration parsed");
    if (c.target_pattern.size() > 256 || c.target_pattern.find('{') != std::string::npos)
      fuzz::fail("a pattern past the bounds parsed");
    for (size_t i = 0; i < c.target_modules.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (c.target_modules[i] == c.target_modules[j]) fuzz::fail("a module named twice parsed");
  } catch (const Error&) {
  }
  return 0;
}
