// Added tokens (Hugging Face's AddedVocabulary): tokens cut out of the text before the model sees it.
//
// Matching is leftmost-longest over all tokens of a set, scanning on after each match (accepted or not):
//   single_word  a match counts only if no word character (regex \w) touches it on either side
//   lstrip       the match takes the whitespace before it (not past the previous match)
//   rstrip       the match takes the whitespace after it
// Tokens with normalized=false are matched in the raw text; those with normalized=true in each normalised
// piece between them, by their own normalised form.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attend::tokenize {

struct AddedTokenMatch {
  size_t begin, end;  // the span the token takes, stripped whitespace included
  int32_t id;
};

class AddedMatcher {
 public:
  struct Entry {
    std::string text;  // what is matched
    int32_t id = -1;
    bool special = false, lstrip = false, rstrip = false, single_word = false;
  };
  AddedMatcher() = default;
  explicit AddedMatcher(std::vector<Entry> entries);
  bool empty() const { return entries_.empty(); }

  // Appends the accepted matches in `text`, in order. `skip_special`: special tokens are not matched
  // (Hugging Face's encode_special_tokens).
  void find(std::string_view text, bool skip_special, std::vector<AddedTokenMatch>& out) const;

 private:
  // A byte trie: node -> (byte -> child), terminal entry per node.
  int32_t child(int32_t node, unsigned char byte) const;
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;  // entry index per node, -1 if none
  std::array<bool, 256> first_byte_{};
  std::string first_bytes_;  // the distinct first bytes: with one (GPT-2's "<"), memchr finds candidates
  // The first position at or after `from` where some token may start, or text.size().
  size_t next_candidate(std::string_view text, size_t from) const;
};

}  // namespace attend::tokenize
