#include "tokenize/pre_tokenizers.h"

#include "core/enum_names.h"
#include "tokenize/unicode.h"

#include <attend/error.h>

namespace attend::tokenize {

namespace {

using Kind = PreTokenizerStep::Kind;

// A stretch of a piece: a delimiter (match) or the text between delimiters.
struct Span {
  size_t begin, end;
  bool match;
};

// Hugging Face's NormalizedString::split: spans -> pieces by the behaviour; empty pieces dropped.
void split_spans(const Piece& p, const std::vector<Span>& spans, SplitBehavior behavior, std::vector<Piece>& out) {
  struct Cut {
    size_t begin, end;
    bool removed;
  };
  std::vector<Cut> cuts;
  cuts.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& s : spans) cuts.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans) cuts.push_back({s.begin, s.end, s.match});
      break;
    case SplitBehavior::Contiguous:
      for (const Span& s : spans) {
        if (s.match == previous_match && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !previous_match && !cuts.empty()) cuts.back().begin = s.begin;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const Cut& c : cuts)
    if (!c.removed && c.end > c.begin) out.push_back({p.text.substr(c.begin, c.end - c.begin), p.at_origin && c.begin == 0});
}

// Spans of a character predicate: every matching character is a delimiter of its own.
template <typename Pred>
void char_spans(std::string_view text, Pred is_delimiter, std::vector<Span>& spans) {
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = decode_utf8(text, i);
    const size_t end = i + static_cast<size_t>(cp.length);
    if (cp.value != kInvalid && is_delimiter(cp.value)) {
      if (last < i) spans.push_back({last, i, false});
      spans.push_back({i, end, true});
      last = end;
    }
    i = end;
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
}

void regex_spans(const RegexSplitter& re, std::string_view text, bool invert, std::vector<Span>& spans) {
  std::vector<std::pair<size_t, size_t>> matches;
  re.find_all(text, matches);
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    if (last != b) spans.push_back({last, b, invert});
    spans.push_back({b, e, !invert});
    last = e;
  }
  if (last != text.size()) spans.push_back({last, text.size(), invert});
}

bool is_bert_punctuation(char32_t c) { return is_punctuation(c); }

// Whitespace: the matches of \w+|[^\w\s]+ (runs of word characters, runs of other non-space characters).
void whitespace_words(const Piece& p, std::vector<Piece>& out) {
  const std::string_view t = p.text;
  size_t i = 0;
  while (i < t.size()) {
    auto cls = [&](size_t at) {
      const CodePoint cp = decode_utf8(t, at);
      if (cp.value != kInvalid && is_word_char(cp.value)) return 1;
      if (cp.value != kInvalid && is_whitespace(cp.value)) return 0;
      return 2;
    };
    const int c = cls(i);
    size_t end = i + static_cast<size_t>(decode_utf8(t, i).length);
    if (c == 0) {
      i = end;
      continue;
    }
    while (end < t.size() && cls(end) == c) end += static_cast<size_t>(decode_utf8(t, end).length);
    out.push_back({t.substr(i, end - i), p.at_origin && i == 0});
    i = end;
  }
}

void apply_step(const PreTokenizerStep& s, const Piece& p, std::vector<Piece>& out, TextArena& arena) {
  std::vector<Span> spans;
  switch (s.kind) {
    case Kind::Split:
      if (p.text.empty()) return;
      if (s.behavior == SplitBehavior::Isolated && !s.invert) {
        // Isolated keeps every match and every gap: the pieces tile the text, which RegexSplitter::split
        // gives directly (Llama 3's, Qwen's and DeepSeek's pre-tokenizers).
        std::vector<std::string_view> words;
        s.compiled->split(p.text, words);
        for (size_t k = 0; k < words.size(); ++k) out.push_back({words[k], p.at_origin && k == 0});
        return;
      }
      if (!s.regex && !s.pattern.empty() && static_cast<size_t>(decode_utf8(s.pattern, 0).length) == s.pattern.size()) {
        // One character (Gemma's " "): each occurrence is a delimiter, found without the regex engine.
        const char32_t c = decode_utf8(s.pattern, 0).value;
        char_spans(p.text, [c](char32_t x) { return x == c; }, spans);
        if (s.invert)
          for (Span& span : spans) span.match = !span.match;
      } else {
        regex_spans(*s.compiled, p.text, s.invert, spans);
      }
      split_spans(p, spans, s.behavior, out);
      return;
    case Kind::ByteLevel: {
      Piece q = p;
      if (s.add_prefix_space && !q.text.starts_with(' ')) q.text = arena.emplace_back(" " + std::string(q.text));
      if (!s.use_regex) {
        out.push_back(q);
        return;
      }
      const size_t first = out.size();
      std::vector<std::string_view> words;
      split_gpt2(q.text, words);
      for (std::string_view w : words) out.push_back({w, false});
      if (out.size() > first) out[first].at_origin = q.at_origin;
      return;
    }
    case Kind::Metaspace: {
      std::string text;
      text.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') text += s.replacement;
        else text += c;
      }
      const bool prepend = (s.prepend == PrependScheme::Always || (s.prepend == PrependScheme::First && p.at_origin)) &&
                           !std::string_view(text).starts_with(s.replacement);
      if (prepend) text = s.replacement + text;
      const Piece q{arena.emplace_back(std::move(text)), p.at_origin};
      if (!s.split) {
        if (!q.text.empty()) out.push_back(q);
        return;
      }
      const char32_t r = decode_utf8(s.replacement, 0).value;
      char_spans(q.text, [r](char32_t c) { return c == r; }, spans);
      split_spans(q, spans, SplitBehavior::MergedWithNext, out);
      return;
    }
    case Kind::Whitespace: whitespace_words(p, out); return;
    case Kind::WhitespaceSplit:
      char_spans(p.text, [](char32_t c) { return is_whitespace(c); }, spans);
      split_spans(p, spans, SplitBehavior::Removed, out);
      return;
    case Kind::Digits:
      char_spans(p.text, [](char32_t c) { return is_numeric(c); }, spans);
      split_spans(p, spans, s.individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, out);
      return;
    case Kind::Punctuation:
      char_spans(p.text, is_bert_punctuation, spans);
      split_spans(p, spans, s.behavior, out);
      return;
    case Kind::Bert: {
      std::vector<Piece> words;
      char_spans(p.text, [](char32_t c) { return is_whitespace(c); }, spans);
      split_spans(p, spans, SplitBehavior::Removed, words);
      for (const Piece& w : words) {
        spans.clear();
        char_spans(w.text, is_bert_punctuation, spans);
        split_spans(w, spans, SplitBehavior::Isolated, out);
      }
      return;
    }
    case Kind::CharDelimiter: {
      const char32_t d = s.delimiter;
      char_spans(p.text, [d](char32_t c) { return c == d; }, spans);
      split_spans(p, spans, SplitBehavior::Removed, out);
      return;
    }
  }
}

constexpr std::string_view kBehaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};

}  // namespace

std::string_view behavior_name(SplitBehavior b) { return kBehaviors[static_cast<int>(b)]; }

SplitBehavior parse_behavior(const json& v, const Reader& r, const std::string& path) {
  const std::string name = r.string(v, path);
  for (int b = 0; b < 5; ++b)
    if (kBehaviors[b] == name) return static_cast<SplitBehavior>(b);
  throw Error(fmt::format("{}: {} is {:?}; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous",
                          r.origin, path, name));
}

bool PreTokenizer::byte_level() const {
  for (const PreTokenizerStep& s : steps)
    if (s.kind == Kind::ByteLevel) return true;
  return false;
}

bool PreTokenizer::is_gpt2() const {
  return steps.size() == 1 && steps[0].kind == Kind::ByteLevel && steps[0].use_regex && !steps[0].add_prefix_space;
}

namespace {

bool is_identity(const PreTokenizerStep& s) { return s.kind == Kind::ByteLevel && !s.add_prefix_space && !s.use_regex; }

}  // namespace

const RegexSplitter* PreTokenizer::single_isolated_split() const {
  const PreTokenizerStep* split = nullptr;
  for (const PreTokenizerStep& s : steps) {
    if (is_identity(s)) continue;
    if (split || s.kind != Kind::Split || s.behavior != SplitBehavior::Isolated || s.invert) return nullptr;
    split = &s;
  }
  return split ? split->compiled.get() : nullptr;
}

void PreTokenizer::apply(std::string_view text, bool at_origin, std::vector<Piece>& out, TextArena& arena) const {
  if (text.empty()) return;
  if (steps.empty()) {
    out.push_back({text, at_origin});
    return;
  }
  // ByteLevel without a prefix space or its pattern changes nothing here (bytes are the model's symbols).
  std::vector<const PreTokenizerStep*> active;
  for (const PreTokenizerStep& s : steps)
    if (!is_identity(s)) active.push_back(&s);
  if (active.empty()) {
    out.push_back({text, at_origin});
    return;
  }
  std::vector<Piece> current{{text, at_origin}}, next;
  for (size_t k = 0; k < active.size(); ++k) {
    std::vector<Piece>& target = k + 1 == active.size() ? out : next;
    for (const Piece& p : current) apply_step(*active[k], p, target, arena);
    if (k + 1 < active.size()) {
      current.swap(next);
      next.clear();
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// tokenizer.json

namespace {

constexpr EnumName<Kind> kNames[] = {{Kind::Split, "Split"},           {Kind::ByteLevel, "ByteLevel"},
                           {Kind::Metaspace, "Metaspace"},   {Kind::Whitespace, "Whitespace"},
                           {Kind::WhitespaceSplit, "WhitespaceSplit"}, {Kind::Digits, "Digits"},
                           {Kind::Punctuation, "Punctuation"}, {Kind::Bert, "BertPreTokenizer"},
                           {Kind::CharDelimiter, "CharDelimiterSplit"}};

void read_step(const json& c, const Reader& r, const std::string& path, PreTokenizer& out) {
  const std::string type = r.string(r.field(c, path, "type"), path + ".type");
  if (type == "Sequence") {
    const json& list = r.field(c, path, "pretokenizers");
    check(list.is_array(), "{}: {}.pretokenizers is {}, expected an array", r.origin, path, list.type_name());
    for (size_t i = 0; i < list.size(); ++i) read_step(list[i], r, fmt::format("{}.pretokenizers[{}]", path, i), out);
    out.sequence = true;
    return;
  }
  PreTokenizerStep s;
  const std::optional<Kind> kind = find_enum<Kind>(kNames, type);
  check(kind.has_value(), "{}: {}.type is {:?}; expected Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits, "
        "Punctuation, BertPreTokenizer, CharDelimiterSplit or Sequence", r.origin, path, type);
  s.kind = *kind;
  // Pieces after ByteLevel are written in GPT-2's byte letters, which Attend keeps as bytes: only another
  // ByteLevel may follow.
  check(out.steps.empty() || out.steps.back().kind != Kind::ByteLevel || s.kind == Kind::ByteLevel,
        "{}: {} ({}) comes after a ByteLevel pre-tokenizer; Attend supports ByteLevel only at the end", r.origin, path, type);
  switch (s.kind) {
    case Kind::Split: {
      const json& pattern = r.field(c, path, "pattern");
      if (pattern.is_object() && pattern.contains("Regex")) {
        s.regex = true;
        s.pattern = r.string(pattern["Regex"], path + ".pattern.Regex");
        s.compiled = std::make_shared<RegexSplitter>(onig_to_pcre2(s.pattern));
      } else {
        s.pattern = r.string(r.field(pattern, path + ".pattern", "String"), path + ".pattern.String");
        s.compiled = std::make_shared<RegexSplitter>(s.pattern.empty() ? std::string("(?!)") : quote_literal(s.pattern));
      }
      s.behavior = parse_behavior(r.field(c, path, "behavior"), r, path + ".behavior");
      s.invert = r.boolean(r.optional(c, "invert"), path + ".invert", false);
      break;
    }
    case Kind::ByteLevel:
      s.add_prefix_space = r.boolean(r.optional(c, "add_prefix_space"), path + ".add_prefix_space", true);
      s.use_regex = r.boolean(r.optional(c, "use_regex"), path + ".use_regex", true);
      s.trim_offsets = r.boolean(r.optional(c, "trim_offsets"), path + ".trim_offsets", true);
      break;
    case Kind::Metaspace: {
      s.replacement = r.string(r.field(c, path, "replacement"), path + ".replacement");
      check(!s.replacement.empty() && static_cast<size_t>(decode_utf8(s.replacement, 0).length) == s.replacement.size(),
            "{}: {}.replacement is {:?}, expected one character", r.origin, path, s.replacement);
      std::string scheme = "always";
      if (const json* v = r.optional(c, "prepend_scheme")) scheme = r.string(*v, path + ".prepend_scheme");
      else if (!r.boolean(r.optional(c, "add_prefix_space"), path + ".add_prefix_space", true)) scheme = "never";
      check(scheme == "always" || scheme == "first" || scheme == "never",
            "{}: {}.prepend_scheme is {:?}, expected always, first or never", r.origin, path, scheme);
      s.prepend = scheme == "always" ? PrependScheme::Always : scheme == "first" ? PrependScheme::First : PrependScheme::Never;
      s.split = r.boolean(r.optional(c, "split"), path + ".split", true);
      break;
    }
    case Kind::Digits:
      s.individual_digits = r.boolean(r.optional(c, "individual_digits"), path + ".individual_digits", false);
      break;
    case Kind::Punctuation:
      if (const json* b = r.optional(c, "behavior")) s.behavior = parse_behavior(*b, r, path + ".behavior");
      break;
    case Kind::CharDelimiter: {
      const std::string d = r.string(r.field(c, path, "delimiter"), path + ".delimiter");
      check(!d.empty() && static_cast<size_t>(decode_utf8(d, 0).length) == d.size() && decode_utf8(d, 0).value != kInvalid,
            "{}: {}.delimiter is {:?}, expected one character", r.origin, path, d);
      s.delimiter = decode_utf8(d, 0).value;
      break;
    }
    default: break;
  }
  out.steps.push_back(std::move(s));
}

json write_step(const PreTokenizerStep& s) {
  json j = {{"type", enum_name<Kind>(kNames, s.kind)}};
  switch (s.kind) {
    case Kind::Split:
      j["pattern"] = s.regex ? json{{"Regex", s.pattern}} : json{{"String", s.pattern}};
      j["behavior"] = behavior_name(s.behavior);
      j["invert"] = s.invert;
      break;
    case Kind::ByteLevel:
      j["add_prefix_space"] = s.add_prefix_space;
      j["trim_offsets"] = s.trim_offsets;
      j["use_regex"] = s.use_regex;
      break;
    case Kind::Metaspace:
      j["replacement"] = s.replacement;
      j["prepend_scheme"] = s.prepend == PrependScheme::Always ? "always" : s.prepend == PrependScheme::First ? "first" : "never";
      j["split"] = s.split;
      break;
    case Kind::Digits: j["individual_digits"] = s.individual_digits; break;
    case Kind::Punctuation: j["behavior"] = behavior_name(s.behavior); break;
    case Kind::CharDelimiter: {
      std::string d;
      append_utf8(d, s.delimiter);
      j["delimiter"] = d;
      break;
    }
    default: break;
  }
  return j;
}

}  // namespace

PreTokenizer read_pre_tokenizer(const json* node, const Reader& r, const std::string& path) {
  PreTokenizer p;
  if (node) read_step(*node, r, path, p);
  return p;
}

json write_pre_tokenizer(const PreTokenizer& p) {
  return write_stage(p, "pretokenizers", [](const PreTokenizerStep& s) { return write_step(s); });
}

}  // namespace attend::tokenize
