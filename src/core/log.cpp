#include "lithe/core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace lithe {
namespace {

LogLevel initial_level() {
  LogLevel l = LogLevel::info;
  if (const char* env = std::getenv("LITHE_LOG")) parse_log_level(env, &l);
  return l;
}

std::atomic<LogLevel>& level_slot() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
    case LogLevel::off: return "off";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { level_slot() = level; }
LogLevel log_level() { return level_slot(); }

bool parse_log_level(std::string_view s, LogLevel* out) {
  for (LogLevel l : {LogLevel::debug, LogLevel::info, LogLevel::warn, LogLevel::error, LogLevel::off}) {
    if (s == level_name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void log_write(LogLevel level, std::string_view message) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  std::lock_guard<std::mutex> lk(mu);
  std::fprintf(stderr, "[lithe %02d:%02d:%02d.%03d %s] %.*s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
               static_cast<int>(ms), level_name(level), static_cast<int>(message.size()), message.data());
}

}  // namespace lithe
