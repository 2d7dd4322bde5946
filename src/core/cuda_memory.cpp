// CUDA device buffers through the CUDA runtime; every call is checked.
#include <cuda_runtime.h>

#include "cuda_memory.h"

namespace lithe::cuda_detail {
namespace {

class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(void* p, size_t n) : Buffer(p, n, Device::cuda, true) {}
  ~DeviceBuffer() override {
    if (data_ != nullptr) cudaFree(data_);
  }
};

// Page-locked host memory: a host buffer that CUDA copies to and from without staging.
class PinnedBuffer final : public Buffer {
 public:
  PinnedBuffer(void* p, size_t n) : Buffer(p, n, Device::cpu, true) {}
  ~PinnedBuffer() override {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
};

Status cuda_error(cudaError_t e, const char* what, size_t n) {
  return error(StatusCode::io_error, "{} of {} bytes failed: {} ({})", what, n,
               cudaGetErrorName(e), cudaGetErrorString(e));
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

Result<BufferPtr> alloc_device(size_t bytes) {
  if (device_count() == 0)
    return error(StatusCode::unsupported, "cannot allocate {} bytes on cuda: no CUDA device found", bytes);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return error(StatusCode::out_of_memory,
                 "cannot allocate {} bytes on cuda: only {} of {} bytes are free; lower --ctx or "
                 "the batch size, or use a smaller model",
                 bytes, free_b, total_b);
  }
  if (e != cudaSuccess) return cuda_error(e, "cudaMalloc", bytes);
  return BufferPtr(std::make_shared<DeviceBuffer>(p, bytes));
}

Status copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  cudaMemcpyKind kind = cudaMemcpyDefault;
  if (dst_dev == Device::cuda && src_dev == Device::cpu) kind = cudaMemcpyHostToDevice;
  if (dst_dev == Device::cpu && src_dev == Device::cuda) kind = cudaMemcpyDeviceToHost;
  if (dst_dev == Device::cuda && src_dev == Device::cuda) kind = cudaMemcpyDeviceToDevice;
  // cudaMemcpy runs on the legacy default stream, which does not wait for non-blocking streams
  // (the CUDA backend's): finish all device work first, so a copy never sees half-written data.
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return cuda_error(e, "cudaDeviceSynchronize (before a copy)", n);
  e = cudaMemcpy(dst, src, n, kind);
  if (e != cudaSuccess) return cuda_error(e, "cudaMemcpy", n);
  return Status::ok();
}

Result<uint64_t> free_device_memory() {
  if (device_count() == 0) return error(StatusCode::unsupported, "no free cuda memory to report: no CUDA device found");
  size_t free_b = 0, total_b = 0;
  const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess)
    return error(StatusCode::io_error, "cudaMemGetInfo failed: {} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
  return static_cast<uint64_t>(free_b);
}

Result<BufferPtr> alloc_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(e, "cudaHostAlloc", bytes);
  }
  return BufferPtr(std::make_shared<PinnedBuffer>(p, bytes));
}

}  // namespace lithe::cuda_detail
