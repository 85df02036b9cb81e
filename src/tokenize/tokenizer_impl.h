// The inside of attend::Tokenizer, shared by its .cpp files: tokenizer.cpp (vocabulary, special tokens,
// batches), encode.cpp and decode.cpp (the pipelines), hf_json_read.cpp and hf_json_write.cpp (tokenizer.json),
// tokenizer_config.cpp (tokenizer_config.json), gpt2_files.cpp (encoder.json + vocab.bpe), sentencepiece.cpp
// (.model files), tokenizer_load.cpp (which format a path holds) and train.cpp.
//
// A tokenizer is Hugging Face's pipeline:
//   added tokens    cut out of the raw text (normalized=false) or of each normalised piece (normalized=true)
//   normalizer      normalizers.h
//   pre-tokenizer   pre_tokenizers.h
//   model           BPE, WordPiece or Unigram
//   post-processor  the special tokens of encode(text, add_special_tokens) (decoders.h)
//   decoder         ids -> text (decoders.h)
// SentencePiece .model files (and Attend's trained Unigram) keep SentencePiece's own normaliser instead of
// the normalizer and pre-tokenizer (`sp`), so that they encode as spm_encode does.
#pragma once

#include <attend/tokenizer.h>

#include "tokenize/added_tokens.h"
#include "tokenize/bpe.h"
#include "tokenize/decoders.h"
#include "tokenize/normalizers.h"
#include "tokenize/pre_tokenizers.h"
#include "tokenize/sp_normalizer.h"
#include "tokenize/unigram.h"
#include "tokenize/wordpiece.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

namespace attend {

using tokenize::BertNormalization;
using tokenize::bert_normalize;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;
  bool in_text = true;  // matched in input text (SentencePiece's control pieces are not)
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;  // matched in normalised text, by its normalised form
};

struct Tokenizer::Impl {
  TokenizerKind kind = TokenizerKind::BPE;
  std::variant<tokenize::BpeModel, tokenize::WordPieceModel, tokenize::UnigramModel> model;
  bool byte_level = true;  // BPE over bytes (the file writes them in GPT-2's letters)
  // Byte-level vocabulary entries that are not written in GPT-2's letters (DeepSeek's "<｜begin▁of▁sentence｜>"):
  // no input reaches them as model tokens; their text, by id.
  std::unordered_map<int32_t, std::string> unspellable;
  // Ids below the model's size that tokenizer.json gives no token (Hugging Face's vocabularies are maps);
  // decoding skips them, as Hugging Face does.
  std::vector<int32_t> vocab_gaps;
  bool is_gap(int32_t id) const { return std::binary_search(vocab_gaps.begin(), vocab_gaps.end(), id); }

  tokenize::Normalizer normalizer;
  tokenize::PreTokenizer pre_tokenizer;
  tokenize::PostProcessor post_processor;
  tokenize::Decoder decoder;

  // SentencePiece's own normaliser (.model files, trained Unigram), used instead of normalizer and
  // pre-tokenizer; prefix_first_only: the dummy prefix only at the start of the input.
  std::optional<tokenize::SpNormalizer> sp;
  bool prefix_first_only = false;

  std::vector<AddedToken> added;  // ids may lie inside the model's vocabulary or after it
  std::array<std::optional<int32_t>, 7> roles;  // by SpecialRole

  // Derived by index_added.
  tokenize::AddedMatcher raw_matcher, normalized_matcher;
  std::unordered_map<int32_t, size_t> added_index;  // id -> index into `added`
  std::vector<std::string> added_decoded;           // per added token: its text for the decoder
  std::unordered_set<std::string> special_contents;  // the special tokens' texts (decode's skip_special)
  int32_t vocab_size = 0;
  // fingerprint()'s hash, 0 until it is asked for (a hash of 0 is kept as 1); every change sets it back to 0.
  mutable std::atomic<uint64_t> fingerprint{0};

  void index_added();
  int32_t model_size() const;
  std::optional<int32_t> model_token_to_id(std::string_view token) const;
  // The model's token as tokenizer.json writes it (GPT-2's letters for byte-level BPE).
  std::string model_id_to_token(int32_t id) const;  // as the model stores it (bytes for byte-level BPE)
  std::string model_token_text(int32_t id) const;
  const AddedToken* added_by_id(int32_t id) const;
  void infer_roles();
  // Hugging Face's view: the decoder's input for one id.
  std::string decoder_token(int32_t id) const;

  // GPT-2's pipeline (ByteLevel pre-tokenizer with its pattern, ByteLevel decoder) and BERT's (BertNormalizer,
  // BertPreTokenizer, WordPiece decoder), for the tokenizers Attend reads from other files or trains.
  void set_gpt2_pipeline();
  void set_bert_pipeline(const BertNormalization& bert, bool cleanup = true);

  // encode.cpp
  void encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& ids) const;
  void encode_segment(std::string_view text, bool at_origin, bool parse_special, std::vector<int32_t>& ids) const;
  void encode_pieces(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const;
  void encode_model(std::string_view piece, std::vector<int32_t>& ids) const;
  void encode_gpt2(std::string_view text, std::vector<int32_t>& ids) const;
  void encode_sentencepiece(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
};

}  // namespace attend
