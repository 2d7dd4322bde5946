// A temporary file of fixed size for data that does not fit in memory (the calibration
// pipeline's activations with --activations disk), read and written at offsets (pread / pwrite).
// It is created in a given directory with its blocks reserved up front, so that a full disk fails
// at creation with a clear message rather than halfway through, and is unlinked at once: nothing
// is left on disk when the object is destroyed or the process ends, however it ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lithe/core/status.h"

namespace lithe::compress {

class SpillFile {
 public:
  // `bytes` in a new unnamed file in `dir`: out_of_memory when the file system has less free.
  static Result<SpillFile> create(const std::string& dir, uint64_t bytes);
  SpillFile(SpillFile&& o) noexcept;
  SpillFile& operator=(SpillFile&& o) noexcept;
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;
  ~SpillFile();

  uint64_t size() const { return size_; }
  const std::string& dir() const { return dir_; }
  // n bytes at `offset` (offset + n <= size()).
  Status read(uint64_t offset, void* dst, size_t n) const;
  Status write(uint64_t offset, const void* src, size_t n);

 private:
  SpillFile(int fd, uint64_t size, std::string dir) : fd_(fd), size_(size), dir_(std::move(dir)) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string dir_;
};

// OK when `bytes` fit into the `free` bytes of `dir`; else out_of_memory naming both and what to do.
Status check_spill_space(const std::string& dir, uint64_t bytes, uint64_t free);
// $TMPDIR when set, else /tmp.
std::string default_spill_dir();

}  // namespace lithe::compress
