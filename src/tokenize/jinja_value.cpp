// Values of the template engine: construction, truthiness, equality, printing and JSON (see jinja_value.h).
#include "tokenize/jinja_value.h"

#include <attend/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace attend::tokenize::jinja {

void fail(std::string message) { throw Failure{std::move(message)}; }

namespace {
uint32_t depth_of(const Value& v) { return v.kind == Value::Kind::Namespace ? 1 : v.depth; }
void check_depth(uint32_t depth) {
  if (depth > kMaxValueDepth) fail(fmt::format("lists and dicts nested deeper than the limit of {}", kMaxValueDepth));
}
}  // namespace

size_t Dict::position(std::string_view key) const {
  if (entries_.size() < kIndexFrom) {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].first == key) return i;
    return entries_.size();
  }
  auto it = index_.find(key);
  return it == index_.end() ? entries_.size() : it->second;
}

void Dict::reindex() {
  index_.clear();
  if (entries_.size() < kIndexFrom) return;
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
}

const Value* Dict::find(std::string_view key) const {
  const size_t i = position(key);
  return i == entries_.size() ? nullptr : &entries_[i].second;
}

void Dict::set(std::string_view key, Value value) {
  const size_t i = position(key);
  if (i < entries_.size()) {
    entries_[i].second = std::move(value);
    return;
  }
  entries_.emplace_back(std::string(key), std::move(value));
  if (entries_.size() == kIndexFrom) {
    reindex();
  } else if (entries_.size() > kIndexFrom) {
    index_.emplace(entries_.back().first, i);
  }
}

void Dict::clear() {
  entries_.clear();
  index_.clear();
}

const Value* Args::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

Value Value::from_string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.str = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::from_list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.tuple = tuple;
  for (const Value& x : items) v.depth = std::max(v.depth, depth_of(x));
  check_depth(++v.depth);
  v.list = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}

Value Value::from_dict(Dict d) {
  Value v;
  v.kind = Kind::Dict;
  for (const auto& [key, x] : d.entries()) v.depth = std::max(v.depth, depth_of(x));
  check_depth(++v.depth);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::namespace_of(Dict d) {
  Value v = from_dict(std::move(d));
  v.kind = Kind::Namespace;
  return v;
}

Value Value::from_function(std::string name, NativeFunction f) {
  Value v;
  v.kind = Kind::Function;
  v.function = std::make_shared<const Function>(Function{std::move(name), std::move(f)});
  return v;
}

namespace {
Value json_value_of(const nlohmann::ordered_json& j, uint32_t depth);
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  try {
    return json_value_of(j, 0);
  } catch (const Failure& f) {
    throw Error(fmt::format("JSON input: {}", f.message));
  }
}

namespace {

Value json_value_of(const nlohmann::ordered_json& j, uint32_t depth) {
  if (depth > kMaxValueDepth) fail(fmt::format("nested deeper than the limit of {}", kMaxValueDepth));
  using V = Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return V::none();
    case nlohmann::ordered_json::value_t::boolean: return V::from_bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return V::from_int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? V::from_int(static_cast<int64_t>(u)) : V::from_float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return V::from_float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return V::from_string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(json_value_of(x, depth + 1));
      return V::from_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [key, x] : j.items()) d.set(key, json_value_of(x, depth + 1));
      return V::from_dict(std::move(d));
    }
    default: return V::undefined();  // binary and discarded values do not occur in parsed JSON
  }
}

}  // namespace

std::string_view type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "none";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.tuple ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "namespace";
    case Value::Kind::Function: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.boolean;
    case Value::Kind::Int: return v.integer != 0;
    case Value::Kind::Float: return v.number != 0 && !std::isnan(v.number);
    case Value::Kind::String: return !v.str->empty();
    case Value::Kind::List: return !v.list->empty();
    case Value::Kind::Dict: return v.dict->size() > 0;
    case Value::Kind::Namespace:
    case Value::Kind::Function: return true;
  }
  return false;
}

std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";  // JavaScript writes -0 as "0" too
  // The shortest digits that read back to d, and the exponent: d = 0.DIGITS × 10^n.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  std::string sci(buf, end);  // "d.ddde+XX"
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, 1) + (e > 2 ? sci.substr(2, e - 2) : "");
  const int n = std::stoi(sci.substr(e + 1)) + 1;
  const int k = static_cast<int>(digits.size());
  std::string out = d < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  }
  return out;
}

namespace {

// JSON.stringify of a string; with ensure_ascii, every UTF-16 unit from 0x7f up as \uXXXX.
void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = decode_utf8(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (cp < 0x20) {
      out += fmt::format("\\u{:04x}", cp);
    } else if (ensure_ascii && cp >= 0x7f) {
      if (cp >= 0x10000) {
        const uint32_t c = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth, bool undefined_is_null,
                std::string_view origin) {
  check(depth < 512, "{}: a value nested more than 512 deep cannot be written as JSON", origin);
  switch (v.kind) {
    case Value::Kind::Undefined: out += undefined_is_null ? "null" : "undefined"; return;
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.integer); return;
    case Value::Kind::Float: out += std::isfinite(v.number) ? js_number(v.number) : "null"; return;
    case Value::Kind::String: json_string(out, v.s(), style.ensure_ascii); return;
    case Value::Kind::Function: throw Error(fmt::format("{}: a function cannot be written as JSON", origin));
    default: break;
  }
  const bool indented = style.indent > 0;
  const std::string item_sep = !style.item_separator.empty() ? style.item_separator : indented ? "," : ", ";
  const std::string key_sep = !style.key_separator.empty() ? style.key_separator : ": ";
  const std::string pad = indented ? std::string(static_cast<size_t>(style.indent), ' ') : "";
  std::string base = "\n", child = "\n";
  if (indented) {
    for (int i = 0; i < depth; ++i) base += pad;
    child = base + pad;
  }
  if (v.kind == Value::Kind::List) {
    out += '[';
    const auto& items = v.items();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep;
      if (indented) out += child;
      json_value(out, items[i], style, depth + 1, undefined_is_null, origin);
    }
    if (indented && !items.empty()) out += base;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.dict->entries()) entries.push_back(&e);
  if (style.sort_keys)
    std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += item_sep;
    if (indented) out += child;
    json_string(out, entries[i]->first, style.ensure_ascii);
    out += key_sep;
    json_value(out, entries[i]->second, style, depth + 1, undefined_is_null, origin);
  }
  if (indented && !entries.empty()) out += base;
  out += '}';
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style, std::string_view origin) {
  std::string out;
  json_value(out, v, style, 0, /*undefined_is_null=*/true, origin);
  return out;
}

std::string to_output(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return "";
    case Value::Kind::Bool: return v.boolean ? "true" : "false";
    case Value::Kind::Int: return std::to_string(v.integer);
    case Value::Kind::Float: {
      const double d = v.number;
      if (d == 0 && std::signbit(d)) return "-0.0";
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e21) return fmt::format("{:.1f}", d);
      return js_number(d);
    }
    case Value::Kind::String: return v.s();
    case Value::Kind::Function: return fmt::format("<function {}>", v.function->name);
    default: {
      std::string out;
      json_value(out, v, JsonStyle{}, 0, /*undefined_is_null=*/false, "template");
      return out;
    }
  }
}

bool equal(const Value& a, const Value& b) {
  const auto numeric = [](const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Float || v.kind == Value::Kind::Bool; };
  if (numeric(a) && numeric(b)) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? a.boolean : a.integer) == (b.kind == Value::Kind::Bool ? b.boolean : b.integer);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.s() == b.s();
    case Value::Kind::List: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, x] : a.dict->entries()) {
        const Value* y = b.dict->find(key);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return a.dict == b.dict;
    case Value::Kind::Function: return a.function == b.function;
    default: return false;
  }
}

uint32_t decode_utf8(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < len; ++k) {
    const unsigned char cc = byte(i + static_cast<size_t>(k));
    if ((cc >> 6) != 0x2) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3f);
  }
  i += static_cast<size_t>(len);
  return cp;
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    decode_utf8(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) decode_utf8(s, i);
  return n;
}

bool is_js_space(uint32_t cp) {
  switch (cp) {
    case '\t': case '\n': case 0x0b: case '\f': case '\r': case ' ': case 0xa0: case 0x1680: case 0x2028:
    case 0x2029: case 0x202f: case 0x205f: case 0x3000: case 0xfeff: return true;
    default: return cp >= 0x2000 && cp <= 0x200a;
  }
}

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!is_js_space(decode_utf8(s, next))) break;
    i = next;
  }
  return i;
}

size_t trailing_space(std::string_view s) {
  // Walk forward, remembering where the last run of white space began.
  size_t run_start = s.size();
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const bool space = is_js_space(decode_utf8(s, i));
    if (!space) run_start = s.size();
    else if (run_start == s.size()) run_start = start;
  }
  return s.size() - run_start;
}

}  // namespace attend::tokenize::jinja
