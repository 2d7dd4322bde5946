// Leveled logging to stderr: "[lithe 12:03:04.123 info] message". The level comes from
// LITHE_LOG (debug|info|warn|error|off, default info) or set_log_level().
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace lithe {

enum class LogLevel { debug = 0, info, warn, error, off };

void set_log_level(LogLevel level);
LogLevel log_level();
bool parse_log_level(std::string_view s, LogLevel* out);
void log_write(LogLevel level, std::string_view message);

namespace log {
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::debug) log_write(LogLevel::debug, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::info) log_write(LogLevel::info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::warn) log_write(LogLevel::warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::error) log_write(LogLevel::error, fmt::format(f, std::forward<Args>(a)...));
}
}  // namespace log

}  // namespace lithe
