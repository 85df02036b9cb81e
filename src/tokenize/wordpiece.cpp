#include "tokenize/wordpiece.h"

#include "tokenize/unicode.h"

#include <attend/error.h>

#include <algorithm>
#include <map>

namespace attend::tokenize {

WordPieceModel::WordPieceModel(std::vector<std::string> tokens, int32_t unk, std::string prefix, int32_t max_chars)
    : tokens_(std::move(tokens)), unk_(unk), prefix_(std::move(prefix)), max_chars_(max_chars) {
  check(unk_ >= 0 && unk_ < size(), "WordPiece: the unknown token id {} is not in the vocabulary of {}", unk_, size());
  check(max_chars_ > 0, "WordPiece: max_input_chars_per_word must be positive, found {}", max_chars_);
  int32_t first = -1, second = -1;
  const bool unique = index_.build(tokens_, &first, &second);
  check(unique, "WordPiece vocabulary: token {:?} has two ids, {} and {}",
        second >= 0 ? tokens_[static_cast<size_t>(second)] : std::string(), first, second);
  for (const std::string& t : tokens_) longest_ = std::max(longest_, t.size());
}

int32_t WordPieceModel::find(std::string_view token) const { return index_.find(tokens_, token); }

void WordPieceModel::encode(std::string_view word, std::vector<int32_t>& ids) const {
  const std::vector<uint32_t> bounds = char_bounds(word);  // matches never cut a UTF-8 sequence
  if (static_cast<int64_t>(bounds.size()) - 1 > max_chars_) {
    ids.push_back(unk_);
    return;
  }
  const size_t start_size = ids.size();
  std::string candidate;
  size_t start = 0;  // index into bounds
  while (start + 1 < bounds.size()) {
    int32_t found = -1;
    size_t end = bounds.size() - 1;
    for (; end > start; --end) {
      const size_t bytes = bounds[end] - bounds[start];
      if (bytes > longest_) continue;
      candidate.assign(start > 0 ? prefix_ : std::string());
      candidate.append(word.substr(bounds[start], bytes));
      if ((found = find(candidate)) >= 0) break;
    }
    if (found < 0) {  // the word cannot be spelled: it is one [UNK]
      ids.resize(start_size);
      ids.push_back(unk_);
      return;
    }
    ids.push_back(found);
    start = end;
  }
}

WordPieceModel train_wordpiece(const PieceCounts& words, const WordPieceTrainOptions& options) {
  check(!words.empty(), "WordPiece training: the corpus is empty");
  std::vector<std::string> symbols(options.special_tokens);
  if (std::find(symbols.begin(), symbols.end(), options.unk_token) == symbols.end())
    symbols.insert(symbols.begin(), options.unk_token);
  const std::string prefix = "##";

  // The alphabet: each character that starts a word, and each that continues one (as "##c"), in a
  // fixed order.
  std::map<std::string, int64_t> alphabet;
  std::vector<std::pair<std::string_view, int64_t>> sorted(words.begin(), words.end());
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [word, count] : sorted)
    for (size_t i = 0; i < word.size();) {
      const auto length = static_cast<size_t>(decode_utf8(word, i).length);
      alphabet[(i > 0 ? prefix : std::string()) + std::string(word.substr(i, length))] += count;
      i += length;
    }
  std::unordered_map<std::string, int32_t> index;
  for (size_t id = 0; id < symbols.size(); ++id) index.emplace(symbols[id], static_cast<int32_t>(id));
  for (const auto& entry : alphabet)
    if (index.emplace(entry.first, static_cast<int32_t>(symbols.size())).second) symbols.push_back(entry.first);
  check(static_cast<int32_t>(symbols.size()) <= options.vocab_size,
        "WordPiece vocabulary size {} is below the {} special tokens and characters of the corpus", options.vocab_size,
        symbols.size());

  MergeLoop corpus;
  for (const auto& [word, count] : sorted) {
    std::vector<int32_t> spelled;
    for (size_t i = 0; i < word.size();) {
      const auto length = static_cast<size_t>(decode_utf8(word, i).length);
      spelled.push_back(index.at((i > 0 ? prefix : std::string()) + std::string(word.substr(i, length))));
      i += length;
    }
    corpus.words.push_back(std::move(spelled));
    corpus.counts.push_back(count);
  }
  auto merged = [&](int32_t a, int32_t b) {
    const std::string& right = symbols[static_cast<size_t>(b)];
    return symbols[static_cast<size_t>(a)] + right.substr(right.starts_with(prefix) ? prefix.size() : 0);
  };
  learn_merges(corpus, symbols, static_cast<size_t>(options.vocab_size), options.min_frequency, merged,
               options.progress);
  const auto unk = static_cast<int32_t>(std::find(symbols.begin(), symbols.end(), options.unk_token) - symbols.begin());
  return WordPieceModel(std::move(symbols), unk, prefix);
}

}  // namespace attend::tokenize
