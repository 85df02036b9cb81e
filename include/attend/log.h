// A levelled logger that writes one line per message to stderr.
//
//   attend::log::info("step {} loss {:.4f}", step, loss);
//   attend::log::set_level(attend::log::Level::Debug);
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace attend::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

void set_level(Level level);
Level level();
// Parses "debug", "info", "warn", "error" or "off"; throws attend::Error otherwise.
Level parse_level(std::string_view name);
void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::Debug) write(Level::Debug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::Info) write(Level::Info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::Warn) write(Level::Warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::Error) write(Level::Error, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace attend::log
