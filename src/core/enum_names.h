// Enums spelled as words in config files and on the command line: one table per enum, and the two
// lookups every such enum needs.
#pragma once

#include <attend/error.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace attend {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E>
const char* enum_name(std::span<const EnumName<E>> names, E value) {
  for (const auto& n : names)
    if (n.value == value) return n.name;
  return "?";
}

// The value called `text`; nullopt when no entry has that name.
template <typename E>
std::optional<E> find_enum(std::span<const EnumName<E>> names, std::string_view text) {
  for (const auto& n : names)
    if (text == n.name) return n.value;
  return std::nullopt;
}

// The value called `text`, or attend::Error "<what>: 'text', expected one of a, b, c".
template <typename E>
E parse_enum(std::span<const EnumName<E>> names, std::string_view text, std::string_view what) {
  if (const std::optional<E> value = find_enum(names, text)) return *value;
  std::string accepted;
  for (const auto& n : names) accepted += (accepted.empty() ? "" : ", ") + std::string(n.name);
  throw Error(fmt::format("{}: '{}', expected one of {}", what, text, accepted));
}

}  // namespace attend
