// Internal seam between core buffers and the CUDA runtime. Implemented by cuda_memory.cpp when
// built with CUDA and by cuda_memory_stub.cpp otherwise, so core code has no #ifdefs.
#pragma once

#include <cstdint>

#include "lithe/core/buffer.h"

namespace lithe::cuda_detail {

int device_count();  // 0 without CUDA or without a device
Result<BufferPtr> alloc_device(size_t bytes);
Status copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n);
Result<uint64_t> free_device_memory();         // cudaMemGetInfo's free bytes
Result<BufferPtr> alloc_pinned(size_t bytes);  // page-locked host memory (cudaHostAlloc)

}  // namespace lithe::cuda_detail
