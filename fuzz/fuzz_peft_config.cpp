// PEFT's adapter_config.json (attend/model_dir.h: parse_peft_config): what parses is a LoRA configuration that
// validates (a rank of at least 1, a positive alpha, known targets named once).
#include "fuzz_util.h"

#include <attend/error.h>
#include <attend/model_dir.h>

#include <algorithm>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    const LoraConfig c = parse_peft_config(attend::fuzz::text(data, size), "adapter_config.json");
    c.validate();
    if (c.r < 1 || !(c.alpha > 0.0) || c.targets.empty()) fuzz::fail("an invalid LoRA configuration parsed");
  } catch (const Error&) {
  }
  return 0;
}
