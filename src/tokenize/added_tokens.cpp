#include "tokenize/added_tokens.h"

#include "tokenize/unicode.h"

namespace attend::tokenize {

namespace {

// The code point that ends at `end` (end > 0), walking back over continuation bytes.
char32_t last_char(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  const CodePoint cp = decode_utf8(text, begin);
  return begin + static_cast<size_t>(cp.length) == end ? cp.value : kInvalid;
}

bool word_before(std::string_view text, size_t at) { return at > 0 && is_word_char(last_char(text, at)); }
bool word_after(std::string_view text, size_t at) { return at < text.size() && is_word_char(decode_utf8(text, at).value); }

}  // namespace

AddedMatcher::AddedMatcher(std::vector<Entry> entries) : entries_(std::move(entries)) {
  terminal_.push_back(-1);
  for (size_t e = 0; e < entries_.size(); ++e) {
    const std::string& t = entries_[e].text;
    if (t.empty()) continue;
    if (!first_byte_[static_cast<unsigned char>(t[0])]) first_bytes_ += t[0];
    first_byte_[static_cast<unsigned char>(t[0])] = true;
    int32_t node = 0;
    for (unsigned char b : t) {
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        edges_.emplace((uint64_t(uint32_t(node)) << 8) | b, next);
      }
      node = next;
    }
    if (terminal_[static_cast<size_t>(node)] < 0) terminal_[static_cast<size_t>(node)] = static_cast<int32_t>(e);
  }
}

int32_t AddedMatcher::child(int32_t node, unsigned char byte) const {
  auto it = edges_.find((uint64_t(uint32_t(node)) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

size_t AddedMatcher::next_candidate(std::string_view text, size_t from) const {
  if (first_bytes_.size() == 1) {
    const void* at = std::memchr(text.data() + from, first_bytes_[0], text.size() - from);
    return at ? static_cast<size_t>(static_cast<const char*>(at) - text.data()) : text.size();
  }
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  while (from < text.size() && !first_byte_[s[from]]) ++from;
  return from;
}

void AddedMatcher::find(std::string_view text, bool skip_special, std::vector<AddedTokenMatch>& out) const {
  if (entries_.empty()) return;
  size_t taken = 0;  // end of the previous accepted match
  for (size_t i = next_candidate(text, 0); i < text.size(); i = next_candidate(text, i)) {
    // The longest token starting at i.
    int32_t node = 0, found = -1;
    size_t found_end = 0;
    for (size_t k = i; k < text.size(); ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (terminal_[static_cast<size_t>(node)] >= 0) {
        found = terminal_[static_cast<size_t>(node)];
        found_end = k + 1;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    const Entry& e = entries_[static_cast<size_t>(found)];
    size_t begin = i, end = found_end;
    i = found_end;  // the scan goes on after this match whether or not it is taken
    if (skip_special && e.special) continue;
    if (e.single_word && (word_before(text, begin) || word_after(text, end))) continue;
    if (e.lstrip) {
      size_t b = begin;
      while (b > 0) {
        size_t s = b - 1;
        while (s > 0 && b - s < 4 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        const CodePoint cp = decode_utf8(text, s);
        if (cp.value == kInvalid || s + static_cast<size_t>(cp.length) != b || !is_whitespace(cp.value)) break;
        b = s;
      }
      begin = std::max(b, taken);
    }
    if (e.rstrip) {
      while (end < text.size()) {
        const CodePoint cp = decode_utf8(text, end);
        if (cp.value == kInvalid || !is_whitespace(cp.value)) break;
        end += static_cast<size_t>(cp.length);
      }
      i = std::max(i, end);
    }
    out.push_back({begin, end, e.id});
    taken = end;
  }
}

}  // namespace attend::tokenize
