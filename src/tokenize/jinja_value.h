// The values a chat template computes with, and how they print.
//
// Jinja's types as Hugging Face's JavaScript implementation (@huggingface/jinja, the oracle of the tests)
// models them: undefined, none, booleans, integers, floats, strings, lists (and tuples), dicts with string keys
// in insertion order, namespaces (the one mutable object a template can make) and functions (macros and
// built-ins). Lists and dicts are shared and never changed once made (transformers renders in Jinja's
// immutable sandbox, so a template cannot append to a list); a namespace is shared and changes in place.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attend::tokenize::jinja {

// What the engine throws below the interpreter: a message without a place. The interpreter adds the
// template's name, line and column of the expression at fault and throws attend::Error.
struct Failure {
  std::string message;
};
[[noreturn]] void fail(std::string message);

// Lists and dicts nest at most this deep (so that comparing, printing and freeing them cannot exhaust the
// stack); a namespace counts as one level, whatever it holds.
inline constexpr uint32_t kMaxValueDepth = 1000;

struct Value;
struct Scope;
class Interpreter;

class Dict;
struct Args;
// A built-in function or a macro: called with the interpreter, the arguments and the scope of the call
// (macros see the caller's variables, as in @huggingface/jinja).
using NativeFunction = std::function<Value(Interpreter&, Args&, const std::shared_ptr<Scope>&)>;

struct Function {
  std::string name;  // for messages: "macro 'render'", "raise_exception"
  NativeFunction call;
};

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };
  Kind kind = Kind::Undefined;
  bool tuple = false;  // a List written as a tuple (a, b); prints and compares as a list
  uint32_t depth = 0;  // lists and dicts: 1 + the deepest item
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::shared_ptr<const std::string> str;
  std::shared_ptr<const std::vector<Value>> list;
  std::shared_ptr<Dict> dict;  // Dict (treated as const) and Namespace (changed by `set ns.x = ...`)
  std::shared_ptr<const Function> function;

  static Value undefined() { return {}; }
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value from_bool(bool b) { Value v; v.kind = Kind::Bool; v.boolean = b; return v; }
  static Value from_int(int64_t i) { Value v; v.kind = Kind::Int; v.integer = i; return v; }
  static Value from_float(double d) { Value v; v.kind = Kind::Float; v.number = d; return v; }
  static Value from_string(std::string s);
  static Value from_list(std::vector<Value> items, bool tuple = false);
  static Value from_dict(Dict d);
  static Value namespace_of(Dict d);
  static Value from_function(std::string name, NativeFunction f);
  // JSON in (messages, tools, extra context): objects keep their key order; numbers with a fraction or an
  // exponent are floats, the rest integers. Throws attend::Error for JSON nested deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  const std::string& s() const { return *str; }
  const std::vector<Value>& items() const { return *list; }
  double as_double() const { return kind == Kind::Int ? static_cast<double>(integer) : kind == Kind::Bool ? boolean : number; }
};

// A dict: string keys in insertion order (Python's dict, JavaScript's Map). Most dicts of a chat template
// are small (a message, `loop`, a tool call) and are found by a scan; a dict of kIndexFrom entries or more
// gets a hash index.
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string_view key, Value value);  // replaces in place, or appends
  void set_at(size_t i, Value value) { entries_.at(i).second = std::move(value); }  // entry i's value
  void clear();
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  static constexpr size_t kIndexFrom = 16;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  size_t position(std::string_view key) const;  // entries_.size() when absent
  void reindex();

  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;  // empty below kIndexFrom entries
};

// A call's arguments, evaluated: positional ones, then keyword ones in the order written.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Argument `i` given by position, else by keyword `name`; nullptr when neither was given.
  const Value* get(size_t i, std::string_view name) const;
};

// The type's name as messages give it: "undefined", "none", "bool", "int", "float", "str", "list",
// "tuple", "dict", "namespace", "function".
std::string_view type_name(const Value& v);

// Truthiness (Python's): 0, 0.0, "", empty lists and dicts, none and undefined are false; a namespace
// and a function are true.
bool truthy(const Value& v);

// What {{ v }} writes (@huggingface/jinja's toString): undefined and none write nothing (the caller skips
// them), booleans "true"/"false", floats with at least one decimal ("2.0", "1.5", "1e+21"), lists and dicts
// as JSON with ", " and ": " where undefined is written "undefined".
std::string to_output(const Value& v);

// The `tojson` filter: JSON.stringify's escapes (non-ASCII kept unless ensure_ascii, which escapes to
// \uXXXX by UTF-16 unit), Python's json.dumps layout: ", " / ": " separators, or "," / ": " with an indent,
// one entry per line; numbers as JavaScript writes them (a float 2.0 is "2"). Undefined is null.
struct JsonStyle {
  int indent = -1;  // -1: none
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator, key_separator;  // empty: the defaults above
};
std::string to_json(const Value& v, const JsonStyle& style, std::string_view origin);

// A double as JavaScript's Number.prototype.toString writes it (shortest round trip; exponent from 1e21
// and below 1e-6).
std::string js_number(double d);

// Equality for ==, !=, `in` and the eq test (Python's): numbers by value (true == 1), strings, lists
// element by element, dicts entry by entry, none == none, undefined == undefined; else false.
bool equal(const Value& a, const Value& b);

// UTF-8 helpers: the code points of a string (invalid bytes count as one each), and Unicode white space
// as JavaScript's \s and String.prototype.trim define it.
std::vector<std::string_view> code_points(std::string_view s);
size_t code_point_count(std::string_view s);
bool is_js_space(uint32_t cp);
// Length of the white space at the start (or end) of s, in bytes.
size_t leading_space(std::string_view s);
size_t trailing_space(std::string_view s);
uint32_t decode_utf8(std::string_view s, size_t& i);  // the code point at i; advances i (bad byte: itself)

}  // namespace attend::tokenize::jinja
