// Byte-pair encoding (001 §5; 004 §11.3): a vocabulary of byte strings and an ordered list of merges.
//
// Encoding a piece starts from its symbols (bytes for byte-level BPE; characters for SentencePiece's
// BPE, with <0xNN> byte tokens or UNK for characters outside the vocabulary) and repeatedly merges the
// adjacent pair with the best (lowest) rank, leftmost first, until no pair has a merge. Training
// counts pairs over a corpus's pieces and adds the most frequent pair as the next merge.
#pragma once

#include "tokenize/hash.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attend::tokenize {

// Hugging Face's BPE options (tokenizer.json's model); the defaults are SentencePiece's BPE.
struct BpeOptions {
  bool byte_fallback = true;  // Characters: a character not in the vocabulary becomes its <0xNN> tokens
  bool fuse_unk = true;       // Characters: a run of unknown characters is one unknown token
  std::string prefix;         // continuing_subword_prefix: spelled before every character but the first
  std::string suffix;         // end_of_word_suffix: spelled after the last character
  bool last_merge_wins = false;  // a pair listed twice takes its last rank (Hugging Face) instead of its first
};


class BpeModel {
 public:
  struct Merge {
    int32_t left, right;
  };
  enum class Symbols {
    Bytes,       // byte-level: every byte has a token (GPT-2)
    Characters,  // UTF-8 characters; unknown ones become byte tokens <0xNN> or `unk`
  };

  using Options = BpeOptions;

  BpeModel() = default;
  // `tokens`: id -> bytes (every id once; an empty token is one no input can spell, such as a byte-level
  // vocabulary's entry that is not written in GPT-2's letters). `merges`: in rank order; each names two tokens whose
  // concatenation is a token. `ranks`, if given, overrides the rank of each merge (equal ranks: the
  // leftmost pair merges first; SentencePiece gives every split of a piece the piece's rank). Errors
  // name the offending entry.
  BpeModel(std::vector<std::string> tokens, const std::vector<Merge>& merges, Symbols symbols = Symbols::Bytes,
           int32_t unk = -1, const std::vector<int32_t>& ranks = {}, Options options = {});

  // Hugging Face's ignore_merges (LLaMA-3): a piece that is itself a token is emitted whole.
  void set_ignore_merges(bool ignore) { ignore_merges_ = ignore; }
  bool ignore_merges() const { return ignore_merges_; }

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<Merge>& merges() const { return merges_; }
  Symbols symbols() const { return symbols_; }
  int32_t unk() const { return unk_; }
  const Options& options() const { return options_; }
  // The id of a token's bytes, or -1.
  int32_t find(std::string_view bytes) const;

  // Appends the ids of one pre-token piece. Thread-safe; each thread keeps its own cache of pieces.
  void encode(std::string_view piece, std::vector<int32_t>& ids) const;
  // The same without the cache (the tests compare the two).
  void encode_uncached(std::string_view piece, std::vector<int32_t>& ids) const;

 private:
  struct Rule {
    int32_t rank, merged;
  };
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge_short(std::vector<int32_t>& symbols) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  std::vector<std::string> tokens_;
  std::vector<Merge> merges_;
  StringIndex index_;
  PairMap<Rule> rules_;
  std::array<int32_t, 256> byte_token_{};  // token of each single byte (or of <0xNN>), -1 if none
  Symbols symbols_ = Symbols::Bytes;
  int32_t unk_ = -1;
  Options options_;
  bool ignore_merges_ = false;
  uint64_t serial_ = 0;  // identifies this model to the per-thread caches
};

struct BpeTrainOptions {
  int32_t vocab_size = 8000;    // including the 256 bytes and the special tokens
  int64_t min_frequency = 2;    // a pair seen fewer times than this is never merged
  std::vector<std::string> special_tokens;  // ids 0..k-1, in this order
  // Called now and then with (merges done, merges wanted).
  std::function<void(int64_t, int64_t)> progress;
};

// Counts of pre-token pieces over a corpus: the input of BPE and WordPiece training.
using PieceCounts = std::unordered_map<std::string, int64_t>;

// Trains byte-level BPE: tokens are the special tokens, then the 256 bytes, then one token per merge.
BpeModel train_bpe(const PieceCounts& pieces, const BpeTrainOptions& options);

// Runs the BPE merge loop over words of symbols and returns the merges in order. Shared by BPE and
// WordPiece training. `symbol_bytes` grows with each merge (the new symbol's bytes are appended);
// `merged_bytes(a, b)` gives them (WordPiece strips the "##" of the right part).
struct MergeLoop {
  std::vector<std::vector<int32_t>> words;  // symbol ids per distinct piece
  std::vector<int64_t> counts;              // occurrences of each piece
};
std::vector<BpeModel::Merge> learn_merges(MergeLoop& corpus, std::vector<std::string>& symbol_bytes,
                                          size_t target_symbols, int64_t min_frequency,
                                          const std::function<std::string(int32_t, int32_t)>& merged_bytes,
                                          const std::function<void(int64_t, int64_t)>& progress);

}  // namespace attend::tokenize
