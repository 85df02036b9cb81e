// Pre-tokenisation: splitting text into the pieces a subword model encodes one at a time.
//
// GPT-2's pattern (001 §5, "smart splitting": "The cat sat on" -> "The", " cat", " sat", " on")
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// has a hand-written scanner (split_gpt2), several times faster than a regex engine and checked against
// PCRE2 in the tests. Any other pattern (a tokenizer.json's Split, say LLaMA-3's) runs on PCRE2's JIT.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Appends GPT-2's pieces of `text` to `pieces`. They tile the text exactly: concatenated they give
// `text` back, invalid UTF-8 included (each invalid byte counts as a symbol, class "other").
void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces);

// Whether a position can start a piece whatever came before it: splitting a long text there and
// pre-tokenising the parts separately gives the same pieces. True at a whitespace byte that follows a
// non-whitespace byte. Used to cut large inputs into chunks for threads.
bool is_gpt2_cut_point(std::string_view text, size_t i);

// A compiled PCRE2 pattern (UTF + Unicode properties, JIT). Splitting keeps both the matches and the
// text between them as pieces (Hugging Face's "Isolated" behaviour), so pieces always tile the text. Matching is
// bounded (PCRE2's match and depth limits): a pattern that would backtrack without end is an error naming it,
// not a hang. `what` names the pattern in errors.
class RegexSplitter {
 public:
  // Where a match may lie: anywhere in a text (split, find_all), at its start (Python's re.match) or over all of it
  // (re.fullmatch). Fixed when the pattern compiles, where PCRE2's JIT takes it; as a match-time option only the
  // interpreter does, many times slower.
  enum class Anchor { anywhere, start, whole };

  explicit RegexSplitter(std::string pattern, std::string what = "pre-tokeniser pattern",
                         Anchor anchor = Anchor::anywhere);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  const std::string& pattern() const { return pattern_; }
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  // The same pieces handed to `emit` one by one, without a list as long as the text.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;
  // Every match as (begin, end), empty ones included, as Oniguruma's find_iter yields them (Hugging Face's
  // regexes): after an empty match the search moves on one character; an empty match right where the
  // previous match ended is skipped.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;
  // For a pattern anchored at the start or whole: whether it matches `text`; where it does and `group1` is given,
  // the text of the first capture group goes there (empty where it took no part).
  bool matches(std::string_view text, std::string_view* group1 = nullptr) const;

 private:
  struct Compiled;
  std::string pattern_, what_;
  Anchor anchor_;
  std::unique_ptr<Compiled> compiled_;
};

// A pattern of Hugging Face's tokenizer.json (Oniguruma syntax) for PCRE2: \s and \S become Unicode's
// White_Space, which Oniguruma's \s is (PCRE2's differs on U+0085 and U+180E).
std::string onig_to_pcre2(std::string_view pattern);
// A PCRE2 pattern matching `literal` exactly.
std::string quote_literal(std::string_view literal);

// BERT's basic pre-tokeniser: splits on whitespace (dropped) and makes every punctuation character
// its own piece.
void split_bert(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace attend::tokenize
