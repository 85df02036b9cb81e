// Option structs read from and written to JSON, field by field, with errors that name the file and the
// field. A struct lists its fields once in a for_each function, f(key, field, description); reading,
// writing, `--set KEY=VALUE` and `--help-config` all walk that list.
#pragma once

#include "core/enum_names.h"

#include <attend/error.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace attend {

// Outside JSON nested deeper than this is refused before it is parsed: nlohmann's parser builds any depth, but
// printing, copying or comparing the value recurses once a level (100,000 brackets in a request body took the
// server's stack). Real files nest a few levels (tokenizer.json about eight).
inline constexpr int kMaxJsonDepth = 256;

// Whether the arrays and objects of `text` nest at most max_depth deep (brackets inside strings skipped; the
// text need not be valid JSON, the parser says what else is wrong).
inline bool json_depth_within(std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Throws attend::Error "<origin>: JSON nested deeper than 256 levels" for text json_depth_within refuses.
inline void check_json_depth(std::string_view text, std::string_view origin) {
  if (!json_depth_within(text)) throw Error(fmt::format("{}: JSON nested deeper than {} levels", origin, kMaxJsonDepth));
}

// Parses JSON text, or throws attend::Error "<origin>: not valid JSON: ..." (or nested too deep, above). Besides
// syntax errors, the parser throws out_of_range for a number too large for a double ("1e999").
inline nlohmann::json parse_json(std::string_view text, std::string_view origin) {
  check_json_depth(text, origin);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
}

// The names of an enum's values; specialised beside each enum's table.
template <typename E>
std::span<const EnumName<E>> names_of();

// A field kept in a struct under one type and written under another (a bool spelled "pre" / "post")
// provides read(json, where) and write() const.
template <typename T>
concept CustomJsonField = requires(T& t, const nlohmann::json& j) {
  t.read(j, std::string());
  { std::as_const(t).write() } -> std::convertible_to<nlohmann::ordered_json>;
};

// Reads one JSON value into a field, or says what was expected: "run.json: 'd_model' is "8", expected an integer".
template <typename T>
void read_field(T& field, const nlohmann::json& v, const std::string& where) {
  if constexpr (CustomJsonField<T>) {
    field.read(v, where);
  } else if constexpr (std::is_same_v<T, bool>) {
    check(v.is_boolean(), "{} is {}, expected true or false", where, v.dump());
    field = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    check(v.is_number_integer(), "{} is {}, expected an integer", where, v.dump());
    if constexpr (std::is_unsigned_v<T>) {
      check(v.is_number_unsigned(), "{} is {}, expected a non-negative integer", where, v.dump());
      field = v.get<T>();
    } else {
      const int64_t x = v.get<int64_t>();
      check(x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max(), "{} = {} is out of range", where, x);
      field = static_cast<T>(x);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    check(v.is_number(), "{} is {}, expected a number", where, v.dump());
    field = v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    check(v.is_string(), "{} is {}, expected a string", where, v.dump());
    field = v.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    check(v.is_array() || v.is_number_integer(), "{} is {}, expected a list of integers", where, v.dump());
    field.clear();
    if (v.is_number_integer()) field.push_back(v.get<int64_t>());
    else
      for (const auto& e : v) {
        check(e.is_number_integer(), "{} has {}, expected integers", where, e.dump());
        field.push_back(e.get<int64_t>());
      }
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    check(v.is_array() || v.is_string(), "{} is {}, expected a list of strings", where, v.dump());
    field.clear();
    if (v.is_string()) field.push_back(v.get<std::string>());
    else
      for (const auto& e : v) {
        check(e.is_string(), "{} has {}, expected strings", where, e.dump());
        field.push_back(e.get<std::string>());
      }
  } else {
    static_assert(std::is_enum_v<T>, "no JSON reader for this field type");
    check(v.is_string(), "{} is {}, expected a string", where, v.dump());
    field = parse_enum<T>(names_of<T>(), v.get<std::string>(), where);
  }
}

template <typename T>
nlohmann::ordered_json field_value(const T& field) {
  if constexpr (CustomJsonField<T>)
    return field.write();
  else if constexpr (std::is_enum_v<T>)
    return enum_name<T>(names_of<T>(), field);
  else
    return field;
}

// Fills fields from the object j (missing keys keep their values); unknown keys are errors.
template <typename ForEach>
void read_fields(const nlohmann::json& j, std::string_view origin, ForEach&& for_each) {
  check(j.is_object(), "{}: expected a JSON object of options, found {}", origin, j.type_name());
  std::vector<std::string> known;
  for_each([&](const char* key, auto& field, const char*) {
    known.emplace_back(key);
    if (auto it = j.find(key); it != j.end()) read_field(field, *it, fmt::format("{}: '{}'", origin, key));
  });
  for (const auto& [key, value] : j.items())
    check(std::find(known.begin(), known.end(), key) != known.end(), "{}: unknown option '{}'", origin, key);
}

template <typename ForEach>
nlohmann::ordered_json write_fields(ForEach&& for_each) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for_each([&](const char* key, auto& field, const char*) { j[key] = field_value(field); });
  return j;
}

// Sets the field called `key` from `value`: JSON ("768", "true", "[\"a\"]") or a bare word ("rmsnorm").
// Returns false when no field has that name.
template <typename ForEach>
bool set_field(std::string_view key, std::string_view value, std::string_view where, ForEach&& for_each) {
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(value);
  } catch (const nlohmann::json::exception&) {  // not JSON, or a number out of range: the bare word
    v = std::string(value);
  }
  bool found = false;
  for_each([&](const char* k, auto& field, const char*) {
    if (key != k) return;
    nlohmann::json given = v;
    // A list on the command line: q,v or 1,3 (or JSON's ["q","v"] and [1,3]).
    using Field = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<Field, std::vector<std::string>> || std::is_same_v<Field, std::vector<int64_t>>) {
      if (v.is_string()) {
        given = nlohmann::json::array();
        const std::string text = v.get<std::string>();
        const bool none = text.empty() && std::is_same_v<Field, std::vector<int64_t>>;  // "": no numbers
        for (size_t at = 0; !none && at <= text.size();) {
          const size_t comma = std::min(text.find(',', at), text.size());
          std::string item = text.substr(at, comma - at);
          if constexpr (std::is_same_v<Field, std::vector<int64_t>>) {  // "1, 3" too; "" is no number
            item.erase(0, item.find_first_not_of(' '));
            item.erase(item.find_last_not_of(' ') + 1);
            int64_t n = 0;
            const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
            check(ec == std::errc() && end == item.data() + item.size(), "{}: '{}' = '{}': '{}' is not an integer",
                  where, k, text, item);
            given.push_back(n);
          } else {
            given.push_back(item);
          }
          at = comma + 1;
        }
      }
    }
    read_field(field, given, fmt::format("{}: '{}'", where, k));
    found = true;
  });
  return found;
}

// "  key  (default)  description" lines for --help-config.
template <typename ForEach>
std::string describe_fields(std::string_view prefix, ForEach&& for_each) {
  std::string out;
  for_each([&](const char* key, auto& field, const char* doc) {
    out += fmt::format("  {:<28} {:<14} {}\n", fmt::format("{}{}", prefix, key), field_value(field).dump(), doc);
  });
  return out;
}

}  // namespace attend
