// The unlinked temporary file of spill_file.h.
#include "lithe/quantize/spill_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace lithe::compress {
namespace {

Status os_error(const char* what, const std::string& dir, int err) {
  return error(StatusCode::io_error, "spill file in '{}': {} failed: {}", dir, what, std::strerror(err));
}

// Bytes an unprivileged process may still write under `dir`.
Result<uint64_t> free_bytes(const std::string& dir) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return os_error("statvfs", dir, errno);
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

}  // namespace

Status check_spill_space(const std::string& dir, uint64_t bytes, uint64_t free) {
  if (bytes <= free) return Status::ok();
  return error(StatusCode::out_of_memory, "the activations' spill file needs {} bytes in '{}' but only {} bytes "
               "are free there: free some space, point TMPDIR (or the output) to a larger disk, or calibrate on "
               "fewer tokens (--nsamples, --seqlen)", bytes, dir, free);
}

std::string default_spill_dir() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? t : "/tmp";
}

Result<SpillFile> SpillFile::create(const std::string& dir, uint64_t bytes) {
  LITHE_ASSIGN(const uint64_t free, free_bytes(dir));
  LITHE_TRY(check_spill_space(dir, bytes, free));
  std::string name = dir + "/lithe-activations-XXXXXX";
  std::vector<char> path(name.begin(), name.end());
  path.push_back('\0');
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) return os_error("mkostemp", dir, errno);
  ::unlink(path.data());  // unnamed from here on: the blocks go with the last close
  SpillFile f(fd, bytes, dir);
  if (bytes > 0) {
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err == ENOSPC) {  // fewer free blocks than statvfs said (another writer): the same refusal
      LITHE_ASSIGN(const uint64_t now, free_bytes(dir));
      return check_spill_space(dir, bytes, std::min(now, bytes - 1));
    }
    if (err != 0) return os_error("posix_fallocate", dir, err);
  }
  return f;
}

SpillFile::SpillFile(SpillFile&& o) noexcept : fd_(o.fd_), size_(o.size_), dir_(std::move(o.dir_)) { o.fd_ = -1; }

SpillFile& SpillFile::operator=(SpillFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    dir_ = std::move(o.dir_);
    o.fd_ = -1;
  }
  return *this;
}

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status SpillFile::read(uint64_t offset, void* dst, size_t n) const {
  LITHE_CHECK(offset + n <= size_);
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return os_error("pread", dir_, errno);
    if (got == 0) return error(StatusCode::io_error, "spill file in '{}': read past its end at {}", dir_, offset);
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return Status::ok();
}

Status SpillFile::write(uint64_t offset, const void* src, size_t n) {
  LITHE_CHECK(offset + n <= size_);
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return os_error("pwrite", dir_, errno);
    p += put;
    offset += static_cast<uint64_t>(put);
    n -= static_cast<size_t>(put);
  }
  return Status::ok();
}

}  // namespace lithe::compress
