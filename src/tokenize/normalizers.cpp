#include "tokenize/normalizers.h"

#include "core/base64.h"
#include "core/enum_names.h"
#include "tokenize/unicode.h"

#include <attend/error.h>

#include <unicode/ubrk.h>
#include <unicode/utext.h>

namespace attend::tokenize {

namespace {

using Kind = NormalizerStep::Kind;

constexpr EnumName<Kind> kNames[] = {{Kind::NFC, "NFC"},           {Kind::NFD, "NFD"},         {Kind::NFKC, "NFKC"},
                           {Kind::NFKD, "NFKD"},         {Kind::Lowercase, "Lowercase"}, {Kind::Strip, "Strip"},
                           {Kind::StripAccents, "StripAccents"}, {Kind::Replace, "Replace"}, {Kind::Prepend, "Prepend"},
                           {Kind::Bert, "BertNormalizer"}, {Kind::Precompiled, "Precompiled"}, {Kind::ByteLevel, "ByteLevel"}};

// Keeps the characters `keep` accepts; reports whether the first character survived.
template <typename Keep>
std::string filter_chars(std::string_view text, Keep keep, bool& first_kept) {
  std::string out;
  out.reserve(text.size());
  bool first = true;
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = decode_utf8(text, i);
    const bool kept = keep(cp.value);
    if (kept) out.append(text.substr(i, static_cast<size_t>(cp.length)));
    if (first && !kept) first_kept = false;
    first = false;
    i += static_cast<size_t>(cp.length);
  }
  return out;
}

// Rust's char::is_whitespace: Unicode White_Space.
std::string_view strip(std::string_view text, bool left, bool right) {
  auto space_at = [&](size_t i) {
    const CodePoint cp = decode_utf8(text, i);
    return cp.value != kInvalid && is_whitespace(cp.value) ? static_cast<size_t>(cp.length) : 0;
  };
  if (left) {
    while (!text.empty()) {
      if (const size_t n = space_at(0)) text.remove_prefix(n);
      else break;
    }
  }
  if (right)
    while (!text.empty()) {
      size_t s = text.size() - 1;
      while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
      if (space_at(s) == text.size() - s) text.remove_suffix(text.size() - s);
      else break;
    }
  return text;
}

// Precompiled (Hugging Face): grapheme by grapheme; a grapheme under 6 bytes is replaced whole when the map
// knows it; otherwise each character by itself.
std::string precompiled(const SpNormalizer& map, std::string_view text, bool& first_kept) {
  UErrorCode status = U_ZERO_ERROR;
  UText* ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  UBreakIterator* it = ubrk_open(UBRK_CHARACTER, "", nullptr, 0, &status);
  if (U_SUCCESS(status)) ubrk_setUText(it, ut, &status);
  if (!U_SUCCESS(status)) {
    ubrk_close(it);
    utext_close(ut);
    throw Error(fmt::format("grapheme segmentation failed: {}", u_errorName(status)));
  }
  std::string out;
  out.reserve(text.size());
  bool first = true;
  for (int32_t begin = ubrk_first(it), end = ubrk_next(it); end != UBRK_DONE; begin = end, end = ubrk_next(it)) {
    const std::string_view grapheme = text.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    if (grapheme.size() < 6)
      if (auto r = map.first_match(grapheme)) {
        if (first && r->empty()) first_kept = false;
        first = false;
        out.append(*r);
        continue;
      }
    for (size_t i = 0; i < grapheme.size();) {
      const auto length = static_cast<size_t>(decode_utf8(grapheme, i).length);
      const std::string_view ch = grapheme.substr(i, length);
      const auto r = map.first_match(ch);
      if (first && r && r->empty()) first_kept = false;
      first = false;
      out.append(r ? *r : ch);
      i += length;
    }
  }
  ubrk_close(it);
  utext_close(ut);
  return out;
}

}  // namespace

std::string bert_normalize(std::string_view text, const BertNormalization& b) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto cp = decode_utf8(text, i);
    const std::string_view ch = text.substr(i, static_cast<size_t>(cp.length));
    i += static_cast<size_t>(cp.length);
    if (b.clean_text) {
      if (cp.value == 0 || cp.value == 0xFFFD || cp.value == kInvalid || is_control(cp.value)) continue;
      if (is_whitespace(cp.value)) {
        out += ' ';
        continue;
      }
    }
    if (b.handle_chinese_chars && is_cjk(cp.value)) {
      out += ' ';
      out += ch;
      out += ' ';
      continue;
    }
    out += ch;
  }
  if (b.strip_accents) out = strip_accents(out);
  if (b.lowercase) out = to_lower_chars(out);
  return out;
}

std::string replace_all(const NormalizerStep& step, std::string_view text, bool* first_removed) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.regex) {
    step.compiled->find_all(text, matches);
  } else {  // a literal: its leftmost non-overlapping occurrences, as the escaped regex finds them
    for (size_t at = text.find(step.pattern); at != std::string_view::npos; at = text.find(step.pattern, at + step.pattern.size()))
      matches.emplace_back(at, at + step.pattern.size());
  }
  std::string out;
  out.reserve(text.size());
  size_t done = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(done, begin - done));
    out.append(step.content);
    if (first_removed && begin == 0 && end > 0 && step.content.empty()) *first_removed = true;
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

bool Normalizer::byte_level() const {
  for (const NormalizerStep& s : steps)
    if (s.kind == Kind::ByteLevel) return true;
  return false;
}

std::string Normalizer::apply(std::string_view input, bool& first_kept) const {
  std::string text(input);
  for (const NormalizerStep& s : steps) {
    if (text.empty()) break;
    switch (s.kind) {
      case Kind::NFC: text = nfc(text); break;
      case Kind::NFD: text = nfd(text); break;
      case Kind::NFKC: text = nfkc(text); break;
      case Kind::NFKD: text = nfkd(text); break;
      case Kind::Lowercase: text = to_lower_chars(text); break;
      case Kind::Strip: {
        const std::string_view kept = strip(text, s.left, s.right);
        if (kept.data() != text.data()) first_kept = false;
        text = std::string(kept);
        break;
      }
      case Kind::StripAccents:
        text = filter_chars(text, [](char32_t c) { return c == kInvalid || !is_combining_mark(c); }, first_kept);
        break;
      case Kind::Replace: {
        bool removed = false;
        text = replace_all(s, text, &removed);
        if (removed) first_kept = false;
        break;
      }
      case Kind::Prepend: text = s.content + text; break;
      case Kind::Bert: {
        if (s.bert.clean_text) {
          const CodePoint cp = decode_utf8(text, 0);
          if (cp.value == 0 || cp.value == 0xFFFD || cp.value == kInvalid || is_control(cp.value)) first_kept = false;
        }
        text = bert_normalize(text, s.bert);
        break;
      }
      case Kind::Precompiled: text = precompiled(*s.charsmap, text, first_kept); break;
      case Kind::ByteLevel: break;  // bytes are the model's symbols already
    }
  }
  return text;
}

// ---------------------------------------------------------------------------------------------------
// tokenizer.json

namespace {

void read_step(const json& c, const Reader& r, const std::string& path, Normalizer& out) {
  const std::string type = r.string(r.field(c, path, "type"), path + ".type");
  if (type == "Sequence") {
    const json& list = r.field(c, path, "normalizers");
    check(list.is_array(), "{}: {}.normalizers is {}, expected an array", r.origin, path, list.type_name());
    for (size_t i = 0; i < list.size(); ++i) read_step(list[i], r, fmt::format("{}.normalizers[{}]", path, i), out);
    out.sequence = true;
    return;
  }
  NormalizerStep s;
  const std::optional<Kind> kind = find_enum<Kind>(kNames, type);
  check(kind.has_value(), "{}: {}.type is {:?}; expected NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, "
        "BertNormalizer, Precompiled, ByteLevel or Sequence", r.origin, path, type);
  s.kind = *kind;
  switch (s.kind) {
    case Kind::Strip:
      s.left = r.boolean(r.optional(c, "strip_left"), path + ".strip_left", true);
      s.right = r.boolean(r.optional(c, "strip_right"), path + ".strip_right", true);
      break;
    case Kind::Replace: {
      const json& pattern = r.field(c, path, "pattern");
      if (pattern.is_object() && pattern.contains("Regex")) {
        s.regex = true;
        s.pattern = r.string(pattern["Regex"], path + ".pattern.Regex");
        s.compiled = std::make_shared<RegexSplitter>(onig_to_pcre2(s.pattern));
      } else {
        s.pattern = r.string(r.field(pattern, path + ".pattern", "String"), path + ".pattern.String");
        check(!s.pattern.empty(), "{}: {}.pattern.String is empty, expected the text to replace", r.origin, path);
        s.compiled = std::make_shared<RegexSplitter>(quote_literal(s.pattern));
      }
      s.content = r.string(r.field(c, path, "content"), path + ".content");
      break;
    }
    case Kind::Prepend: s.content = r.string(r.field(c, path, "prepend"), path + ".prepend"); break;
    case Kind::Bert: {
      BertNormalization& b = s.bert;
      b.clean_text = r.boolean(r.optional(c, "clean_text"), path + ".clean_text", true);
      b.handle_chinese_chars = r.boolean(r.optional(c, "handle_chinese_chars"), path + ".handle_chinese_chars", true);
      b.lowercase = r.boolean(r.optional(c, "lowercase"), path + ".lowercase", true);
      b.strip_accents_null = r.optional(c, "strip_accents") == nullptr;
      b.strip_accents = r.boolean(r.optional(c, "strip_accents"), path + ".strip_accents", b.lowercase);
      break;
    }
    case Kind::Precompiled: {
      auto map = std::make_shared<SpNormalizer>();
      const json* blob = r.optional(c, "precompiled_charsmap");
      if (blob)
        map->set_charsmap(base64_decode(r.string(*blob, path + ".precompiled_charsmap"),
                                        fmt::format("{}: {}.precompiled_charsmap", r.origin, path)),
                          r.origin);
      s.charsmap = std::move(map);
      break;
    }
    default: break;
  }
  out.steps.push_back(std::move(s));
}

json write_step(const NormalizerStep& s) {
  json j = {{"type", enum_name<Kind>(kNames, s.kind)}};
  switch (s.kind) {
    case Kind::Strip: j["strip_left"] = s.left; j["strip_right"] = s.right; break;
    case Kind::Replace:
      j["pattern"] = s.regex ? json{{"Regex", s.pattern}} : json{{"String", s.pattern}};
      j["content"] = s.content;
      break;
    case Kind::Prepend: j["prepend"] = s.content; break;
    case Kind::Bert:
      j["clean_text"] = s.bert.clean_text;
      j["handle_chinese_chars"] = s.bert.handle_chinese_chars;
      j["strip_accents"] = s.bert.strip_accents_null ? json(nullptr) : json(s.bert.strip_accents);
      j["lowercase"] = s.bert.lowercase;
      break;
    case Kind::Precompiled: j["precompiled_charsmap"] = base64_encode(s.charsmap->charsmap()); break;
    default: break;
  }
  return j;
}

}  // namespace

Normalizer read_normalizer(const json* node, const Reader& r, const std::string& path) {
  Normalizer n;
  if (node) read_step(*node, r, path, n);
  return n;
}

json write_normalizer(const Normalizer& n) {
  return write_stage(n, "normalizers", [](const NormalizerStep& s) { return write_step(s); });
}

}  // namespace attend::tokenize
