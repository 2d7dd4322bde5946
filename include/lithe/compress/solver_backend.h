// Where the calibration pipeline's numeric work runs: the seam between quantize/pipeline.cpp and
// the CPU or GPU solvers.
//
// A SolverBackend works on tensors on its device(): Hessian accumulation over calibration
// windows, GPTQ / SparseGPT (same semantics on every backend: gptq.h, sparsegpt.h), RTN and
// magnitude pruning, the reconstruction error, and writing a compressed weight back into a model
// weight. Implementations:
//   cpu  (solver_backend.cpp):       host tensors; H in f64; the solvers of gptq.h / sparsegpt.h.
//   cuda (compress/cuda/, built only with CUDA): device tensors; H in f32 accumulated with cuBLAS
//        SSYRK (no TF32); Hessian preparation with cuSOLVER (f64 Cholesky + triangular inverse);
//        the column walks as CUDA kernels with the lazy updates as SGEMMs. RTN, magnitude pruning
//        and GPTQ/SparseGPT grids found up front (per-row or static groups, and the clipping
//        search) run on the host through quant_grid.h's find_params. Every call is ordered after
//        all earlier work on the device (it synchronizes the device first, so it is safe to call
//        between ops of the model's CUDA backend, which runs on its own stream) and has finished
//        its device work when it returns.
// Weights may be f32 (cpu, cuda) or f16 / bf16 (cuda): solvers work on an f32 copy; store_weight
// writes back in the destination's dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lithe/compress/gptq.h"
#include "lithe/compress/rtn.h"
#include "lithe/compress/sparsegpt.h"
#include "lithe/core/tensor.h"

namespace lithe::compress {

// One compressed linear. Host fields like GptqResult / SparseGptResult; the weights on the device.
struct SolvedLinear {
  std::optional<QuantizedMatrix> q;  // quantized methods (host)
  std::vector<uint8_t> mask;         // pruning methods: [n_out][n_in], 1 = kept (host)
  Tensor w_hat;                      // f32 [n_out][n_in] on the backend's device: dequantized / pruned W
  double loss = 0;                   // the solver's own loss (gptq, sparsegpt)
  std::vector<int32_t> perm;         // gptq act-order
  int64_t n_dead = 0;
  double percdamp_used = 0, damp = 0;
  int damp_retries = 0;
};

class SolverBackend {
 public:
  virtual ~SolverBackend() = default;
  virtual Device device() const = 0;
  // Waits for all work on device(), every stream's (cpu: nothing to wait for).
  virtual Status synchronize() = 0;

  // ---- Hessians: H [n][n] on device() (cpu: f64, cuda: f32) ----
  virtual Result<Tensor> new_hessian(int64_t n) = 0;
  // One window of `count` seen so far: H = H * c/(c+1) + 2/(c+1) * xᵀx over the first m rows of
  // x (f32 [>= m, n] contiguous on device()), the reference's running average.
  virtual Status accumulate_hessian(Tensor& h, int64_t count, const Tensor& x, int64_t m) = 0;
  // After the last window (cuda: mirrors the triangle SSYRK wrote).
  virtual Status finish_hessian(Tensor& h) = 0;

  // ---- solvers: w [n_out][n_in] on device(); h from new_hessian ----
  virtual Result<SolvedLinear> gptq(const Tensor& w, const Tensor& h, const GptqOptions& opt) = 0;
  virtual Result<SolvedLinear> sparsegpt(const Tensor& w, const Tensor& h, const SparseGptOptions& opt) = 0;
  // No Hessian; on the host for every backend (w copied there and the result back).
  Result<SolvedLinear> rtn(const Tensor& w, const QuantGrid& grid);
  Result<SolvedLinear> magnitude(const Tensor& w, const MagnitudeOptions& opt);

  // tr((W-Ŵ) H (W-Ŵ)ᵀ) / tr(W H Wᵀ) (hessian.h's reconstruction_error); w_hat f32.
  virtual Result<double> reconstruction_error(const Tensor& w, const Tensor& w_hat, const Tensor& h) = 0;
  // Zero entries of an f32 matrix on device().
  virtual Result<int64_t> count_zeros(const Tensor& w) = 0;
  // dst (a model's weight: contiguous, on device(), any float dtype) = w_hat (f32, same shape)
  // in dst's dtype. On the cpu a read-only dst (a view of the file) is replaced by a new tensor.
  virtual Status store_weight(const Tensor& w_hat, Tensor& dst) = 0;
  // The first rows(src) rows of dst = src (both f32 contiguous on device(), same width).
  virtual Status copy(const Tensor& src, Tensor& dst) = 0;
  // A host copy of t as f32, and an f32 tensor on device() from host values.
  virtual Result<Tensor> to_host_f32(const Tensor& t) = 0;
  virtual Result<Tensor> from_host_f32(const Tensor& host) = 0;
};

std::unique_ptr<SolverBackend> make_cpu_solver_backend();
// The CUDA solvers on device 0; unsupported (naming the reason) when built without CUDA or when no
// device is present.
Result<std::unique_ptr<SolverBackend>> make_cuda_solver_backend();
Result<std::unique_ptr<SolverBackend>> make_solver_backend(Device device);

}  // namespace lithe::compress
