// GPT-2's encoder.json and vocab.bpe. The input is both files, cut at the line "#### vocab.bpe"; a
// tokenizer that loads is then used (fuzz_util.h's exercise).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  const auto files = fuzz::split(fuzz::text(data, size), 2, "\n#### vocab.bpe\n");
  try {
    attend::fuzz::exercise(Tokenizer::from_gpt2(files[0], files[1]));
  } catch (const Error&) {
  }
  return 0;
}
