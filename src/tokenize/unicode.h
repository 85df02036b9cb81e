// UTF-8 and the few Unicode facts tokenizers need: character classes for GPT-2's pre-tokeniser,
// and normalisation (NFD, NFKC, lower-casing, accent stripping) for WordPiece and Unigram.
//
// Text is always a byte string. Bytes that are not valid UTF-8 decode one at a time to kInvalid, so a
// tokenizer can carry them through unchanged (byte-level BPE is lossless on any input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize {

inline constexpr char32_t kInvalid = 0xFFFFFFFF;  // a byte that does not start valid UTF-8

struct CodePoint {
  char32_t value;  // kInvalid for an invalid byte
  int length;      // bytes consumed, 1-4
};

// Decodes the code point that starts at s[i] (i < n). Overlong forms, surrogates and values above
// U+10FFFF are invalid, as are truncated sequences: each such byte decodes alone as kInvalid.
inline CodePoint decode_utf8(const unsigned char* s, size_t i, size_t n) {
  const unsigned c = s[i];
  if (c < 0x80) return {c, 1};
  auto cont = [&](size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF && cont(1)) return {((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), 2};
  if (c >= 0xE0 && c <= 0xEF && cont(1) && cont(2)) {
    const char32_t v = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    if (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) return {v, 3};
  }
  if (c >= 0xF0 && c <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const char32_t v = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                       (s[i + 3] & 0x3Fu);
    if (v >= 0x10000 && v <= 0x10FFFF) return {v, 4};
  }
  return {kInvalid, 1};
}

inline CodePoint decode_utf8(std::string_view s, size_t i) {
  return decode_utf8(reinterpret_cast<const unsigned char*>(s.data()), i, s.size());
}

void append_utf8(std::string& out, char32_t c);

// The classes of GPT-2's pattern: \p{L}, \p{N}, \s (Unicode White_Space), and everything else.
enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };

// From ICU's character database. kInvalid is Other.
CharClass char_class(char32_t c);

bool is_whitespace(char32_t c);   // Unicode White_Space
bool is_punctuation(char32_t c);  // as BERT splits: ASCII symbols and Unicode P* categories
bool is_control(char32_t c);      // as BERT drops: Cc, Cf, Cs, Co except \t \n \r
bool is_cjk(char32_t c);          // the CJK ideograph blocks BERT surrounds with spaces

// Hugging Face's character predicates (Rust's char methods and the regex crate's classes):
bool is_numeric(char32_t c);         // char::is_numeric: \p{N}
bool is_word_char(char32_t c);       // regex \w: alphabetic, marks, decimal digits, connector punctuation, joiners
bool is_combining_mark(char32_t c);  // general category M (Mn, Mc, Me)
bool is_other(char32_t c);           // general category C (Cc, Cf, Cs, Co, Cn)

// Unicode normalisation forms and case mapping (ICU). Invalid UTF-8 bytes become U+FFFD first.
std::string nfd(std::string_view text);
std::string nfkc(std::string_view text);
std::string nfc(std::string_view text);
std::string nfkd(std::string_view text);
std::string to_lower(std::string_view text);
// Lower-cases character by character, each by its full mapping without context (Rust's char::to_lowercase,
// which Hugging Face's Lowercase uses: a final sigma stays σ, İ becomes i + U+0307).
std::string to_lower_chars(std::string_view text);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// NFD, then drops combining marks (category Mn): "Café" -> "Cafe".
std::string strip_accents(std::string_view text);

// GPT-2's byte-to-unicode letters: vocabulary files write each byte as a printable character (bytes
// that are printable Latin-1 stand for themselves, the others map to U+0100 upward: ' ' is 'Ġ').
std::string bytes_to_gpt2_letters(std::string_view bytes);
// The inverse; nothing if `letters` holds a character outside the 256 letters.
std::optional<std::string> gpt2_letters_to_bytes(std::string_view letters);

// Byte offsets of the character boundaries of `text`: 0, then the end of each character.
std::vector<uint32_t> char_bounds(std::string_view text);

// "<0x41>", the name byte-fallback vocabularies give a single byte, and its inverse (nothing unless the
// text is exactly "<0x" two hex digits ">").
std::string byte_piece_name(unsigned char byte);
std::optional<unsigned char> parse_byte_piece(std::string_view text);

// Whether every byte of `text` is valid UTF-8.
bool is_valid_utf8(std::string_view text);

}  // namespace attend::tokenize
