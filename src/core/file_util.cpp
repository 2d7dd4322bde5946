#include "lithe/core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace lithe {
namespace {

std::string temp_name_for(const std::string& path) {
  std::random_device rd;
  return fmt::format("{}.tmp-{}-{:08x}", path, static_cast<long>(getpid()), rd());
}

}  // namespace

Status write_file_atomic_with(const std::string& path, const std::function<Status(std::FILE*)>& fill) {
  const std::string tmp = temp_name_for(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    return error(StatusCode::io_error, "cannot create '{}': {}", tmp, std::strerror(errno));
  Status st = fill(f);
  if (st.is_ok() && std::fflush(f) != 0)
    st = error(StatusCode::io_error, "cannot write '{}': {}", tmp, std::strerror(errno));
  if (st.is_ok() && fsync(fileno(f)) != 0)
    st = error(StatusCode::io_error, "cannot sync '{}': {}", tmp, std::strerror(errno));
  if (std::fclose(f) != 0 && st.is_ok())
    st = error(StatusCode::io_error, "cannot close '{}': {}", tmp, std::strerror(errno));
  if (st.is_ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    st = error(StatusCode::io_error, "cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  if (!st.is_ok()) std::remove(tmp.c_str());
  return st;
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  return write_file_atomic_with(path, [&](std::FILE* f) -> Status {
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
      return error(StatusCode::io_error, "cannot write {} bytes to '{}': {}", bytes.size(), path,
                   std::strerror(errno));
    return Status::ok();
  });
}

Status write_file_atomic(const std::string& path, const std::string& text) {
  return write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Result<std::string> read_text_file(const std::string& path, size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const auto code = errno == ENOENT ? StatusCode::not_found : StatusCode::io_error;
    return error(code, "cannot open '{}': {}", path, std::strerror(errno));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (out.size() + n > max_bytes) {
      std::fclose(f);
      return error(StatusCode::invalid_argument, "'{}' is larger than the {} byte limit", path, max_bytes);
    }
    out.append(buf, n);
  }
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) return error(StatusCode::io_error, "cannot read '{}'", path);
  return out;
}

}  // namespace lithe
