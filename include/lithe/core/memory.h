// What callers that place large working sets (the calibration pipeline's activations) need to
// choose where they go: the free memory of a device, and page-locked host buffers that CUDA
// copies to and from at full speed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lithe/core/buffer.h"

namespace lithe {

// Bytes that can still be allocated on `device`: cpu: MemAvailable of /proc/meminfo; cuda: the
// free memory of the current device (cudaMemGetInfo). unsupported for cuda without CUDA or a device.
Result<uint64_t> free_memory(Device device);
// Host memory (Device::cpu, not zeroed) page-locked through CUDA when a device is present, else
// (or when pinning fails) alloc_host's.
Result<BufferPtr> alloc_host_pinned(size_t bytes);

}  // namespace lithe
