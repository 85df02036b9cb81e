// generation_config.json and config.json's token ids (attend/model_dir.h: parse_generation_defaults). The input is
// split at its first NUL byte into the two files' text; what parses holds token ids only (non-negative int32).
#include "fuzz_util.h"

#include <attend/error.h>
#include <attend/model_dir.h>

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  const std::string_view input = attend::fuzz::text(data, size);
  const size_t cut = input.find('\0');
  const std::string_view generation = input.substr(0, cut), config = cut == std::string_view::npos ? "" : input.substr(cut + 1);
  try {
    const GenerationDefaults d = parse_generation_defaults(generation, config);
    for (const auto id : {d.bos, d.pad, d.decoder_start})
      if (id && *id < 0) fuzz::fail("a negative token id");
    for (int32_t id : d.eos)
      if (id < 0) fuzz::fail("a negative end-of-sequence id");
  } catch (const Error&) {
  }
  return 0;
}
