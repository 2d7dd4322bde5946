// Helpers shared by the libFuzzer targets.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "lithe/core/buffer.h"
#include "lithe/core/tensor.h"

namespace lithe::fuzz {

// A host Buffer holding exactly the fuzz input: no rounding slack (unlike alloc_host), so
// AddressSanitizer flags a read even one byte past the end.
class ExactBuffer final : public Buffer {
 public:
  ExactBuffer(const uint8_t* data, size_t size)
      : Buffer(std::malloc(size == 0 ? 1 : size), size, Device::cpu, false) {
    if (data_ == nullptr) std::abort();
    if (size > 0) std::memcpy(data_, data, size);
  }
  ~ExactBuffer() override { std::free(data_); }
};

inline BufferPtr exact_buffer(const uint8_t* data, size_t size) {
  return std::make_shared<ExactBuffer>(data, size);
}

// Reads the first and last byte of a view (ASan checks them) and checks that it lies inside the
// input; returns a value the caller folds into a sink so the reads are not optimised away.
inline uint8_t touch(const Tensor& t, const BufferPtr& input) {
  const size_t n = t.nbytes();
  if (t.buffer() != input || t.offset() > input->size() || n > input->size() - t.offset()) std::abort();
  if (n == 0) return 0;
  const auto* p = static_cast<const uint8_t*>(t.data());
  return static_cast<uint8_t>(p[0] ^ p[n - 1]);
}

}  // namespace lithe::fuzz
