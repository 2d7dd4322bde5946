// The CUDA solvers over a Context (private to src/compress/cuda): hessian.h's preparation on
// cuSOLVER (prepare.cpp) and GPTQ / SparseGPT with their column walk on the GPU (solve.cpp).
#pragma once

#include <span>
#include <vector>

#include "context.h"
#include "kernels.h"
#include "lithe/compress/hessian.h"
#include "lithe/compress/solver_backend.h"

namespace lithe::compress::cuda {

// The element type of a weight: a contiguous 2-D cuda tensor of f32, f16 or bf16.
Result<Elem> weight_elem(const Tensor& w, const char* what);
// OK when h is a contiguous f32 [n][n] cuda tensor.
Status check_hessian_tensor(const Tensor& h, int64_t n);

// H's diagonal on the host, and how many entries of H are not finite.
struct DeviceDiagonal {
  std::vector<double> diag;
  unsigned long long n_bad = 0;
};
Result<DeviceDiagonal> fetch_diagonal(Context& cx, const Tensor& h);

// prepare_hessian (hessian.h) on the device: the same checks, dead inputs, dampening retries and
// U = upper Cholesky factor of (H + λI)^-1 in solver order, through one f64 Cholesky (cuSOLVER
// potrf) of the reversed permuted matrix and one triangular inverse (trtri), as hessian.cpp.
struct DevicePrepared {
  int64_t n = 0;
  float* u = nullptr;               // [n][n] f32 in the context's Buf::u
  const uint8_t* dead = nullptr;    // [n] on the device (Buf::dead), original order
  const int32_t* perm = nullptr;    // [n] on the device (Buf::perm), null without a permutation
  HessianDiagonal diagonal;         // dead inputs (host) and the mean diagonal
  double percdamp_used = 0, damp = 0;
  int damp_retries = 0;
};
Result<DevicePrepared> prepare_hessian_cuda(Context& cx, const Tensor& h, const DeviceDiagonal& dd,
                                            std::span<const int32_t> perm, const HessianOptions& opt);

// gptq() / sparsegpt() of gptq.h / sparsegpt.h with w and h on the device. Not on the GPU (an
// unsupported error says so): the clipping search with dynamic groups; unstructured SparseGPT
// with a lazy block over kWalkMaxBlock or quantization groups that straddle its blocks.
Result<SolvedLinear> gptq_cuda(Context& cx, const Tensor& w, const Tensor& h, const GptqOptions& opt);
Result<SolvedLinear> sparsegpt_cuda(Context& cx, const Tensor& w, const Tensor& h, const SparseGptOptions& opt);

}  // namespace lithe::compress::cuda
