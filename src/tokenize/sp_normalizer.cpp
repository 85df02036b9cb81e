#include "tokenize/sp_normalizer.h"

#include "tokenize/unicode.h"

#include <attend/error.h>

#include <algorithm>
#include <cstring>

namespace attend::tokenize {

namespace {

// A unit of the double-array trie (the Darts-clone layout SentencePiece uses).
bool has_leaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t leaf_value(uint32_t unit) { return unit & ((1U << 31) - 1); }
uint32_t label(uint32_t unit) { return unit & ((1U << 31) | 0xFF); }
uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Walks the trie (`n_units` little-endian uint32 from byte 4 of `blob`) along `text`'s bytes: on_leaf(length,
// value) for each prefix that ends at a leaf, shortest first, until it returns false; `value` is an offset into the
// replacements, unchecked. The walk ends at the first byte the trie does not continue with, and at a NUL byte when
// `stop_at_nul`.
template <typename F>
void walk_trie(std::string_view blob, size_t n_units, std::string_view text, bool stop_at_nul, F&& on_leaf) {
  auto unit_at = [&](size_t i) {  // memcpy keeps the reads aligned-safe
    uint32_t u;
    std::memcpy(&u, blob.data() + 4 + 4 * i, 4);
    return u;
  };
  size_t pos = offset(unit_at(0));
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (stop_at_nul && c == 0) break;
    pos ^= c;
    if (pos >= n_units) break;
    const uint32_t unit = unit_at(pos);
    if (label(unit) != c) break;
    pos ^= offset(unit);
    if (pos >= n_units) break;
    if (has_leaf(unit) && !on_leaf(i + 1, leaf_value(unit_at(pos)))) return;
  }
}

// The NUL-terminated replacement at `value` of the replacements.
std::string_view replacement_at(std::string_view replacements, uint32_t value) {
  const std::string_view rest = replacements.substr(value);
  return rest.substr(0, std::min(rest.find('\0'), rest.size()));
}

}  // namespace

void SpNormalizer::set_charsmap(std::string blob, std::string_view origin) {
  blob_ = std::move(blob);
  n_units_ = 0;
  replacements_begin_ = 0;
  if (blob_.empty()) return;
  check(blob_.size() >= 4, "{}: precompiled_charsmap has {} bytes, too short to hold its trie size", origin, blob_.size());
  uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, blob_.data(), 4);
  check(trie_bytes % 4 == 0 && trie_bytes > 0 && trie_bytes <= blob_.size() - 4,
        "{}: precompiled_charsmap says its trie has {} bytes, but the map holds {} after the size", origin, trie_bytes,
        blob_.size() - 4);
  n_units_ = trie_bytes / 4;
  replacements_begin_ = 4 + trie_bytes;
}

std::pair<std::string_view, size_t> SpNormalizer::normalize_prefix(std::string_view text) const {
  for (const std::string& u : user_defined)
    if (!u.empty() && text.starts_with(u)) return {text.substr(0, u.size()), u.size()};
  if (n_units_ > 0) {
    const std::string_view replacements = std::string_view(blob_).substr(replacements_begin_);
    size_t longest = 0;
    uint32_t value = 0;
    walk_trie(blob_, n_units_, text, false, [&](size_t length, uint32_t v) {
      longest = length, value = v;
      return true;
    });
    if (longest > 0 && value < replacements.size()) return {replacement_at(replacements, value), longest};
  }
  const CodePoint cp = decode_utf8(text, 0);
  if (cp.value == kInvalid) return {kReplacementChar, 1};
  return {text.substr(0, static_cast<size_t>(cp.length)), static_cast<size_t>(cp.length)};
}

std::optional<std::string_view> SpNormalizer::first_match(std::string_view chunk) const {
  if (n_units_ == 0) return std::nullopt;
  const std::string_view replacements = std::string_view(blob_).substr(replacements_begin_);
  std::optional<std::string_view> found;
  walk_trie(blob_, n_units_, chunk, true, [&](size_t, uint32_t value) {
    if (value < replacements.size()) found = replacement_at(replacements, value);
    return false;  // the first leaf decides, a bad offset included
  });
  return found;
}

std::string SpNormalizer::normalize(std::string_view text, bool dummy_prefix) const {
  std::string out;
  out.reserve(text.size() + 8);
  if (remove_extra_whitespaces) {  // leading whitespace
    while (!text.empty()) {
      const auto [normalized, consumed] = normalize_prefix(text);
      if (normalized != " ") break;
      text.remove_prefix(consumed);
    }
  }
  if (text.empty()) return out;
  const std::string_view space = escape_whitespaces ? kSpace : std::string_view(" ");
  if (dummy_prefix && !treat_whitespace_as_suffix) out += space;
  bool previous_space = remove_extra_whitespaces;
  while (!text.empty()) {
    auto [normalized, consumed] = normalize_prefix(text);
    while (previous_space && normalized.starts_with(' ')) normalized.remove_prefix(1);
    if (!normalized.empty()) {
      for (char c : normalized) {
        if (c == ' ') out += space;
        else out += c;
      }
      if (remove_extra_whitespaces) previous_space = normalized.back() == ' ';
    }
    text.remove_prefix(consumed);
  }
  if (remove_extra_whitespaces)
    while (std::string_view(out).ends_with(space)) out.resize(out.size() - space.size());
  if (dummy_prefix && treat_whitespace_as_suffix) out += space;
  return out;
}

}  // namespace attend::tokenize
