// Buffers own bytes on one device: host heap (64-byte aligned), a read-only memory-mapped file,
// or CUDA device memory (only when built with CUDA). Tensors are views into a shared Buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "lithe/core/status.h"

namespace lithe {

enum class Device : uint8_t { cpu, cuda };
std::string_view device_name(Device d);
Result<Device> parse_device(std::string_view name);  // "cpu" | "cuda"

class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  bool writable() const { return writable_; }

 protected:
  Buffer(void* data, size_t size, Device device, bool writable)
      : data_(data), size_(size), device_(device), writable_(writable) {}
  void* data_;
  size_t size_;
  Device device_;
  bool writable_;
};

using BufferPtr = std::shared_ptr<Buffer>;

// Zero-initialised host memory, 64-byte aligned. Fails with out_of_memory naming the size.
Result<BufferPtr> alloc_host(size_t bytes);
// Maps a whole file read-only (MAP_PRIVATE). Empty files map to a zero-size buffer.
Result<BufferPtr> map_file(const std::string& path);
// Device memory on the current CUDA device; unsupported when built without CUDA,
// out_of_memory (naming asked and free bytes) when the device is full.
Result<BufferPtr> alloc_device(size_t bytes);
// Copies between buffers of any devices; sizes and offsets are checked by the caller.
Status copy_bytes(Buffer& dst, size_t dst_off, const Buffer& src, size_t src_off, size_t n);

// Whether this build has CUDA and a usable device is present.
bool cuda_available();

}  // namespace lithe
