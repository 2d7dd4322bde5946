// Built when lithe has no CUDA: every device request is refused with a clear message.
#include "cuda_memory.h"

namespace lithe::cuda_detail {

int device_count() { return 0; }

Result<BufferPtr> alloc_device(size_t bytes) {
  return error(StatusCode::unsupported,
               "cannot allocate {} bytes on cuda: this lithe was built without CUDA "
               "(configure with the cuda-release preset on a machine with nvcc)",
               bytes);
}

Status copy(void*, Device, const void*, Device, size_t n) {
  return error(StatusCode::unsupported, "cannot copy {} bytes to or from cuda: built without CUDA", n);
}

}  // namespace lithe::cuda_detail
