// The template engine's built-ins: filters (jinja_filters.cpp); tests, the methods of strings, dicts and
// lists, the global functions and the text helpers they share (jinja_builtins.cpp).
//
// Each mirrors @huggingface/jinja where it has the built-in, and Python's Jinja (the one transformers
// renders with) where it lacks it or where its result is an accident of JavaScript (a UTF-16 length,
// strip() ignoring its argument, int() of "4x").
#pragma once

#include "tokenize/jinja_interpreter.h"

#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize::jinja {

// Globals every render sees: namespace, range, raise_exception, strftime_now, and true/false/none in
// both spellings.
void install_globals(Scope& globals);

Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, Args& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& operand, Args& args);
// `object.key` for the built-in methods and properties of strings, dicts and lists ("upper", "items",
// "length"); undefined when there is none.
Value builtin_member(Interpreter& in, const Value& object, const std::string& key);

// How `~`, `+` with a string, and `join` write a value (JavaScript's String(x)): floats without a forced
// ".0", booleans "true"/"false", none and undefined "", a list as its items joined by "," (no brackets),
// a dict as {{ }} writes it (where JavaScript would write "[object Map]").
std::string concat_text(const Value& v);

// Text helpers: case mapping by ICU's root locale (as JavaScript's toUpperCase), Python's title() and
// capitalize(), and strip() of white space or of the given characters.
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
std::string strip(std::string_view s, const Value* chars, bool left, bool right);
// Python's str.replace(old, new, count=-1), for the method and the filter.
Value replace(Interpreter& in, const std::string& s, const Args& args);

// Sort order of the sort filter and dictsort: numbers (and booleans) by value, strings (case-folded
// unless case_sensitive), none with none; anything else cannot be compared.
int compare_values(const Value& a, const Value& b, bool case_sensitive);
// "a.b.0" of a dict or list, as the attribute argument of sort, map and selectattr reads it.
Value attribute_path(const Value& item, const std::string& path);

}  // namespace attend::tokenize::jinja
