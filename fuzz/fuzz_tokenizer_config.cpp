// tokenizer_config.json applied to a tokenizer.json: the input is the tokenizer.json, a line
// "#### tokenizer_config.json", then the config. A tokenizer that loads and takes the config is then used
// (fuzz_util.h's exercise).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  const auto files = fuzz::split(fuzz::text(data, size), 2, "\n#### tokenizer_config.json\n");
  try {
    Tokenizer tok = Tokenizer::from_json(files[0]);
    tok.apply_config(files[1]);
    fuzz::exercise(tok);
  } catch (const Error&) {
  }
  return 0;
}
