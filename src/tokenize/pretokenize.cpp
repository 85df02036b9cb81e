#include "tokenize/pretokenize.h"

#include "tokenize/unicode.h"

#include <attend/error.h>

#include <algorithm>
#include <array>
#include <memory>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace attend::tokenize {

namespace {

struct Symbol {
  CharClass cls;
  size_t length;
};

// ASCII classes come from a table; everything else from the Unicode table.
constexpr auto kAsciiClass = [] {
  std::array<CharClass, 128> table{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) table[c] = CharClass::Letter;
    else if (c >= '0' && c <= '9') table[c] = CharClass::Number;
    else if (c == ' ' || (c >= '\t' && c <= '\r')) table[c] = CharClass::Space;  // Unicode White_Space
    else table[c] = CharClass::Other;
  }
  return table;
}();

inline Symbol symbol_at(const unsigned char* s, size_t i, size_t n) {
  if (s[i] < 0x80) return {kAsciiClass[s[i]], 1};
  const CodePoint cp = decode_utf8(s, i, n);
  return {char_class(cp.value), static_cast<size_t>(cp.length)};
}

// The end of the run of symbols of class `cls` that starts at i.
inline size_t run_end(const unsigned char* s, size_t i, size_t n, CharClass cls) {
  while (i < n) {
    const Symbol sym = symbol_at(s, i, n);
    if (sym.cls != cls) break;
    i += sym.length;
  }
  return i;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at s[i] == '\'', or 0.
inline size_t contraction_length(const unsigned char* s, size_t i, size_t n) {
  if (i + 1 >= n) return 0;
  const unsigned char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const unsigned char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  auto emit = [&](size_t end) {
    pieces.emplace_back(text.data() + i, end - i);
    i = end;
  };
  while (i < n) {
    if (s[i] == '\'') {
      if (size_t k = contraction_length(s, i, n)) {
        emit(i + k);
        continue;
      }
    }
    // " ?\p{L}+", " ?\p{N}+" and " ?[^\s\p{L}\p{N}]+": an optional leading space, then a run of one class.
    const size_t j = s[i] == ' ' ? i + 1 : i;
    if (j < n) {
      const Symbol sym = symbol_at(s, j, n);
      if (sym.cls != CharClass::Space) {
        emit(run_end(s, j + sym.length, n, sym.cls));
        continue;
      }
    }
    // Whitespace at i. "\s+(?!\S)" takes the run but leaves its last symbol when a non-space follows
    // (that symbol then starts the next piece, " word" for a space); a run of one symbol falls to "\s+".
    size_t last = i;
    size_t end = i;
    while (end < n) {
      const Symbol sym = symbol_at(s, end, n);
      if (sym.cls != CharClass::Space) break;
      last = end;
      end += sym.length;
    }
    emit(end < n && last > i ? last : end);
  }
}

bool is_gpt2_cut_point(std::string_view text, size_t i) {
  if (i == 0 || i >= text.size()) return i == 0;
  const auto c = static_cast<unsigned char>(text[i]);
  const auto p = static_cast<unsigned char>(text[i - 1]);
  return (c == ' ' || c == '\n') && p < 0x80 && kAsciiClass[p] != CharClass::Space;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::string pattern, std::string what, Anchor anchor)
    : pattern_(std::move(pattern)), what_(std::move(what)), anchor_(anchor), compiled_(new Compiled) {
  const uint32_t anchoring = anchor == Anchor::whole    ? PCRE2_ANCHORED | PCRE2_ENDANCHORED
                             : anchor == Anchor::start ? PCRE2_ANCHORED
                                                       : 0;
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | anchoring;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), options, &error, &offset, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error(
        fmt::format("{} '{}': {} at offset {}", what_, pattern_, reinterpret_cast<const char*>(message), offset));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  split(text, [&](std::string_view piece) { pieces.push_back(piece); });
}

namespace {

using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;

MatchData match_data_for(const pcre2_code* code) {
  MatchData match(pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  check(match != nullptr, "out of memory for a regex match");
  return match;
}

// The backtracking memory a match may take: the interpreter's frames (a build without JIT), and JIT code's stack.
constexpr size_t kMatchMemoryBytes = size_t{64} << 20;

// JIT code's stack for the matches of the calling thread, grown as a match needs up to kMatchMemoryBytes (address
// space reserved, pages taken as touched). PCRE2's own is 32 KiB of the machine stack: a group repeated over a few
// KiB of text, `(?:ab|cd)+` on 4 KB, ran out of it where Hugging Face's tokenizers encode the text. Null (out of
// memory) leaves PCRE2 its own.
pcre2_jit_stack* thread_jit_stack(void*) {
  thread_local const std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack(
      pcre2_jit_stack_create(32 * 1024, kMatchMemoryBytes, nullptr), &pcre2_jit_stack_free);
  return stack.get();
}

// Limits of Attend's own for every match rather than the library's build defaults: ten million backtracking steps
// from one starting point (a fraction of a second; tokenizers' patterns take tens), and kMatchMemoryBytes of
// backtracking memory, JIT's stack or the interpreter's frames (whose default allows 20 GB). A pattern that would
// backtrack without end is then an error. One context for every thread: PCRE2 only reads it (the stack comes from
// the matching thread). Never freed, so that no thread still matching at exit finds it gone.
const pcre2_match_context* match_limits() {
  static pcre2_match_context* const limits = [] {
    pcre2_match_context* l = pcre2_match_context_create(nullptr);
    check(l != nullptr, "out of memory for a regex match");
    pcre2_set_match_limit(l, 10'000'000);
    pcre2_set_depth_limit(l, 10'000'000);
    pcre2_set_heap_limit(l, kMatchMemoryBytes >> 10);  // KiB
    pcre2_jit_stack_assign(l, thread_jit_stack, nullptr);
    return l;
  }();
  return limits;
}

// The error for a failed match: the pattern (`what` it is), where the search started in the text and what follows
// there (up to a character's boundary), and PCRE2's reason.
[[noreturn]] void match_failed(int rc, const std::string& what, const std::string& pattern, std::string_view text,
                               size_t at) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(rc, message, sizeof message);
  constexpr size_t kShown = 40;
  size_t shown = std::min(kShown, text.size() - at);
  while (shown > 0 && at + shown < text.size() && (static_cast<unsigned char>(text[at + shown]) & 0xC0) == 0x80)
    --shown;  // not into the middle of a character
  throw Error(fmt::format("{} '{}' failed in a search from byte {} of a {}-byte text ('{}{}'): {}", what, pattern, at,
                          text.size(), text.substr(at, shown), at + shown < text.size() ? "..." : "",
                          reinterpret_cast<const char*>(message)));
}

// Calls on_match(begin, end) for every match of `code` in `text`, from left to right; after an empty match the
// search goes on one character later, after any other at its end. A PCRE2 error names `pattern` (`what` it is).
template <typename F>
void for_each_match(const pcre2_code* code, const std::string& pattern, const std::string& what, std::string_view text,
                    F&& on_match) {
  const MatchData match = match_data_for(code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, 0, match.get(),
                               const_cast<pcre2_match_context*>(match_limits()));
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) match_failed(rc, what, pattern, text, start);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0], end = ovector[1];
    on_match(begin, end);
    if (end == begin) {  // an empty match: step one character on and look again
      if (begin >= text.size()) break;
      start = begin + static_cast<size_t>(decode_utf8(text, begin).length);
    } else {
      start = end;
    }
  }
}

}  // namespace

void RegexSplitter::split(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  check(anchor_ == Anchor::anywhere, "{} '{}' is anchored: it cannot split a text", what_, pattern_);
  size_t done = 0;  // text before this is already in pieces
  for_each_match(compiled_->code, pattern_, what_, text, [&](size_t begin, size_t end) {
    if (end == begin) return;  // empty matches cut nothing
    if (begin > done) emit(text.substr(done, begin - done));
    emit(text.substr(begin, end - begin));
    done = end;
  });
  if (done < text.size()) emit(text.substr(done));
}

void RegexSplitter::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  check(anchor_ == Anchor::anywhere, "{} '{}' is anchored: it cannot find every match", what_, pattern_);
  size_t previous_end = std::string_view::npos;
  for_each_match(compiled_->code, pattern_, what_, text, [&](size_t begin, size_t end) {
    // An empty match right where the previous match ended is not reported.
    if (begin != end || begin != previous_end) matches.emplace_back(begin, end);
    previous_end = begin == end ? std::string_view::npos : end;
  });
}

bool RegexSplitter::matches(std::string_view text, std::string_view* group1) const {
  check(anchor_ != Anchor::anywhere, "{} '{}' is not anchored: a match would be searched for", what_, pattern_);
  const MatchData match = match_data_for(compiled_->code);
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0,
                             match.get(), const_cast<pcre2_match_context*>(match_limits()));
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) match_failed(rc, what_, pattern_, text, 0);
  if (group1 != nullptr) {
    const PCRE2_SIZE* at = pcre2_get_ovector_pointer(match.get());
    const bool took_part = rc > 1 && at[2] != PCRE2_UNSET;
    *group1 = took_part ? text.substr(at[2], at[3] - at[2]) : std::string_view();
  }
  return true;
}

namespace {

constexpr std::string_view kWhiteSpaceClass = R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

std::string onig_to_pcre2(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      else if (e == 'S' && !in_class) out += "[^" + std::string(kWhiteSpaceClass) + "]";
      else out.append(pattern.substr(i, 2));
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' or '^]' right after the opening bracket is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string quote_literal(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ ").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void split_bert(std::string_view text, std::vector<std::string_view>& pieces) {
  size_t i = 0, word = std::string_view::npos;
  auto close_word = [&] {
    if (word != std::string_view::npos) pieces.push_back(text.substr(word, i - word));
    word = std::string_view::npos;
  };
  while (i < text.size()) {
    const CodePoint cp = decode_utf8(text, i);
    if (cp.value != kInvalid && is_whitespace(cp.value)) {
      close_word();
    } else if (cp.value != kInvalid && is_punctuation(cp.value)) {
      close_word();
      pieces.push_back(text.substr(i, static_cast<size_t>(cp.length)));
    } else if (word == std::string_view::npos) {
      word = i;
    }
    i += static_cast<size_t>(cp.length);
  }
  close_word();
}

}  // namespace attend::tokenize
