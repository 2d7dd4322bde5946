// Handles, scratch memory and transfers shared by the CUDA solvers (private to src/compress/cuda):
// one blocking stream (so it also orders after the legacy-stream copies of Tensor::to), cuBLAS
// with the default math mode (no TF32), cuSOLVER, and grow-only device scratch buffers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <array>
#include <memory>

#include "lithe/core/tensor.h"

namespace lithe::compress::cuda {

Status check(cudaError_t e, const char* what);
Status check(cublasStatus_t s, const char* what);
Status check(cusolverStatus_t s, const char* what);

// Scratch buffers, one per use (reused by every call of the solvers).
enum class Buf {
  wk, err, codes, scales, zeros, loss, perm, group_at, dead, mask, prune, u, m, solver_dev, info, diag, count, a, y,
  dots, kCount
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> create();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }
  cusolverDnHandle_t solver() const { return solver_; }
  cusolverDnParams_t params() const { return params_; }
  int sms() const { return sms_; }

  // Waits for all work on the device, every stream's (the model's CUDA backend has its own).
  Status sync_device();
  // Waits for this context's stream.
  Status sync();
  // At least `count` elements of T in scratch buffer b (contents undefined).
  template <typename T>
  Result<T*> buf(Buf b, size_t count) {
    LITHE_ASSIGN(void* p, raw(b, count * sizeof(T)));
    return static_cast<T*>(p);
  }
  // Host -> device on the stream (the host memory must stay valid until the next sync()).
  Status upload(void* dst, const void* src, size_t bytes);
  // Device -> host, finished on return.
  Status download(void* dst, const void* src, size_t bytes);
  // A fresh device tensor (contents undefined).
  Result<Tensor> tensor(DType dtype, Shape shape) { return Tensor::empty(dtype, std::move(shape), Device::cuda); }

 private:
  Context() = default;
  Result<void*> raw(Buf b, size_t bytes);

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;
  cusolverDnParams_t params_ = nullptr;
  int sms_ = 1;
  std::array<Tensor, static_cast<size_t>(Buf::kCount)> bufs_;
};

}  // namespace lithe::compress::cuda
