// Tests, methods, globals and text helpers of the template engine (see jinja_builtins.h).
#include "tokenize/jinja_builtins.h"

#include "tokenize/unicode.h"

#include <fmt/format.h>

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <optional>

namespace attend::tokenize::jinja {

// ---- text ---------------------------------------------------------------------------------------

namespace {
// An item of a list written by concat_text: JavaScript's Array.prototype.toString calls each item's
// toString, which for @huggingface/jinja's values is what {{ }} writes, with none as "null".
std::string item_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "null";
    default: return to_output(v);
  }
}
}  // namespace

std::string concat_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return "";
    case Value::Kind::Float: return js_number(v.number);
    case Value::Kind::List: {  // the items joined by "," without brackets, as JavaScript writes an array
      std::string out;
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out += ',';
        out += item_text(v.items()[i]);
      }
      return out;
    }
    default: return to_output(v);
  }
}

namespace {
// ASCII text cases without ICU (its mapping, and Python's, of these characters).
std::optional<std::string> ascii_case(std::string_view s, char from, char to) {
  if (!std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return std::nullopt;
  std::string out(s);
  for (char& c : out)
    if (c >= from && c <= to) c = static_cast<char>(c ^ 0x20);
  return out;
}
}  // namespace

std::string lower(std::string_view s) {
  if (auto ascii = ascii_case(s, 'A', 'Z')) return std::move(*ascii);
  return to_lower(s);
}

std::string upper(std::string_view s) {
  if (auto ascii = ascii_case(s, 'a', 'z')) return std::move(*ascii);
  std::u16string src;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = decode_utf8(s, i);
    if (cp > 0x10ffff) cp = 0xfffd;
    if (cp >= 0x10000) {
      src += static_cast<char16_t>(0xd800 + ((cp - 0x10000) >> 10));
      src += static_cast<char16_t>(0xdc00 + ((cp - 0x10000) & 0x3ff));
    } else {
      src += static_cast<char16_t>(cp);
    }
  }
  std::u16string out(src.size() + 16, u'\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n = u_strToUpper(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                                   reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()), "", &status);
    if (status == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(static_cast<size_t>(n), u'\0');
      continue;
    }
    if (U_FAILURE(status)) fail(fmt::format("upper-casing failed: {}", u_errorName(status)));
    out.resize(static_cast<size_t>(n));
    break;
  }
  std::string utf8;
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t cp = out[i];
    if (cp >= 0xd800 && cp < 0xdc00 && i + 1 < out.size() && out[i + 1] >= 0xdc00 && out[i + 1] < 0xe000)
      cp = 0x10000 + ((cp - 0xd800) << 10) + (out[++i] - 0xdc00u);
    else if (cp >= 0xd800 && cp < 0xe000)
      cp = 0xfffd;  // a lone surrogate
    append_utf8(utf8, static_cast<char32_t>(cp));
  }
  return utf8;
}

namespace {
bool is_letter(std::string_view c) {
  if (c.size() == 1 && static_cast<unsigned char>(c[0]) < 0x80)
    return (c[0] >= 'a' && c[0] <= 'z') || (c[0] >= 'A' && c[0] <= 'Z');
  size_t i = 0;
  return u_isalpha(static_cast<UChar32>(decode_utf8(c, i)));
}
}  // namespace

// Python's str.title(): a letter after a non-letter is upper-cased, every other letter lower-cased.
std::string title(std::string_view s) {
  std::string out;
  bool previous_letter = false;
  for (std::string_view c : code_points(s)) {
    const bool letter = is_letter(c);
    out += letter ? (previous_letter ? lower(c) : upper(c)) : std::string(c);
    previous_letter = letter;
  }
  return out;
}

std::string capitalize(std::string_view s) {
  const auto chars = code_points(s);
  if (chars.empty()) return "";
  return upper(chars[0]) + lower(s.substr(chars[0].size()));
}

std::string strip(std::string_view s, const Value* chars, bool left, bool right) {
  if (!chars || chars->is_none() || chars->is_undefined()) {
    if (left) s.remove_prefix(leading_space(s));
    if (right) s.remove_suffix(trailing_space(s));
    return std::string(s);
  }
  if (!chars->is_string()) fail(fmt::format("strip's argument must be a string, not a {}", type_name(*chars)));
  const auto set = code_points(chars->s());
  const auto in_set = [&](std::string_view c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  auto cps = code_points(s);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && in_set(cps[b])) ++b;
  if (right)
    while (e > b && in_set(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

// ---- comparing and attributes -------------------------------------------------------------------

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  const auto numeric = [](const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Float || v.kind == Value::Kind::Bool; };
  if ((a.is_none() && b.is_none()) || (a.is_undefined() && b.is_undefined())) return 0;
  if (numeric(a) && numeric(b)) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = case_sensitive ? a.s().compare(b.s()) : lower(a.s()).compare(lower(b.s()));
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  fail(fmt::format("cannot compare a {} with a {}", type_name(a), type_name(b)));
}

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_dict() || v.kind == Value::Kind::Namespace) {
      const Value* x = v.dict->find(part);
      v = x ? *x : Value::undefined();
    } else if (v.is_list()) {
      char* end = nullptr;
      const long i = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || *end || i < 0 || static_cast<size_t>(i) >= v.items().size()) return Value::undefined();
      v = v.items()[static_cast<size_t>(i)];
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// ---- tests --------------------------------------------------------------------------------------

namespace {

const Value& test_argument(const Args& args, const std::string& name) {
  if (args.positional.empty()) fail(fmt::format("the test '{}' needs an argument", name));
  return args.positional[0];
}

}  // namespace

bool apply_test(Interpreter& in, const std::string& name, const Value& v, Args& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "true") return v.kind == K::Bool && v.boolean;
  if (name == "false") return v.kind == K::Bool && !v.boolean;
  if (name == "string") return v.is_string();
  if (name == "number") return v.kind == K::Int || v.kind == K::Float;
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "callable") return v.kind == K::Function;
  if (name == "lower") return v.is_string() && lower(v.s()) == v.s();
  if (name == "upper") return v.is_string() && upper(v.s()) == v.s();
  if (name == "odd" || name == "even") {
    if (v.kind != K::Int) fail(fmt::format("the test '{}' needs an integer, got a {}", name, type_name(v)));
    return (v.integer % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& d = test_argument(args, name);
    if (v.kind != K::Int || d.kind != K::Int) fail("the test 'divisibleby' needs integers");
    if (d.integer == 0) fail("divisibleby(0)");
    return v.integer % d.integer == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, test_argument(args, name));
  if (name == "ne" || name == "!=") return !equal(v, test_argument(args, name));
  if (name == "sameas") {
    const Value& o = test_argument(args, name);
    if (v.kind != o.kind) return false;
    if (v.is_list()) return v.list == o.list;
    if (v.is_dict() || v.kind == K::Namespace) return v.dict == o.dict;
    return equal(v, o);
  }
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == "<=" || name == ">" || name == ">=") {
    const int c = compare_values(v, test_argument(args, name), true);
    if (name == "lt" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == ">") return c > 0;
    return c >= 0;
  }
  if (name == "in") {
    const Value& seq = test_argument(args, name);
    if (seq.is_list()) return std::any_of(seq.items().begin(), seq.items().end(), [&](const Value& x) { return equal(v, x); });
    if (seq.is_string() && v.is_string()) return seq.s().find(v.s()) != std::string::npos;
    if (seq.is_dict() && v.is_string()) return seq.dict->find(v.s()) != nullptr;
    fail(fmt::format("the test 'in' needs a list, string or dict, got a {}", type_name(seq)));
  }
  (void)in;
  fail(fmt::format("unknown test '{}'", name));
}

// ---- methods ------------------------------------------------------------------------------------

namespace {

// Python's str.split(sep=None, maxsplit=-1).
Value split(Interpreter& in, const std::string& s, const Args& args) {
  const Value* sep = args.get(0, "sep");
  const Value* max_v = args.get(1, "maxsplit");
  if (max_v && max_v->kind != Value::Kind::Int) fail("split's maxsplit must be an integer");
  const int64_t maxsplit = max_v ? max_v->integer : -1;
  std::vector<Value> parts;
  if (!sep || sep->is_none()) {  // runs of white space separate; none at the ends
    std::string_view rest(s);
    rest.remove_prefix(leading_space(rest));
    while (!rest.empty()) {
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(Value::from_string(std::string(rest)));
        break;
      }
      size_t end = 0;
      while (end < rest.size()) {
        size_t next = end;
        if (is_js_space(decode_utf8(rest, next))) break;
        end = next;
      }
      parts.push_back(Value::from_string(std::string(rest.substr(0, end))));
      rest.remove_prefix(end);
      rest.remove_prefix(leading_space(rest));
    }
  } else {
    if (!sep->is_string()) fail(fmt::format("split's separator must be a string or none, not a {}", type_name(*sep)));
    if (sep->s().empty()) fail("split: empty separator");
    size_t start = 0;
    for (;;) {
      const size_t at = s.find(sep->s(), start);
      if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
        parts.push_back(Value::from_string(s.substr(start)));
        break;
      }
      parts.push_back(Value::from_string(s.substr(start, at - start)));
      start = at + sep->s().size();
    }
  }
  in.charge(static_cast<int64_t>(parts.size()));
  return Value::from_list(std::move(parts));
}

bool affix(const std::string& s, const Value& pattern, bool prefix) {
  const auto match = [&](const Value& p) {
    if (!p.is_string()) fail(prefix ? "startswith() needs a string or a tuple of strings" : "endswith() needs a string or a tuple of strings");
    const std::string& x = p.s();
    return x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (pattern.is_list()) return std::any_of(pattern.items().begin(), pattern.items().end(), match);
  return match(pattern);
}

Value method(std::string name, NativeFunction f) { return Value::from_function(std::move(name), std::move(f)); }

}  // namespace

// Python's str.replace(old, new, count=-1).
Value replace(Interpreter& in, const std::string& s, const Args& args) {
  const Value* old_v = args.get(0, "old");
  const Value* new_v = args.get(1, "new");
  const Value* count_v = args.get(2, "count");
  if (!old_v || !new_v || !old_v->is_string() || !new_v->is_string()) fail("replace() needs two strings");
  if (count_v && !count_v->is_none() && count_v->kind != Value::Kind::Int) fail("replace()'s count must be an integer");
  int64_t count = count_v && count_v->kind == Value::Kind::Int && count_v->integer >= 0 ? count_v->integer : -1;
  const std::string &from = old_v->s(), &to = new_v->s();
  std::string out;
  if (from.empty()) {  // inserted before every character and at the end
    for (std::string_view c : code_points(s)) {
      if (count != 0) {
        out += to;
        if (count > 0) --count;
      }
      out += c;
      in.check_size(out.size());
    }
    if (count != 0) out += to;
    return in.make_string(std::move(out));
  }
  size_t start = 0;
  for (;;) {
    const size_t at = count == 0 ? std::string::npos : s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    in.check_size(out.size());
    start = at + from.size();
    if (count > 0) --count;
  }
  out.append(s, start);
  return in.make_string(std::move(out));
}

namespace {

Value string_member(Interpreter& in, const Value& object, const std::string& key) {
  const std::string s = object.s();
  if (key == "length") return Value::from_int(static_cast<int64_t>(code_point_count(s)));
  const auto unary = [&](std::string (*f)(std::string_view)) {
    return method(key, [s, f](Interpreter& in, Args&, const ScopePtr&) { return in.make_string(f(s)); });
  };
  if (key == "upper") return unary(upper);
  if (key == "lower") return unary(lower);
  if (key == "title") return unary(title);
  if (key == "capitalize") return unary(capitalize);
  if (key == "strip" || key == "lstrip" || key == "rstrip") {
    const bool left = key != "rstrip", right = key != "lstrip";
    return method(key, [s, left, right](Interpreter& in, Args& a, const ScopePtr&) { return in.make_string(strip(s, a.get(0, "chars"), left, right)); });
  }
  if (key == "startswith" || key == "endswith") {
    const bool prefix = key == "startswith";
    return method(key, [s, prefix](Interpreter&, Args& a, const ScopePtr&) {
      if (a.positional.empty()) fail(prefix ? "startswith() needs an argument" : "endswith() needs an argument");
      return Value::from_bool(affix(s, a.positional[0], prefix));
    });
  }
  if (key == "split") return method(key, [s](Interpreter& in, Args& a, const ScopePtr&) { return split(in, s, a); });
  if (key == "replace") return method(key, [s](Interpreter& in, Args& a, const ScopePtr&) { return replace(in, s, a); });
  if (key == "find" || key == "rfind" || key == "count") {
    return method(key, [s, key](Interpreter&, Args& a, const ScopePtr&) {
      if (a.positional.empty() || !a.positional[0].is_string()) fail(fmt::format("{}() needs a string", key));
      const std::string& x = a.positional[0].s();
      if (key == "count") {
        if (x.empty()) return Value::from_int(static_cast<int64_t>(code_point_count(s)) + 1);
        int64_t n = 0;
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
        return Value::from_int(n);
      }
      const size_t at = key == "find" ? s.find(x) : s.rfind(x);
      return Value::from_int(at == std::string::npos ? -1 : static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, at))));
    });
  }
  if (key == "join") {
    return method(key, [s](Interpreter& in, Args& a, const ScopePtr&) {
      if (a.positional.empty() || !a.positional[0].is_list()) fail("join() needs a list");
      std::string out;
      for (size_t i = 0; i < a.positional[0].items().size(); ++i) {
        if (i > 0) out += s;
        out += concat_text(a.positional[0].items()[i]);
        in.check_size(out.size());
      }
      return in.make_string(std::move(out));
    });
  }
  (void)in;
  return Value::undefined();
}

Value dict_items(const Value& object) {
  std::vector<Value> items;
  for (const auto& [k, v] : object.dict->entries()) items.push_back(Value::from_list({Value::from_string(k), v}));
  return Value::from_list(std::move(items));
}

}  // namespace

Value builtin_member(Interpreter& in, const Value& object, const std::string& key) {
  if (object.is_string()) return string_member(in, object, key);
  if (object.is_list()) return key == "length" ? Value::from_int(static_cast<int64_t>(object.items().size())) : Value::undefined();
  if (!object.is_dict()) return Value::undefined();
  if (key == "get") {
    return method(key, [object](Interpreter&, Args& a, const ScopePtr&) {
      if (a.positional.empty() || !a.positional[0].is_string()) fail("get() needs a string key");
      const Value* v = object.dict->find(a.positional[0].s());
      return v ? *v : a.positional.size() > 1 ? a.positional[1] : Value::none();
    });
  }
  if (key == "items") return method(key, [object](Interpreter&, Args&, const ScopePtr&) { return dict_items(object); });
  if (key == "keys" || key == "values") {
    const bool keys = key == "keys";
    return method(key, [object, keys](Interpreter&, Args&, const ScopePtr&) {
      std::vector<Value> out;
      for (const auto& [k, v] : object.dict->entries()) out.push_back(keys ? Value::from_string(k) : v);
      return Value::from_list(std::move(out));
    });
  }
  if (key == "dictsort") {
    return method(key, [object](Interpreter& in, Args& a, const ScopePtr&) {
      return apply_filter(in, "dictsort", object, a);
    });
  }
  return Value::undefined();
}

// ---- globals ------------------------------------------------------------------------------------

namespace {

// Python's strftime for the directives chat templates use (Llama 3.1's "%d %b %Y"); others are kept as
// written, as @huggingface/jinja keeps them.
std::string strftime_now(std::time_t now, const std::string& format) {
  static const char* months[] = {"January", "February", "March", "April", "May", "June", "July", "August", "September",
                                 "October", "November", "December"};
  static const char* days[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      out += format[i];
      continue;
    }
    const char d = format[++i];
    switch (d) {
      case 'Y': out += std::to_string(tm.tm_year + 1900); break;
      case 'y': out += fmt::format("{:02}", tm.tm_year % 100); break;
      case 'm': out += fmt::format("{:02}", tm.tm_mon + 1); break;
      case 'd': out += fmt::format("{:02}", tm.tm_mday); break;
      case 'H': out += fmt::format("{:02}", tm.tm_hour); break;
      case 'M': out += fmt::format("{:02}", tm.tm_min); break;
      case 'S': out += fmt::format("{:02}", tm.tm_sec); break;
      case 'b': out += std::string(months[tm.tm_mon]).substr(0, 3); break;
      case 'B': out += months[tm.tm_mon]; break;
      case 'a': out += std::string(days[tm.tm_wday]).substr(0, 3); break;
      case 'A': out += days[tm.tm_wday]; break;
      case '%': out += '%'; break;
      default: out += '%'; out += d;
    }
  }
  return out;
}

// namespace(mapping or [key, value] pairs, **kwargs).
Value make_namespace(Args& a) {
  if (a.positional.size() > 1) fail(fmt::format("namespace() takes at most one positional argument, got {}", a.positional.size()));
  Dict d;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict->entries()) d.set(k, v);
    } else if (src.is_list()) {
      for (const Value& pair : src.items()) {
        if (!pair.is_list() || pair.items().size() != 2 || !pair.items()[0].is_string())
          fail("namespace() takes a dict or a list of [key, value] pairs with string keys");
        d.set(pair.items()[0].s(), pair.items()[1]);
      }
    } else {
      fail(fmt::format("namespace() takes a dict or a list of pairs, not a {}", type_name(src)));
    }
  }
  for (auto& [k, v] : a.keyword) d.set(k, v);
  return Value::namespace_of(std::move(d));
}

Value range(Interpreter& in, Args& a) {
  for (const Value& v : a.positional)
    if (v.kind != Value::Kind::Int) fail(fmt::format("range() takes integers, not a {}", type_name(v)));
  if (a.positional.empty() || a.positional.size() > 3) fail("range() takes 1 to 3 integers");
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) stop = a.positional[0].integer;
  else {
    start = a.positional[0].integer;
    stop = a.positional[1].integer;
    if (a.positional.size() == 3) step = a.positional[2].integer;
  }
  if (step == 0) fail("range() step must not be zero");
  const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
  in.check_size(static_cast<size_t>(std::min(count, 1e18)));
  in.charge(static_cast<int64_t>(count));
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(Value::from_int(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::from_list(std::move(out));
}

}  // namespace

void install_globals(Scope& g) {
  g.set("true", Value::from_bool(true));
  g.set("false", Value::from_bool(false));
  g.set("none", Value::none());
  g.set("True", Value::from_bool(true));
  g.set("False", Value::from_bool(false));
  g.set("None", Value::none());
  g.set("namespace", method("namespace", [](Interpreter& in, Args& a, const ScopePtr&) {
          Value ns = make_namespace(a);
          in.track(ns.dict);
          return ns;
        }));
  g.set("range", method("range", [](Interpreter& in, Args& a, const ScopePtr&) { return range(in, a); }));
  g.set("raise_exception", method("raise_exception", [](Interpreter&, Args& a, const ScopePtr&) -> Value {
          fail(fmt::format("the template raised an error: {}", a.positional.empty() ? "" : concat_text(a.positional[0])));
        }));
  g.set("strftime_now", method("strftime_now", [](Interpreter& in, Args& a, const ScopePtr&) {
          if (a.positional.empty() || !a.positional[0].is_string()) fail("strftime_now() needs a format string");
          return in.make_string(strftime_now(in.now(), a.positional[0].s()));
        }));
}

}  // namespace attend::tokenize::jinja
