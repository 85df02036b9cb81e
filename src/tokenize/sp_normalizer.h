// SentencePiece's normaliser: a precompiled character map (its nmt_nfkc rules, stored in the model as a
// double-array trie of byte strings plus their replacements), then whitespace handling: drop leading,
// trailing and repeated spaces, prefix a space to the text, and write spaces as "▁" (U+2581).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

inline constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁ U+2581

class SpNormalizer {
 public:
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  std::vector<std::string> user_defined;  // matched first and left as they are

  // The model's precompiled_charsmap: uint32 trie size, the trie's 32-bit units, then the replacement
  // strings ('\0'-terminated). Empty: no character mapping. Malformed blobs are an error naming `origin`.
  void set_charsmap(std::string blob, std::string_view origin);
  const std::string& charsmap() const { return blob_; }

  // Hugging Face's reading of the map (spm_precompiled's transform): the replacement of the shortest key
  // that begins `chunk`, or nothing.
  std::optional<std::string_view> first_match(std::string_view chunk) const;

  std::string normalize(std::string_view text) const { return normalize(text, add_dummy_prefix); }
  // With the dummy prefix decided by the caller (Hugging Face's Metaspace prepend_scheme "first" adds it
  // only at the start of the text, not after a special token).
  std::string normalize(std::string_view text, bool dummy_prefix) const;

 private:
  // The normalised form of the longest known prefix of `text` and how many bytes it consumed.
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view text) const;

  // Offsets into blob_ rather than pointers, so copies stay valid.
  std::string blob_;
  size_t n_units_ = 0;             // trie units from byte 4
  size_t replacements_begin_ = 0;  // the replacement strings from here
};

}  // namespace attend::tokenize
