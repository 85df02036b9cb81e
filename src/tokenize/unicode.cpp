#include "tokenize/unicode.h"

#include <attend/error.h>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>
#include <climits>
#include <unordered_map>
#include <vector>

namespace attend::tokenize {

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

namespace {

CharClass icu_class(char32_t c) {
  if (u_isUWhiteSpace(static_cast<UChar32>(c))) return CharClass::Space;
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return CharClass::Letter;
  if (mask & U_GC_N_MASK) return CharClass::Number;
  return CharClass::Other;
}

// A two-level table over all of Unicode: 4352 blocks of 256 code points, identical blocks shared.
// Built once from ICU (about 5 ms); afterwards a lookup is two loads.
struct ClassTable {
  std::array<uint16_t, 0x110000 / 256> block_of{};
  std::vector<std::array<CharClass, 256>> blocks;

  ClassTable() {
    std::unordered_map<std::string, uint16_t> index;
    for (char32_t b = 0; b < 0x110000 / 256; ++b) {
      std::array<CharClass, 256> block;
      for (char32_t k = 0; k < 256; ++k) block[k] = icu_class(b * 256 + k);
      const std::string key(reinterpret_cast<const char*>(block.data()), block.size());
      auto [it, inserted] = index.try_emplace(key, static_cast<uint16_t>(blocks.size()));
      if (inserted) blocks.push_back(block);
      block_of[b] = it->second;
    }
  }
};

const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

// UTF-8 <-> UTF-16 for ICU's normaliser; invalid bytes become U+FFFD.
std::u16string to_utf16(std::string_view text) {
  check(text.size() < INT32_MAX / 4, "text of {} bytes is too long for Unicode normalisation in one piece", text.size());
  std::u16string out(text.size() + 1, u'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF8WithSub(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &length,
                       text.data(), static_cast<int32_t>(text.size()), 0xFFFD, nullptr, &status);
  check(U_SUCCESS(status), "UTF-8 to UTF-16 conversion failed: {}", u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return out;
}

std::string to_utf8(const std::u16string& text) {
  std::string out(text.size() * 3 + 1, '\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &length, reinterpret_cast<const UChar*>(text.data()),
              static_cast<int32_t>(text.size()), &status);
  check(U_SUCCESS(status), "UTF-16 to UTF-8 conversion failed: {}", u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return out;
}

std::u16string normalize(const UNormalizer2* normalizer, const std::u16string& text) {
  UErrorCode status = U_ZERO_ERROR;
  const auto* src = reinterpret_cast<const UChar*>(text.data());
  const auto n = static_cast<int32_t>(text.size());
  int32_t needed = unorm2_normalize(normalizer, src, n, nullptr, 0, &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  std::u16string out(static_cast<size_t>(needed), u'\0');
  unorm2_normalize(normalizer, src, n, reinterpret_cast<UChar*>(out.data()), needed, &status);
  check(U_SUCCESS(status), "Unicode normalisation failed: {}", u_errorName(status));
  return out;
}

const UNormalizer2* instance(const UNormalizer2* (*get)(UErrorCode*)) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = get(&status);
  check(U_SUCCESS(status), "ICU normaliser unavailable: {}", u_errorName(status));
  return normalizer;
}

}  // namespace

CharClass char_class(char32_t c) {
  if (c >= 0x110000) return CharClass::Other;
  const ClassTable& table = class_table();
  return table.blocks[table.block_of[c >> 8]][c & 0xFF];
}

bool is_whitespace(char32_t c) { return c < 0x110000 && u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return c < 0x110000 && (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  // Hugging Face's (the unicode_categories crate's is_other): Cc, Cf, Cs, Co; unassigned code points (Cn)
  // are kept.
  constexpr uint32_t mask = U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CS_MASK | U_GC_CO_MASK;
  return c < 0x110000 && (U_GET_GC_MASK(static_cast<UChar32>(c)) & mask) != 0;
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_numeric(char32_t c) { return c < 0x110000 && (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }

bool is_word_char(char32_t c) {
  if (c >= 0x110000) return false;
  const auto u = static_cast<UChar32>(c);
  const uint32_t mask = U_GET_GC_MASK(u);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

bool is_combining_mark(char32_t c) { return c < 0x110000 && (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_M_MASK) != 0; }

bool is_other(char32_t c) { return c < 0x110000 && (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_C_MASK) != 0; }

std::string nfc(std::string_view text) { return to_utf8(normalize(instance(unorm2_getNFCInstance), to_utf16(text))); }

std::string nfkd(std::string_view text) { return to_utf8(normalize(instance(unorm2_getNFKDInstance), to_utf16(text))); }

std::string to_lower_chars(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = decode_utf8(text, i);
    const auto length = static_cast<size_t>(cp.length);
    if (cp.value < 0x80) {
      out += static_cast<char>(cp.value >= 'A' && cp.value <= 'Z' ? cp.value + 32 : cp.value);
    } else if (cp.value == kInvalid) {
      out += "\xEF\xBF\xBD";
    } else {
      out += to_lower(text.substr(i, length));  // one character: no context, as Rust's char::to_lowercase
    }
    i += length;
  }
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const CodePoint cp = decode_utf8(s, i, n);
    if (cp.value != kInvalid) {
      out.append(bytes.substr(i, static_cast<size_t>(cp.length)));
      i += static_cast<size_t>(cp.length);
      continue;
    }
    // The maximal subpart: the longest prefix of a well-formed sequence starting at i (Unicode 3.9, D93b),
    // at least one byte.
    const unsigned c = s[i];
    size_t need = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = 1;
    for (; k <= need && i + k < n; ++k) {
      const unsigned b = s[i + k];
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
    }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

std::string nfd(std::string_view text) { return to_utf8(normalize(instance(unorm2_getNFDInstance), to_utf16(text))); }

std::string nfkc(std::string_view text) {
  return to_utf8(normalize(instance(unorm2_getNFKCInstance), to_utf16(text)));
}

std::string to_lower(std::string_view text) {
  const std::u16string src = to_utf16(text);
  std::u16string out(src.size() + 16, u'\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode status = U_ZERO_ERROR;
    const int32_t length = u_strToLower(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                                        reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                                        "", &status);
    if (status == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(static_cast<size_t>(length), u'\0');
      continue;
    }
    check(U_SUCCESS(status), "lower-casing failed: {}", u_errorName(status));
    out.resize(static_cast<size_t>(length));
    break;
  }
  return to_utf8(out);
}

std::string strip_accents(std::string_view text) {
  const std::string decomposed = nfd(text);
  std::string out;
  out.reserve(decomposed.size());
  for (size_t i = 0; i < decomposed.size();) {
    const CodePoint cp = decode_utf8(decomposed, i);
    if (cp.value == kInvalid || u_charType(static_cast<UChar32>(cp.value)) != U_NON_SPACING_MARK)
      out.append(decomposed, i, static_cast<size_t>(cp.length));
    i += static_cast<size_t>(cp.length);
  }
  return out;
}

namespace {

// The code point standing for each byte (GPT-2's bytes_to_unicode).
struct Gpt2Letters {
  std::array<char32_t, 256> letter{};
  std::unordered_map<char32_t, unsigned char> byte;
  Gpt2Letters() {
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      letter[b] = printable ? b : next++;
      byte[letter[b]] = static_cast<unsigned char>(b);
    }
  }
};

const Gpt2Letters& gpt2_letters() {
  static const Gpt2Letters table;
  return table;
}

}  // namespace

std::string bytes_to_gpt2_letters(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, gpt2_letters().letter[b]);
  return out;
}

std::optional<std::string> gpt2_letters_to_bytes(std::string_view letters) {
  std::string out;
  out.reserve(letters.size());
  const auto& table = gpt2_letters().byte;
  for (size_t i = 0; i < letters.size();) {
    const CodePoint cp = decode_utf8(letters, i);
    auto it = table.find(cp.value);
    if (it == table.end()) return std::nullopt;
    out += static_cast<char>(it->second);
    i += static_cast<size_t>(cp.length);
  }
  return out;
}

std::vector<uint32_t> char_bounds(std::string_view text) {
  check(text.size() < UINT32_MAX, "text of {} bytes is too long to segment (at most 4 GiB)", text.size());
  std::vector<uint32_t> bounds{0};
  for (size_t i = 0; i < text.size();) {
    i += static_cast<size_t>(decode_utf8(text, i).length);
    bounds.push_back(static_cast<uint32_t>(i));
  }
  return bounds;
}

std::string byte_piece_name(unsigned char byte) { return fmt::format("<0x{:02X}>", byte); }

std::optional<unsigned char> parse_byte_piece(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = decode_utf8(text, i);
    if (cp.value == kInvalid) return false;
    i += static_cast<size_t>(cp.length);
  }
  return true;
}

}  // namespace attend::tokenize
