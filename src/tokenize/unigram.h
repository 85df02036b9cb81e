// Unigram language-model tokenisation (SentencePiece; 004 §11.3).
//
// Each piece x has a log-probability score s(x). A text is split into the pieces that maximise
// sum_i s(x_i) (Viterbi over the lattice of all vocabulary matches). Training starts from a large seed
// vocabulary of frequent substrings and alternates EM re-estimation of the scores with pruning the
// pieces whose removal costs the corpus least likelihood, until the vocabulary has the wanted size.
#pragma once

#include "tokenize/bpe.h"
#include "tokenize/hash.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

// SentencePiece's piece types (the values are those of its model file).
enum class PieceType : uint8_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct UnigramPiece {
  std::string text;  // UTF-8, with U+2581 "▁" for a space; byte pieces are written <0xNN>
  double score = 0;  // log-probability (SentencePiece stores floats, tokenizer.json doubles)
  PieceType type = PieceType::Normal;
};

class UnigramModel {
 public:
  UnigramModel() = default;
  // `every_piece`: Hugging Face's lattice, in which every piece of the vocabulary can be matched (byte,
  // unknown and control pieces too), by its own score, and the unknown score sits below the lowest of all
  // pieces; otherwise SentencePiece's (normal and user-defined pieces only, user-defined ones favoured).
  UnigramModel(std::vector<UnigramPiece> pieces, int32_t unk, bool byte_fallback, bool every_piece = false);

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  const UnigramPiece& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const std::vector<UnigramPiece>& pieces() const { return pieces_; }
  int32_t find(std::string_view text) const { return index_.find(texts_, text); }
  int32_t unk() const { return unk_; }
  bool byte_fallback() const { return byte_fallback_; }
  bool every_piece() const { return every_piece_; }
  // The id of the byte piece <0xNN>, or -1.
  int32_t byte_piece(unsigned char b) const { return byte_pieces_[b]; }

  // Appends the best segmentation of a normalised text. Characters no piece covers become UNK (runs of
  // them one UNK), or their UTF-8 bytes as <0xNN> pieces with byte fallback.
  void encode(std::string_view normalized, std::vector<int32_t>& ids) const;

 private:
  std::vector<UnigramPiece> pieces_;
  std::vector<std::string> texts_;  // piece texts, for the index
  StringIndex index_;
  std::vector<bool> matchable_;     // pieces the lattice may use: normal and user-defined
  std::array<int32_t, 256> byte_pieces_{};
  size_t longest_ = 0;              // bytes
  double min_score_ = 0, max_score_ = 0;
  int32_t unk_ = -1;
  bool byte_fallback_ = false;
  bool every_piece_ = false;
};

struct UnigramTrainOptions {
  int32_t vocab_size = 8000;
  std::vector<std::string> special_tokens;  // control pieces, ids 0..k-1; must include unk_token
  std::string unk_token = "<unk>";
  int32_t max_piece_chars = 16;
  bool byte_fallback = true;
  int32_t seed_size = 200000;        // substrings kept for the seed vocabulary
  double shrinking_factor = 0.75;    // pieces kept at each pruning step
  int32_t em_iterations = 2;         // EM sub-iterations between prunings
  std::function<void(int64_t, int64_t)> progress;
};

// `words`: pre-tokenised words with their counts, already in SentencePiece form ("▁the").
UnigramModel train_unigram(const PieceCounts& words, const UnigramTrainOptions& options);

}  // namespace attend::tokenize
