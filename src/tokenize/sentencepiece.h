// SentencePiece .model files (protobuf ModelProto), read without protobuf's generated code.
#pragma once

#include "tokenize/sp_normalizer.h"
#include "tokenize/unigram.h"

#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

struct SentencePieceModel {
  std::vector<UnigramPiece> pieces;  // id order
  int model_type = 1;                // 1 unigram, 2 BPE
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string normalizer_name;
  SpNormalizer normalizer;
};

// Parses a serialised ModelProto; `origin` (the file name) is named in every error.
SentencePieceModel parse_sentencepiece(std::string_view data, std::string_view origin);

}  // namespace attend::tokenize
