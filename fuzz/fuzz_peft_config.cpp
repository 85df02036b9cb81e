// PEFT's adapter_config.json (attend/model_dir.h: parse_peft_config): what parses is a LoRA configuration with a
// rank of at least 1, a positive alpha and module names, each named once.
#include "fuzz_util.h"

#include <attend/error.h>
#include <attend/model_dir.h>

#include <algorithm>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    const PeftConfig c = parse_peft_config(attend::fuzz::text(data, size), "adapter_config.json");
    if (c.lora.r < 1 || !(c.lora.alpha > 0.0) || c.target_modules.empty()) fuzz::fail("an invalid LoRA configuration parsed");
    for (size_t i = 0; i < c.target_modules.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (c.target_modules[i] == c.target_modules[j]) fuzz::fail("a module named twice parsed");
  } catch (const Error&) {
  }
  return 0;
}
