// The template lexer (see jinja_lexer.h): source rewrites for trim_blocks/lstrip_blocks and the generation
// markers, then one pass that cuts text and tags into tokens, as @huggingface/jinja's lexer does.
#include "tokenize/jinja_lexer.h"

#include "tokenize/jinja_value.h"

#include <attend/error.h>

#include <fmt/format.h>

namespace attend::tokenize::jinja {

Location locate(std::string_view source, uint32_t offset) {
  Location loc;
  size_t line_start = 0;
  const size_t end = std::min<size_t>(offset, source.size());
  for (size_t i = 0; i < end; ++i)
    if (source[i] == '\n') {
      ++loc.line;
      line_start = i + 1;
    }
  loc.column = static_cast<int>(code_point_count(source.substr(line_start, end - line_start))) + 1;
  return loc;
}

namespace {

// Text being rewritten, each byte with its offset in the original template.
struct Mapped {
  std::string text;
  std::vector<uint32_t> at;
  void push(char c, uint32_t pos) {
    text += c;
    at.push_back(pos);
  }
  void pop() {
    text.pop_back();
    at.pop_back();
  }
};

bool line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  const unsigned char c = static_cast<unsigned char>(s[i - 1]);
  if (c == '\n' || c == '\r') return true;
  // U+2028 and U+2029 end lines for JavaScript's multiline ^ as well (E2 80 A8 / E2 80 A9).
  return i >= 3 && s.compare(i - 3, 2, "\xe2\x80") == 0 && (c == 0xa8 || c == 0xa9);
}

// Steps 2 and 3 of the header: lstrip_blocks, then trim_blocks.
Mapped strip_blocks(const Mapped& in) {
  Mapped lstripped;
  const std::string& s = in.text;
  for (size_t i = 0; i < s.size();) {
    if (line_start(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j > i && j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) i = j;
    }
    lstripped.push(s[i], in.at[i]);
    ++i;
  }
  Mapped out;
  const std::string& t = lstripped.text;
  for (size_t i = 0; i < t.size();) {
    if (i + 2 < t.size() && (t[i] == '#' || t[i] == '%' || t[i] == '-') && t[i + 1] == '}' && t[i + 2] == '\n') {
      out.push(t[i], lstripped.at[i]);
      out.push(t[i + 1], lstripped.at[i + 1]);
      i += 3;
      continue;
    }
    out.push(t[i], lstripped.at[i]);
    ++i;
  }
  return out;
}

size_t space_at(const std::string& s, size_t i) {  // bytes of one white-space code point at i, or 0
  if (i >= s.size()) return 0;
  size_t j = i;
  return is_js_space(decode_utf8(s, j)) ? j - i : 0;
}

// Step 4: "{% generation %}" and "{% endgeneration %}" (with optional "-" and inner spaces) go, and with
// them the white space before (unless "{%-") and after (unless "-%}") the tag.
Mapped drop_generation_tags(const Mapped& in) {
  Mapped out;
  const std::string& s = in.text;
  size_t guard = 0;  // output before this belongs to an earlier match and is never stripped
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "{%") == 0) {
      size_t j = i + 2;
      const bool lstrip = j < s.size() && s[j] == '-';
      if (lstrip) ++j;
      while (size_t n = space_at(s, j)) j += n;
      if (s.compare(j, 3, "end") == 0 && s.compare(j + 3, 10, "generation") == 0) j += 3;
      if (s.compare(j, 10, "generation") == 0) {
        j += 10;
        while (size_t n = space_at(s, j)) j += n;
        const bool rstrip = j < s.size() && s[j] == '-';
        if (rstrip) ++j;
        if (s.compare(j, 2, "%}") == 0) {
          j += 2;
          if (lstrip) {
            while (out.text.size() > guard) {  // drop trailing white space, a code point at a time
              size_t k = out.text.size() - 1;
              while (k > guard && (static_cast<unsigned char>(out.text[k]) & 0xc0) == 0x80) --k;
              if (!space_at(out.text, k)) break;
              while (out.text.size() > k) out.pop();
            }
          }
          while (size_t n = space_at(s, j)) {
            if (!rstrip)
              for (size_t k = 0; k < n; ++k) out.push(s[j + k], in.at[j + k]);
            j += n;
          }
          guard = out.text.size();
          i = j;
          continue;
        }
      }
    }
    out.push(s[i], in.at[i]);
    ++i;
  }
  return out;
}

bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

struct Lexer {
  std::string_view source, origin;
  Mapped src;
  size_t i = 0;
  std::vector<Token> tokens;
  int curly_depth = 0;  // "{" inside an expression: "}}" there closes two dicts, not the expression

  uint32_t origin_at(size_t k) const { return k < src.at.size() ? src.at[k] : static_cast<uint32_t>(source.size()); }
  [[noreturn]] void fail(size_t k, const std::string& what) const {
    const Location loc = locate(source, origin_at(k));
    throw Error(fmt::format("{}:{}:{}: {}", origin, loc.line, loc.column, what));
  }
  const Token* last() const { return tokens.empty() ? nullptr : &tokens.back(); }
  void push(Tok type, std::string value, size_t at) { tokens.push_back({type, std::move(value), origin_at(at)}); }
  bool at(std::string_view s) const { return src.text.compare(i, s.size(), s) == 0; }
  void skip_space() {
    while (size_t n = space_at(src.text, i)) i += n;
  }
  // "{%-" and friends: the text token before loses its trailing white space (and goes if nothing is left).
  void strip_previous_text() {
    if (tokens.empty() || tokens.back().type != Tok::Text) return;
    std::string& v = tokens.back().value;
    v.resize(v.size() - trailing_space(v));
    if (v.empty()) tokens.pop_back();
  }

  void text() {
    const size_t start = i;
    while (i < src.text.size() && !(src.text[i] == '{' && i + 1 < src.text.size() &&
                                    (src.text[i + 1] == '%' || src.text[i + 1] == '{' || src.text[i + 1] == '#')))
      ++i;
    if (i > start) push(Tok::Text, src.text.substr(start, i - start), start);
  }

  void comment() {
    const size_t start = i;
    i += 2;
    const bool strip_before = i < src.text.size() && src.text[i] == '-';
    if (strip_before) ++i;
    const size_t end = src.text.find("#}", i);
    if (end == std::string::npos) fail(start, "the comment '{#' is not closed with '#}'");
    std::string body = src.text.substr(i, end - i);
    const bool strip_after = !body.empty() && body.back() == '-';
    if (strip_before) strip_previous_text();
    push(Tok::Comment, std::move(body), start);
    i = end + 2;
    if (strip_after) skip_space();
  }

  void string_literal() {
    const size_t start = i;
    const char quote = src.text[i++];
    std::string value;
    for (;;) {
      if (i >= src.text.size()) fail(start, fmt::format("the string starting here is not closed with {}", quote));
      const char c = src.text[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (++i >= src.text.size()) fail(start, fmt::format("the string starting here is not closed with {}", quote));
      const char e = src.text[i++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\'': case '"': case '\\': value += e; break;
        case 'x': case 'u': {
          const size_t len = e == 'x' ? 2 : 4;
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            const char h = i + k < src.text.size() ? src.text[i + k] : '\0';
            const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) fail(i - 2, fmt::format("bad escape \\{}: expected {} hexadecimal digits", e, len));
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          i += len;
          // A UTF-16 surrogate pair written as two \u escapes is one code point.
          if (cp >= 0xd800 && cp < 0xdc00 && src.text.compare(i, 2, "\\u") == 0 && i + 6 <= src.text.size()) {
            uint32_t low = 0;
            bool ok = true;
            for (size_t k = 2; k < 6 && ok; ++k) {
              const char h = src.text[i + k];
              const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
              ok = d >= 0;
              low = low * 16 + static_cast<uint32_t>(d < 0 ? 0 : d);
            }
            if (ok && low >= 0xdc00 && low < 0xe000) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
              i += 6;
            }
          }
          append_utf8(value, cp);
          break;
        }
        default:  // Python keeps an unknown escape as written ("\d" stays "\d")
          value += '\\';
          value += e;
      }
    }
    ++i;  // the closing quote
    push(Tok::String, std::move(value), start);
  }

  std::string digits() {
    const size_t start = i;
    while (i < src.text.size() && is_digit(src.text[i])) ++i;
    return src.text.substr(start, i - start);
  }
  // Digits, then ".digits" unless the number follows a dot (items.0.name).
  std::string number(bool after_dot) {
    std::string num = digits();
    if (!after_dot && i + 1 < src.text.size() && src.text[i] == '.' && is_digit(src.text[i + 1])) {
      ++i;
      num += "." + digits();
    }
    return num;
  }

  void tag_content() {
    skip_space();
    if (i >= src.text.size()) fail(i, "the template ends inside a tag");
    const size_t start = i;
    if (at("-%}")) {
      push(Tok::CloseStatement, "%}", start);
      i += 3;
      skip_space();
      return;
    }
    if (at("-}}")) {
      push(Tok::CloseExpression, "}}", start);
      i += 3;
      skip_space();
      return;
    }
    const char c = src.text[i];
    if (c == '-' || c == '+') {
      const Token* prev = last();
      const bool binary = prev && (prev->type == Tok::Name || prev->type == Tok::Number || prev->type == Tok::String ||
                                   prev->type == Tok::RParen || prev->type == Tok::RBracket);
      if (!binary) {  // a sign: joined with the number that follows, if any
        ++i;
        const std::string num = number(false);
        if (num.empty()) push(Tok::Unary, std::string(1, c), start);
        else push(Tok::Number, std::string(1, c) + num, start);
        return;
      }
    }
    static const std::pair<std::string_view, Tok> table[] = {
        {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression}, {"}}", Tok::CloseExpression},
        {"(", Tok::LParen}, {")", Tok::RParen}, {"{", Tok::LBrace}, {"}", Tok::RBrace}, {"[", Tok::LBracket},
        {"]", Tok::RBracket}, {",", Tok::Comma}, {".", Tok::Dot}, {":", Tok::Colon}, {"|", Tok::Pipe},
        {"<=", Tok::Comparison}, {">=", Tok::Comparison}, {"==", Tok::Comparison}, {"!=", Tok::Comparison},
        {"<", Tok::Comparison}, {">", Tok::Comparison}, {"+", Tok::Additive}, {"-", Tok::Additive}, {"~", Tok::Additive},
        {"**", Tok::Power}, {"*", Tok::Multiplicative}, {"//", Tok::Multiplicative}, {"/", Tok::Multiplicative},
        {"%", Tok::Multiplicative}, {"=", Tok::Equals}};
    for (const auto& [seq, type] : table) {
      if (seq == "}}" && curly_depth > 0) continue;
      if (!at(seq)) continue;
      push(type, std::string(seq), start);
      if (type == Tok::OpenExpression) curly_depth = 0;
      else if (type == Tok::LBrace) ++curly_depth;
      else if (type == Tok::RBrace) --curly_depth;
      i += seq.size();
      return;
    }
    if (c == '\'' || c == '"') return string_literal();
    if (is_digit(c)) {
      const bool after_dot = last() && last()->type == Tok::Dot;
      push(Tok::Number, number(after_dot), start);
      return;
    }
    if (is_word(c)) {
      while (i < src.text.size() && is_word(src.text[i])) ++i;
      push(Tok::Name, src.text.substr(start, i - start), start);
      return;
    }
    size_t j = i;
    decode_utf8(src.text, j);
    fail(start, fmt::format("unexpected character '{}' inside a tag", src.text.substr(i, j - i)));
  }

  void run() {
    while (i < src.text.size()) {
      const Token* prev = last();
      if (!prev || prev->type == Tok::CloseStatement || prev->type == Tok::CloseExpression || prev->type == Tok::Comment) {
        const size_t before = tokens.size();
        text();
        if (tokens.size() > before) continue;
      }
      if (at("{#")) {
        comment();
        continue;
      }
      if (at("{%-") || at("{{-")) {
        const bool statement = src.text[i + 1] == '%';
        strip_previous_text();
        push(statement ? Tok::OpenStatement : Tok::OpenExpression, statement ? "{%" : "{{", i);
        if (!statement) curly_depth = 0;
        i += 3;
        continue;
      }
      tag_content();
    }
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, std::string_view origin) {
  Mapped raw;
  raw.text.assign(source);
  raw.at.resize(source.size());
  for (size_t k = 0; k < source.size(); ++k) raw.at[k] = static_cast<uint32_t>(k);
  if (!raw.text.empty() && raw.text.back() == '\n') raw.pop();
  Lexer lexer{source, origin, drop_generation_tags(strip_blocks(raw))};
  lexer.run();
  return std::move(lexer.tokens);
}

std::string describe(const Token* t) {
  if (!t) return "the end of the template";
  switch (t->type) {
    case Tok::Text: return "template text";
    case Tok::Name: return fmt::format("'{}'", t->value);
    case Tok::String: return "a string";
    case Tok::Number: return fmt::format("the number {}", t->value);
    case Tok::Comment: return "a comment";
    default: return fmt::format("'{}'", t->value);
  }
}

}  // namespace attend::tokenize::jinja
