// Free memory per device and pinned host buffers (memory.h).
#include "lithe/core/memory.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cuda_memory.h"
#include "lithe/core/log.h"

namespace lithe {
namespace {

// MemAvailable of /proc/meminfo ("MemAvailable:   22000000 kB"), in bytes.
Result<uint64_t> host_available() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return error(StatusCode::io_error, "cannot open /proc/meminfo: {}", std::strerror(errno));
  char line[256];
  unsigned long long kb = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f) != nullptr)
    found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
  std::fclose(f);
  if (!found) return error(StatusCode::unsupported, "/proc/meminfo has no MemAvailable line");
  return static_cast<uint64_t>(kb) * 1024;
}

}  // namespace

Result<uint64_t> free_memory(Device device) {
  if (device == Device::cpu) return host_available();
  return cuda_detail::free_device_memory();
}

Result<BufferPtr> alloc_host_pinned(size_t bytes) {
  if (cuda_available()) {
    auto pinned = cuda_detail::alloc_pinned(bytes);
    if (pinned.is_ok()) return pinned;
    log::debug("{}; using pageable host memory", pinned.status().message());
  }
  return alloc_host(bytes);
}

}  // namespace lithe
