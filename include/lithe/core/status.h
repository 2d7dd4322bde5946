// Status and Result<T>: the error type for everything a user can cause (bad file, bad flag,
// bad request, out of memory). Messages name the offending value and say what to do.
// Broken internal invariants use LITHE_CHECK (abort with file and line) instead.
#pragma once

// fmt's compile-time format checks do not survive nvcc, so .cu files see Status without the
// fmt-based helpers (they build messages with std::string); everything else gets both.
#ifndef __CUDACC__
#include <fmt/format.h>
#endif

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace lithe {

enum class StatusCode {
  ok = 0,
  invalid_argument,  // a flag, parameter or request is wrong
  not_found,         // file, tensor, key or name does not exist
  corrupt_file,      // a file's contents contradict its own structure
  unsupported,       // valid input we do not handle (yet)
  io_error,          // the OS refused a read, write, map or rename
  out_of_memory,     // an allocation (host or device) failed
  already_exists,    // refusing to overwrite
  internal,          // a bug: should not happen
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::ok; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt_file: model.gguf: tensor 'x' offset 123 is past the end of the file (size 100)"
  std::string to_string() const;
  // Prepends context ("while reading X: ") to the message, keeping the code.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

#ifndef __CUDACC__
// Formatting helpers: error(StatusCode::not_found, "tensor '{}' not in {}", name, path).
template <typename... Args>
Status error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
#endif

// Result<T>: a value or a non-ok Status (std::expected is C++23).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).is_ok()) std::abort();  // a Result made from an ok Status is a bug
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status ok_status;
    return is_ok() ? ok_status : std::get<Status>(v_);
  }
  T& value() & { check(); return std::get<T>(v_); }
  const T& value() const& { check(); return std::get<T>(v_); }
  T&& value() && { check(); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check() const;
  std::variant<T, Status> v_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

template <typename T>
void Result<T>::check() const {
  if (!is_ok()) check_failed(__FILE__, __LINE__, "Result::value()", std::get<Status>(v_).to_string());
}

}  // namespace lithe

#define LITHE_CONCAT_INNER(a, b) a##b
#define LITHE_CONCAT(a, b) LITHE_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when expr is not ok.
#define LITHE_TRY(expr)                                  \
  do {                                                   \
    ::lithe::Status lithe_try_status_ = (expr);          \
    if (!lithe_try_status_.is_ok()) return lithe_try_status_; \
  } while (0)

// auto x = LITHE_ASSIGN_OR_RETURN-style: LITHE_ASSIGN(auto x, make_x());
#define LITHE_ASSIGN(lhs, expr) LITHE_ASSIGN_IMPL(LITHE_CONCAT(lithe_res_, __LINE__), lhs, expr)
#define LITHE_ASSIGN_IMPL(tmp, lhs, expr)         \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

// Invariant checks: a failure is a bug in lithe, never a user error.
#define LITHE_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) ::lithe::check_failed(__FILE__, __LINE__, #cond, std::string{}); \
  } while (0)
#define LITHE_CHECK_MSG(cond, ...)                                                          \
  do {                                                                                      \
    if (!(cond)) ::lithe::check_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)
