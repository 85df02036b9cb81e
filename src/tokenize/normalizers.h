// Hugging Face's normalizers: the text between added tokens is rewritten before pre-tokenisation.
//
//   NFC, NFD, NFKC, NFKD   Unicode normal forms (ICU)
//   Lowercase              each character by its full lower-case mapping, without context
//   Strip                  whitespace off the left and/or right
//   StripAccents           drops combining marks (category M)
//   Replace                every match of a string or regex -> content
//   Prepend                `prepend` before a non-empty text
//   BertNormalizer         clean (drop controls, whitespace -> ' '), space out CJK, strip accents, lower-case
//   Precompiled            SentencePiece's character map, grapheme by grapheme
//   ByteLevel              marks the model as byte-level (bytes stay bytes here)
//   Sequence               the above in order
//
// Metaspace's prepend_scheme "first" needs to know whether a piece still begins where the input began:
// each step reports whether its first output character comes from its first input character.
#pragma once

#include "tokenize/json_reader.h"
#include "tokenize/pretokenize.h"
#include "tokenize/sp_normalizer.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

// BERT's normaliser (Hugging Face's BertNormalizer).
struct BertNormalization {
  bool clean_text = true;           // drop control characters, map whitespace to ' '
  bool handle_chinese_chars = true; // put spaces around CJK ideographs
  bool lowercase = true;
  bool strip_accents = true;        // Hugging Face: defaults to `lowercase` when null
  bool strip_accents_null = false;  // written back as null
};

std::string bert_normalize(std::string_view text, const BertNormalization& options);

struct NormalizerStep {
  enum class Kind { NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Bert, Precompiled, ByteLevel };
  Kind kind = Kind::NFC;
  bool left = false, right = false;          // Strip
  std::string pattern;                       // Replace: the literal or regex
  bool regex = false;                        // Replace: pattern is {"Regex": ...}
  std::shared_ptr<const RegexSplitter> compiled;
  std::string content;                       // Replace: the replacement; Prepend: the prefix
  BertNormalization bert;
  std::shared_ptr<const SpNormalizer> charsmap;  // Precompiled
};

class Normalizer {
 public:
  std::vector<NormalizerStep> steps;
  bool sequence = false;  // written as a Sequence

  bool empty() const { return steps.empty(); }
  bool byte_level() const;
  // The normalised text. `first_kept` (in/out): whether its first character still comes from the
  // input's first character.
  std::string apply(std::string_view text, bool& first_kept) const;
};

// `node`: tokenizer.json's "normalizer" (null: none). Unknown types and options are errors naming `path`.
Normalizer read_normalizer(const json* node, const Reader& r, const std::string& path);
json write_normalizer(const Normalizer& n);

// Replace's (and the Replace decoder's) work: every match of `step`'s pattern in `text` -> content.
std::string replace_all(const NormalizerStep& step, std::string_view text, bool* first_removed = nullptr);

}  // namespace attend::tokenize
