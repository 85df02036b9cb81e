// Hugging Face tokenizer.json (BPE, WordPiece, Unigram, with their normalisers and pre-tokenisers); a
// tokenizer that loads is then used (fuzz_util.h's exercise).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    attend::fuzz::exercise(Tokenizer::from_json(fuzz::text(data, size)));
  } catch (const Error&) {
  }
  return 0;
}
