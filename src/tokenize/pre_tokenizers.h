// Hugging Face's pre-tokenizers: each piece of normalised text is split into the pieces the model encodes
// one at a time.
//
//   Split              a string or regex pattern; its matches (or, with invert, the text between them)
//                      are the delimiters, handled by the behaviour below
//   ByteLevel          optional prefix space, GPT-2's pattern (use_regex); bytes are the model's symbols
//   Metaspace          ' ' -> replacement (▁), a replacement in front (always, or only at the input's
//                      start: "first"), then a split before each replacement (split)
//   Whitespace         runs of word characters (\w) and runs of other non-space characters
//   WhitespaceSplit    runs of non-whitespace
//   Digits             each digit alone (individual_digits) or runs of digits apart
//   Punctuation        punctuation characters by the behaviour
//   BertPreTokenizer   whitespace removed, each punctuation character alone
//   CharDelimiterSplit a character removed
//   Sequence           the above in order
//
// Delimiter behaviours (for delimiters d and text t: "t1 d t2 d d t3"):
//   Removed            t1, t2, t3
//   Isolated           t1, d, t2, d, d, t3
//   MergedWithPrevious t1d, t2d, d, t3   (a delimiter joins the piece before it, if that is no delimiter)
//   MergedWithNext     t1, dt2, d, dt3   (a delimiter joins the piece after it, if that is no delimiter)
//   Contiguous         t1, d, t2, dd, t3 (runs of delimiters are one piece)
// Empty pieces are dropped.
#pragma once

#include "tokenize/json_reader.h"
#include "tokenize/pretokenize.h"

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PrependScheme { Always, First, Never };

// A piece of text; `at_origin`: it begins where the input began (Metaspace's "first").
struct Piece {
  std::string_view text;
  bool at_origin = false;
};
// Owns the text of pieces a pre-tokeniser rewrote; string_views into it stay valid as it grows.
using TextArena = std::deque<std::string>;

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation, Bert, CharDelimiter };
  Kind kind = Kind::Split;
  std::string pattern;  // Split: literal or regex
  bool regex = false;
  bool invert = false;
  std::shared_ptr<const RegexSplitter> compiled;
  SplitBehavior behavior = SplitBehavior::Isolated;  // Split, Punctuation
  bool add_prefix_space = false, use_regex = true, trim_offsets = true;  // ByteLevel
  std::string replacement = "\xE2\x96\x81";                              // Metaspace
  PrependScheme prepend = PrependScheme::Always;
  bool split = true;
  bool individual_digits = false;  // Digits
  char32_t delimiter = ' ';        // CharDelimiterSplit
};

class PreTokenizer {
 public:
  std::vector<PreTokenizerStep> steps;
  bool sequence = false;  // written as a Sequence

  bool empty() const { return steps.empty(); }
  bool byte_level() const;
  // GPT-2's own: ByteLevel with its pattern and no prefix space, alone (the hand-written scanner's case).
  bool is_gpt2() const;
  // The regex when the pipeline is one Isolated Split (and ByteLevel without prefix or pattern), whose
  // pieces can be encoded as the regex finds them; else null.
  const RegexSplitter* single_isolated_split() const;
  // Appends the pieces of `text`.
  void apply(std::string_view text, bool at_origin, std::vector<Piece>& out, TextArena& arena) const;
};

PreTokenizer read_pre_tokenizer(const json* node, const Reader& r, const std::string& path);
json write_pre_tokenizer(const PreTokenizer& p);

std::string_view behavior_name(SplitBehavior b);
// "Removed", ...; anything else is an error naming `path`.
SplitBehavior parse_behavior(const json& v, const Reader& r, const std::string& path);

}  // namespace attend::tokenize
