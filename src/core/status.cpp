#include "lithe/core/status.h"

#include <cstdio>

namespace lithe {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid argument";
    case StatusCode::not_found: return "not found";
    case StatusCode::corrupt_file: return "corrupt file";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::io_error: return "I/O error";
    case StatusCode::out_of_memory: return "out of memory";
    case StatusCode::already_exists: return "already exists";
    case StatusCode::internal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return fmt::format("{}: {}", status_code_name(code_), message_);
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "lithe: internal check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg.empty() ? "" : " — ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace lithe
