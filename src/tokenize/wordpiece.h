// WordPiece (BERT): a word is spelled greedily, longest vocabulary match first; pieces after the first
// carry the continuation prefix "##" ("unaffable" -> "un", "##aff", "##able"). A word that cannot be
// spelled, or is longer than max_chars characters, becomes the single unknown token [UNK].
#pragma once

#include "tokenize/bpe.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attend::tokenize {

class WordPieceModel {
 public:
  WordPieceModel() = default;
  WordPieceModel(std::vector<std::string> tokens, int32_t unk, std::string prefix = "##", int32_t max_chars = 100);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  const std::vector<std::string>& tokens() const { return tokens_; }
  int32_t find(std::string_view token) const;
  int32_t unk() const { return unk_; }
  const std::string& prefix() const { return prefix_; }
  int32_t max_chars() const { return max_chars_; }

  // Appends the ids of one word (already normalised and split by BERT's pre-tokeniser).
  void encode(std::string_view word, std::vector<int32_t>& ids) const;

 private:
  std::vector<std::string> tokens_;
  StringIndex index_;
  int32_t unk_ = -1;
  std::string prefix_ = "##";
  int32_t max_chars_ = 100;
  size_t longest_ = 0;  // bytes in the longest token, prefix excluded
};

struct WordPieceTrainOptions {
  int32_t vocab_size = 30000;
  int64_t min_frequency = 2;
  std::vector<std::string> special_tokens;  // must include the unknown token
  std::string unk_token = "[UNK]";
  std::function<void(int64_t, int64_t)> progress;
};

// Trains the vocabulary as Hugging Face's trainer does: every character of the corpus (with a "##"
// twin for non-initial positions), then BPE merges over words spelled that way until vocab_size.
WordPieceModel train_wordpiece(const PieceCounts& words, const WordPieceTrainOptions& options);

}  // namespace attend::tokenize
