// The CUDA solvers' handles, scratch and transfers (context.h).
#include "context.h"

#include <algorithm>

namespace lithe::compress::cuda {

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return error(StatusCode::internal, "{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

Status check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return error(StatusCode::internal, "{} failed: {}", what, cublasGetStatusString(s));
}

Status check(cusolverStatus_t s, const char* what) {
  if (s == CUSOLVER_STATUS_SUCCESS) return Status::ok();
  return error(StatusCode::internal, "{} failed: cusolver status {}", what, static_cast<int>(s));
}

Result<std::unique_ptr<Context>> Context::create() {
  std::unique_ptr<Context> c(new Context());
  LITHE_TRY(check(cudaStreamCreate(&c->stream_), "cudaStreamCreate"));
  LITHE_TRY(check(cublasCreate(&c->blas_), "cublasCreate"));
  LITHE_TRY(check(cublasSetStream(c->blas_, c->stream_), "cublasSetStream"));
  LITHE_TRY(check(cublasSetMathMode(c->blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  LITHE_TRY(check(cusolverDnCreate(&c->solver_), "cusolverDnCreate"));
  LITHE_TRY(check(cusolverDnSetStream(c->solver_, c->stream_), "cusolverDnSetStream"));
  LITHE_TRY(check(cusolverDnCreateParams(&c->params_), "cusolverDnCreateParams"));
  int dev = 0;
  LITHE_TRY(check(cudaGetDevice(&dev), "cudaGetDevice"));
  LITHE_TRY(check(cudaDeviceGetAttribute(&c->sms_, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute"));
  return c;
}

Context::~Context() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (Tensor& t : bufs_) t = Tensor();
  if (params_ != nullptr) cusolverDnDestroyParams(params_);
  if (solver_ != nullptr) cusolverDnDestroy(solver_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status Context::sync_device() { return check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
Status Context::sync() { return check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

Result<void*> Context::raw(Buf b, size_t bytes) {
  Tensor& t = bufs_[static_cast<size_t>(b)];
  if (!t.defined() || t.nbytes() < bytes) {
    if (t.defined()) {  // the old buffer may still be in use by queued work
      LITHE_TRY(sync());
      t = Tensor();
    }
    LITHE_ASSIGN(t, Tensor::empty(DType::u8, {static_cast<int64_t>(std::max<size_t>(bytes, 256))}, Device::cuda));
  }
  return t.data();
}

Status Context::upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (to device)");
}

Status Context::download(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  LITHE_TRY(check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (to host)"));
  return sync();
}

}  // namespace lithe::compress::cuda
