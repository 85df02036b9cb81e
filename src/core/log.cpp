#include <attend/error.h>
#include <attend/log.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace attend::log {
namespace {

std::atomic<Level> g_level{Level::Info};
std::mutex g_mutex;

const char* tag(Level level) {
  switch (level) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warning";
    case Level::Error: return "error";
    case Level::Off: break;
  }
  return "";
}

}  // namespace

void set_level(Level level) { g_level.store(level); }
Level level() { return g_level.load(std::memory_order_relaxed); }

Level parse_level(std::string_view name) {
  if (name == "debug") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warn" || name == "warning") return Level::Warn;
  if (name == "error") return Level::Error;
  if (name == "off") return Level::Off;
  throw Error(fmt::format("unknown log level '{}': expected debug, info, warn, error or off", name));
}

void write(Level level, std::string_view message) {
  std::lock_guard lock(g_mutex);
  fmt::print(stderr, "[attend {}] {}\n", tag(level), message);
  std::fflush(stderr);
}

}  // namespace attend::log
