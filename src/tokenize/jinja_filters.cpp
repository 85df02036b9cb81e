// The filters of the template engine (`x | name(args)`), one function each, found by name in a table.
// `x | name` and `x | name()` are the same call.
#include "tokenize/jinja_builtins.h"

#include <attend/error.h>

#include <fmt/format.h>

#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

namespace attend::tokenize::jinja {

namespace {

using K = Value::Kind;
using Filter = std::function<Value(Interpreter&, const Value&, Args&)>;

const Value& need_string(const Value& v, std::string_view filter) {
  if (!v.is_string()) fail(fmt::format("the filter '{}' needs a string, got a {}", filter, type_name(v)));
  return v;
}
const Value& need_list(const Value& v, std::string_view filter) {
  if (!v.is_list()) fail(fmt::format("the filter '{}' needs a list, got a {}", filter, type_name(v)));
  return v;
}
const Value& need_dict(const Value& v, std::string_view filter) {
  if (!v.is_dict()) fail(fmt::format("the filter '{}' needs a dict, got a {}", filter, type_name(v)));
  return v;
}
bool flag(const Args& a, size_t i, std::string_view name, bool otherwise) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return otherwise;
  if (v->kind != K::Bool) fail(fmt::format("'{}' must be true or false, got a {}", name, type_name(*v)));
  return v->boolean;
}
std::string text_of(const Value& v) { return v.is_string() ? v.s() : to_output(v); }

Value tojson(Interpreter& in, const Value& v, Args& a) {
  JsonStyle style;
  style.ensure_ascii = flag(a, 0, "ensure_ascii", false);
  if (const Value* indent = a.get(1, "indent"); indent && !indent->is_none()) {
    if (indent->kind != K::Int || indent->integer < 0 || indent->integer > 256) fail("tojson's indent must be an integer from 0 to 256");
    style.indent = static_cast<int>(indent->integer);
  }
  if (const Value* sep = a.get(2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() || !sep->items()[1].is_string())
      fail("tojson's separators must be two strings (item separator, key separator)");
    style.item_separator = sep->items()[0].s();
    style.key_separator = sep->items()[1].s();
  }
  style.sort_keys = flag(a, 3, "sort_keys", false);
  try {
    return in.make_string(to_json(v, style, in.origin()));
  } catch (const Error& e) {
    fail(fmt::format("tojson: {}", e.what()));
  }
}

Value default_(Interpreter&, const Value& v, Args& a) {
  const Value* d = a.get(0, "default_value");
  const bool boolean = flag(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return d ? *d : Value::from_string("");
  return v;
}

Value length(Interpreter&, const Value& v, Args&) {
  if (v.is_string()) return Value::from_int(static_cast<int64_t>(code_point_count(v.s())));
  if (v.is_list()) return Value::from_int(static_cast<int64_t>(v.items().size()));
  if (v.is_dict() || v.kind == K::Namespace) return Value::from_int(static_cast<int64_t>(v.dict->size()));
  if (v.is_undefined()) return Value::from_int(0);
  fail(fmt::format("a {} has no length", type_name(v)));
}

Value string(Interpreter& in, const Value& v, Args&) {
  if (v.is_none()) return Value::from_string("None");
  return v.is_string() ? v : in.make_string(to_output(v));
}

std::vector<Value> as_items(const Value& v, std::string_view filter) {
  if (v.is_list()) return v.items();
  std::vector<Value> out;
  if (v.is_string())
    for (std::string_view c : code_points(v.s())) out.push_back(Value::from_string(std::string(c)));
  else if (v.is_dict())
    for (const auto& [k, x] : v.dict->entries()) out.push_back(Value::from_string(k));
  else if (!v.is_undefined())
    fail(fmt::format("the filter '{}' needs a list, string or dict, got a {}", filter, type_name(v)));
  return out;
}

Value first_or_last(const Value& v, bool first, std::string_view filter) {
  const std::vector<Value> items = as_items(v, filter);
  if (items.empty()) return Value::undefined();
  return first ? items.front() : items.back();
}

Value reverse(Interpreter& in, const Value& v, Args&) {
  if (v.is_string()) {
    auto chars = code_points(v.s());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return in.make_string(std::move(out));
  }
  std::vector<Value> items = need_list(v, "reverse").items();
  std::reverse(items.begin(), items.end());
  return Value::from_list(std::move(items));
}

// The attribute argument of sort, map, sum, min, max: a dotted path, or an integer index.
std::string attribute_name(const Value* attr) {
  if (!attr || attr->is_none()) return "";
  if (attr->kind == K::Int) return std::to_string(attr->integer);
  if (!attr->is_string()) fail(fmt::format("attribute must be a string or an integer, got a {}", type_name(*attr)));
  return attr->s();
}
Value by_attribute(const Value& item, const std::string& attr) { return attr.empty() ? item : attribute_path(item, attr); }

Value sort(Interpreter& in, const Value& v, Args& a) {
  std::vector<Value> items = need_list(v, "sort").items();
  const bool reverse = flag(a, 0, "reverse", false), case_sensitive = flag(a, 1, "case_sensitive", false);
  const std::string attr = attribute_name(a.get(2, "attribute"));
  in.charge(static_cast<int64_t>(items.size()) * 8);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(by_attribute(x, attr), by_attribute(y, attr), case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::from_list(std::move(items));
}

Value unique(Interpreter& in, const Value& v, Args&) {
  std::vector<Value> out;
  for (const Value& x : need_list(v, "unique").items()) {
    in.charge(static_cast<int64_t>(out.size()) + 1);
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
  }
  return Value::from_list(std::move(out));
}

Value join(Interpreter& in, const Value& v, Args& a) {
  const Value* sep_v = a.get(0, "d");
  if (sep_v && !sep_v->is_string()) fail("join's separator must be a string");
  const std::string sep = sep_v ? sep_v->s() : "";
  const std::string attr = attribute_name(a.get(1, "attribute"));
  std::string out;
  const std::vector<Value> items = as_items(v, "join");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += concat_text(by_attribute(items[i], attr));
    in.check_size(out.size());
  }
  return in.make_string(std::move(out));
}

Value indent(Interpreter& in, const Value& v, Args& a) {
  const std::string& s = need_string(v, "indent").s();
  std::string pad = "    ";
  if (const Value* w = a.get(0, "width")) {
    if (w->is_string()) pad = w->s();
    else if (w->kind == K::Int && w->integer >= 0 && w->integer <= 4096) pad.assign(static_cast<size_t>(w->integer), ' ');
    else fail("indent's width must be an integer from 0 to 4096 or a string");
  }
  const bool first = flag(a, 1, "first", false), blank = flag(a, 2, "blank", false);
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t end = s.find('\n', start);
    const std::string_view text = std::string_view(s).substr(start, end == std::string::npos ? std::string::npos : end - start);
    if ((line > 0 || first) && (blank || !text.empty())) out += pad;
    out += text;
    in.check_size(out.size());
    if (end == std::string::npos) break;
    out += '\n';
    start = end + 1;
  }
  return in.make_string(std::move(out));
}

// Python's int(): digits with an optional sign and surrounding white space, else int(float(s)), else the default.
Value to_int(Interpreter&, const Value& v, Args& a) {
  const Value* d = a.get(0, "default");
  const Value fallback = d ? *d : Value::from_int(0);
  switch (v.kind) {
    case K::Int: return v;
    case K::Bool: return Value::from_int(v.boolean);
    case K::Float: return std::isfinite(v.number) && std::fabs(v.number) < 9.2e18 ? Value::from_int(static_cast<int64_t>(v.number)) : fallback;
    case K::String: {
      const std::string s = strip(v.s(), nullptr, true, true);
      errno = 0;
      char* end = nullptr;
      const long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0 && s.find_first_of(" \t\n") == std::string::npos) return Value::from_int(x);
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value::from_int(static_cast<int64_t>(f));
      return fallback;
    }
    default: return fallback;
  }
}

Value to_float(Interpreter&, const Value& v, Args& a) {
  const Value* d = a.get(0, "default");
  const Value fallback = d ? *d : Value::from_float(0);
  switch (v.kind) {
    case K::Float: return v;
    case K::Int:
    case K::Bool: return Value::from_float(v.as_double());
    case K::String: {
      const std::string s = strip(v.s(), nullptr, true, true);
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      return !s.empty() && *end == '\0' && s.find_first_of("xX") == std::string::npos ? Value::from_float(f) : fallback;
    }
    default: return fallback;
  }
}

Value round_(Interpreter&, const Value& v, Args& a) {
  if (!v.is_number()) fail(fmt::format("the filter 'round' needs a number, got a {}", type_name(v)));
  const Value* p = a.get(0, "precision");
  const int64_t precision = p && p->kind == K::Int ? std::clamp<int64_t>(p->integer, -20, 20) : 0;
  const Value* m = a.get(1, "method");
  const std::string method = m && m->is_string() ? m->s() : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  double r;
  if (method == "common") r = std::nearbyint(x);  // Python's round: halves to even
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else fail("round's method must be 'common', 'ceil' or 'floor'");
  return Value::from_float(r / scale);
}

Value dictsort(Interpreter& in, const Value& v, Args& a) {
  need_dict(v, "dictsort");
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const Value* by_v = a.get(1, "by");
  const std::string by = by_v && by_v->is_string() ? by_v->s() : "key";
  if (by != "key" && by != "value") fail("dictsort's 'by' must be 'key' or 'value'");
  const bool reverse = flag(a, 2, "reverse", false);
  std::vector<Value> items;
  for (const auto& [k, x] : v.dict->entries()) items.push_back(Value::from_list({Value::from_string(k), x}));
  in.charge(static_cast<int64_t>(items.size()) * 8);
  const size_t at = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(x.items()[at], y.items()[at], case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::from_list(std::move(items));
}

// Args without the first `n` positional ones (the test or filter name of select, map, ...).
Args rest(const Args& a, size_t n) {
  Args out;
  for (size_t i = n; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.keyword = a.keyword;
  return out;
}

Value map(Interpreter& in, const Value& v, Args& a) {
  const std::vector<Value> items = as_items(v, "map");
  std::vector<Value> out;
  if (const Value* attr = a.get(99, "attribute")) {
    const std::string name = attribute_name(attr);
    const Value* d = a.get(99, "default");
    for (const Value& x : items) {
      const Value y = attribute_path(x, name);
      out.push_back(y.is_undefined() && d ? *d : y);
    }
  } else {
    if (a.positional.empty() || !a.positional[0].is_string()) fail("map needs a filter name or attribute=...");
    Args filter_args = rest(a, 1);
    for (const Value& x : items) out.push_back(apply_filter(in, a.positional[0].s(), x, filter_args));
  }
  return Value::from_list(std::move(out));
}

// select / reject (by a test of the item) and selectattr / rejectattr (by a test of an attribute).
Value select(Interpreter& in, const Value& v, Args& a, bool keep, bool by_attribute) {
  const std::vector<Value> items = as_items(v, by_attribute ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject"));
  std::string attr;
  size_t next = 0;
  if (by_attribute) {
    if (a.positional.empty()) fail("selectattr and rejectattr need an attribute name");
    attr = attribute_name(&a.positional[0]);
    next = 1;
  }
  const Value* test = next < a.positional.size() ? &a.positional[next] : nullptr;
  if (test && !test->is_string()) fail("the test of select, reject, selectattr or rejectattr is named by a string");
  Args test_args = rest(a, next + 1);
  std::vector<Value> out;
  for (const Value& x : items) {
    in.charge(1);
    const Value subject = by_attribute ? attribute_path(x, attr) : x;
    const bool pass = test ? apply_test(in, test->s(), subject, test_args) : truthy(subject);
    if (pass == keep) out.push_back(x);
  }
  return Value::from_list(std::move(out));
}

Value sum(Interpreter& in, const Value& v, Args& a) {
  const std::string attr = attribute_name(a.get(0, "attribute"));
  const Value* start = a.get(1, "start");
  Value total = start ? *start : Value::from_int(0);
  for (const Value& x : need_list(v, "sum").items()) {
    const Value y = by_attribute(x, attr);
    if (!total.is_number() || !y.is_number()) fail(fmt::format("sum: cannot add a {} to a {}", type_name(y), type_name(total)));
    if (total.kind == K::Int && y.kind == K::Int) {
      int64_t r;
      if (__builtin_add_overflow(total.integer, y.integer, &r)) fail("integer overflow in sum");
      total = Value::from_int(r);
    } else {
      total = Value::from_float(total.as_double() + y.as_double());
    }
  }
  (void)in;
  return total;
}

Value min_max(const Value& v, Args& a, bool max) {
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const std::string attr = attribute_name(a.get(1, "attribute"));
  const std::vector<Value> items = as_items(v, max ? "max" : "min");
  if (items.empty()) return Value::undefined();
  const Value* best = &items[0];
  for (const Value& x : items) {
    const int c = compare_values(by_attribute(x, attr), by_attribute(*best, attr), case_sensitive);
    if (max ? c > 0 : c < 0) best = &x;
  }
  return *best;
}

Value wordcount(Interpreter&, const Value& v, Args&) {
  int64_t words = 0;
  bool in_word = false;
  for (std::string_view c : code_points(need_string(v, "wordcount").s())) {
    size_t i = 0;
    const UChar32 cp = static_cast<UChar32>(decode_utf8(c, i));
    const bool w = u_isalnum(cp) || cp == '_';
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value::from_int(words);
}

Value escape(Interpreter& in, const Value& v, Args&) {
  std::string out;
  for (char c : text_of(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return in.make_string(std::move(out));
}

Value batch(Interpreter&, const Value& v, Args& a) {
  const Value* n_v = a.get(0, "linecount");
  if (!n_v || n_v->kind != K::Int || n_v->integer <= 0) fail("batch needs a positive integer");
  const size_t n = static_cast<size_t>(n_v->integer);
  const Value* fill = a.get(1, "fill_with");
  std::vector<Value> out, row;
  for (const Value& x : need_list(v, "batch").items()) {
    row.push_back(x);
    if (row.size() == n) out.push_back(Value::from_list(std::exchange(row, {})));
  }
  if (!row.empty()) {
    if (fill && !fill->is_none())
      while (row.size() < n) row.push_back(*fill);
    out.push_back(Value::from_list(std::move(row)));
  }
  return Value::from_list(std::move(out));
}

Value string_filter(Interpreter& in, const Value& v, std::string (*f)(std::string_view), std::string_view name) {
  return in.make_string(f(need_string(v, name).s()));
}

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"safe", [](Interpreter&, const Value& v, Args&) { return v; }},
      {"tojson", tojson},
      {"default", default_},
      {"d", default_},
      {"length", length},
      {"count", length},
      {"string", string},
      {"list", [](Interpreter&, const Value& v, Args&) { return Value::from_list(as_items(v, "list")); }},
      {"first", [](Interpreter&, const Value& v, Args&) { return first_or_last(v, true, "first"); }},
      {"last", [](Interpreter&, const Value& v, Args&) { return first_or_last(v, false, "last"); }},
      {"reverse", reverse},
      {"sort", sort},
      {"unique", unique},
      {"join", join},
      {"upper", [](Interpreter& in, const Value& v, Args&) { return string_filter(in, v, upper, "upper"); }},
      {"lower", [](Interpreter& in, const Value& v, Args&) { return string_filter(in, v, lower, "lower"); }},
      {"title", [](Interpreter& in, const Value& v, Args&) { return string_filter(in, v, title, "title"); }},
      {"capitalize", [](Interpreter& in, const Value& v, Args&) { return string_filter(in, v, capitalize, "capitalize"); }},
      {"trim", [](Interpreter& in, const Value& v, Args& a) { return in.make_string(strip(need_string(v, "trim").s(), a.get(0, "chars"), true, true)); }},
      {"indent", indent},
      {"replace", [](Interpreter& in, const Value& v, Args& a) { return replace(in, need_string(v, "replace").s(), a); }},
      {"int", to_int},
      {"float", to_float},
      {"abs", [](Interpreter&, const Value& v, Args&) {
         if (v.kind == K::Int && v.integer != INT64_MIN) return Value::from_int(std::abs(v.integer));
         if (v.kind == K::Float) return Value::from_float(std::fabs(v.number));
         fail(fmt::format("the filter 'abs' needs a number, got a {}", type_name(v)));
       }},
      {"round", round_},
      {"items", [](Interpreter& in, const Value& v, Args& a) {
         if (v.is_undefined()) return Value::from_list({});
         need_dict(v, "items");
         return builtin_member(in, v, "items").function->call(in, a, nullptr);
       }},
      {"keys", [](Interpreter& in, const Value& v, Args& a) { return builtin_member(in, need_dict(v, "keys"), "keys").function->call(in, a, nullptr); }},
      {"values", [](Interpreter& in, const Value& v, Args& a) { return builtin_member(in, need_dict(v, "values"), "values").function->call(in, a, nullptr); }},
      {"dictsort", dictsort},
      {"map", map},
      {"select", [](Interpreter& in, const Value& v, Args& a) { return select(in, v, a, true, false); }},
      {"reject", [](Interpreter& in, const Value& v, Args& a) { return select(in, v, a, false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v, Args& a) { return select(in, v, a, true, true); }},
      {"rejectattr", [](Interpreter& in, const Value& v, Args& a) { return select(in, v, a, false, true); }},
      {"sum", sum},
      {"min", [](Interpreter&, const Value& v, Args& a) { return min_max(v, a, false); }},
      {"max", [](Interpreter&, const Value& v, Args& a) { return min_max(v, a, true); }},
      {"wordcount", wordcount},
      {"e", escape},
      {"escape", escape},
      {"forceescape", escape},
      {"batch", batch},
      {"attr", [](Interpreter&, const Value& v, Args& a) {
         const Value* name = a.get(0, "name");
         if (!name || !name->is_string()) fail("attr needs a name");
         return attribute_path(v, name->s());
       }},
  };
  return table;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, Args& args) {
  const auto& table = filters();
  auto it = table.find(name);
  if (it == table.end()) fail(fmt::format("unknown filter '{}'", name));
  return it->second(in, operand, args);
}

}  // namespace attend::tokenize::jinja
