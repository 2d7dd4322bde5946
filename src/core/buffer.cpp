#include "lithe/core/buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cuda_memory.h"

namespace lithe {

std::string_view device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Result<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  return error(StatusCode::invalid_argument, "unknown device '{}': use cpu or cuda", name);
}

namespace {

class HostBuffer final : public Buffer {
 public:
  HostBuffer(void* p, size_t n) : Buffer(p, n, Device::cpu, true) {}
  ~HostBuffer() override { std::free(data_); }
};

class MappedBuffer final : public Buffer {
 public:
  MappedBuffer(void* p, size_t n) : Buffer(p, n, Device::cpu, false) {}
  ~MappedBuffer() override {
    if (size_ > 0) munmap(data_, size_);
  }
};

}  // namespace

Result<BufferPtr> alloc_host(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded == 0 ? std::aligned_alloc(64, 64) : std::aligned_alloc(64, rounded);
  if (p == nullptr)
    return error(StatusCode::out_of_memory, "cannot allocate {} bytes of host memory", bytes);
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  return BufferPtr(std::make_shared<HostBuffer>(p, bytes));
}

Result<BufferPtr> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const auto code = errno == ENOENT ? StatusCode::not_found : StatusCode::io_error;
    return error(code, "cannot open '{}': {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return error(StatusCode::io_error, "'{}' is not a regular file", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = nullptr;
  if (size > 0) {
    p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return error(StatusCode::io_error, "cannot map '{}' ({} bytes): {}", path, size,
                   std::strerror(err));
    }
  }
  ::close(fd);
  return BufferPtr(std::make_shared<MappedBuffer>(p, size));
}

Result<BufferPtr> alloc_device(size_t bytes) { return cuda_detail::alloc_device(bytes); }

bool cuda_available() { return cuda_detail::device_count() > 0; }

Status copy_bytes(Buffer& dst, size_t dst_off, const Buffer& src, size_t src_off, size_t n) {
  LITHE_CHECK(dst_off + n <= dst.size() && src_off + n <= src.size());
  if (n == 0) return Status::ok();
  if (!dst.writable()) return error(StatusCode::invalid_argument, "destination buffer is read-only");
  auto* d = static_cast<uint8_t*>(dst.data()) + dst_off;
  const auto* s = static_cast<const uint8_t*>(src.data()) + src_off;
  if (dst.device() == Device::cpu && src.device() == Device::cpu) {
    std::memcpy(d, s, n);
    return Status::ok();
  }
  return cuda_detail::copy(d, dst.device(), s, src.device(), n);
}

}  // namespace lithe
