// SentencePiece .model files (protobuf ModelProto: pieces, trainer and normaliser specs, the precompiled
// character map); a tokenizer that loads is then used (fuzz_util.h's exercise).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    attend::fuzz::exercise(Tokenizer::from_sentencepiece(fuzz::text(data, size)), /*same_encoding=*/false);
  } catch (const Error&) {
  }
  return 0;
}
