// The inside of attend::Tokenizer, shared by its .cpp files: tokenizer.cpp (encode, decode, special
// tokens), hf_json_read.cpp and hf_json_write.cpp (tokenizer.json), gpt2_files.cpp (encoder.json +
// vocab.bpe), sentencepiece.cpp (.model files), tokenizer_load.cpp (which format a path holds) and train.cpp.
//
// A tokenizer is a pipeline (the stages of Hugging Face's tokenizers):
//   added tokens   special tokens are cut out of the text first and never split
//   normaliser     BERT: clean, lower-case, strip accents; SentencePiece: a character map, then "▁"
//   pre-tokeniser  GPT-2's pattern (or another regex), BERT's whitespace/punctuation split, or none
//   model          BPE, WordPiece or Unigram
//   decoder        the inverse: bytes, "##" joins, or "▁" -> " " and <0xNN> -> byte
#pragma once

#include <attend/tokenizer.h>

#include "tokenize/bpe.h"
#include "tokenize/pretokenize.h"
#include "tokenize/sp_normalizer.h"
#include "tokenize/unigram.h"
#include "tokenize/wordpiece.h"

#include <array>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace attend {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;
  bool in_text = true;  // matched in input text (SentencePiece's control pieces are not)
};

// BERT's normaliser (Hugging Face's BertNormalizer).
struct BertNormalization {
  bool clean_text = true;           // drop control characters, map whitespace to ' '
  bool handle_chinese_chars = true; // put spaces around CJK ideographs
  bool lowercase = true;
  bool strip_accents = true;        // Hugging Face: defaults to `lowercase` when null
};

std::string bert_normalize(std::string_view text, const BertNormalization& options);

struct Tokenizer::Impl {
  TokenizerKind kind = TokenizerKind::BPE;

  // Byte-level BPE.
  std::optional<tokenize::RegexSplitter> regex;  // none: GPT-2's pattern, hand-written
  bool pretokenize = true;  // false: the whole text is one piece (ByteLevel use_regex=false, no Split)
  bool add_prefix_space = false;
  bool byte_level = true;  // false: SentencePiece-style BPE over characters with ▁

  // WordPiece.
  BertNormalization bert;
  bool wordpiece_cleanup = true;  // decoder: no space before punctuation and clitics

  // SentencePiece (Unigram, and BPE when !byte_level).
  tokenize::SpNormalizer sp;
  bool prefix_first_only = false;  // Metaspace prepend_scheme "first": "▁" only at the start of the text

  std::variant<tokenize::BpeModel, tokenize::WordPieceModel, tokenize::UnigramModel> model;

  std::vector<AddedToken> added;  // ids may lie inside the model's vocabulary or after it
  std::array<std::optional<int32_t>, 7> roles;  // by SpecialRole

  // Derived: lookups for added tokens.
  std::array<bool, 256> added_first_byte{};
  std::vector<size_t> added_by_length;  // indices into `added`, longest first
  int32_t vocab_size = 0;

  void index_added();
  int32_t model_size() const;
  std::optional<int32_t> model_token_to_id(std::string_view token) const;
  std::string model_id_to_token(int32_t id) const;
  const AddedToken* added_by_id(int32_t id) const;
  void infer_roles();

  // `at_start`: the text begins the input (no special token before it).
  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
  void encode_pieces(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
};

}  // namespace attend
