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

Result<uint64_t> free_device_memory() {
  return error(StatusCode::unsupported, "no free cuda memory to report: built without CUDA");
}

Result<BufferPtr> alloc_pinned(size_t bytes) {
  return error(StatusCode::unsupported, "cannot pin {} bytes of host memory: built without CUDA", bytes);
}

}  // namespace lithe::cuda_detail
