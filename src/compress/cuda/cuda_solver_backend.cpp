// The CUDA SolverBackend (solver_backend.h): Hessians accumulated with cuBLAS SSYRK, the GPU
// solvers of solve.cpp, reconstruction errors with one SGEMM, weights written back on the device.
// Every entry point first waits for all device work (the model's backend stream included) and
// returns with its own work finished.
#include <limits>

#include "lithe/kernels/convert.h"
#include "solvers.h"

namespace lithe::compress {
namespace {

using cuda::Buf;
using cuda::check;

Status check_f32_matrix(const Tensor& t, const char* what) {
  if (t.device() != Device::cuda || t.dtype() != DType::f32 || t.ndim() != 2 || !t.is_contiguous())
    return error(StatusCode::invalid_argument, "{}: expected a contiguous f32 cuda matrix, got {}", what,
                 t.describe());
  return Status::ok();
}

class CudaSolverBackend final : public SolverBackend {
 public:
  explicit CudaSolverBackend(std::unique_ptr<cuda::Context> cx) : cx_(std::move(cx)) {}
  Device device() const override { return Device::cuda; }
  Status synchronize() override { return cx_->sync_device(); }

  Result<Tensor> new_hessian(int64_t n) override {
    if (n <= 0) return error(StatusCode::invalid_argument, "Hessian size {} must be positive", n);
    LITHE_ASSIGN(Tensor h, cx_->tensor(DType::f32, {n, n}));
    LITHE_TRY(check(cudaMemsetAsync(h.data(), 0, h.nbytes(), cx_->stream()), "cudaMemsetAsync"));
    LITHE_TRY(cx_->sync());
    return h;
  }

  Status accumulate_hessian(Tensor& h, int64_t count, const Tensor& x, int64_t m) override {
    const int64_t n = h.dim(0);
    LITHE_TRY(cuda::check_hessian_tensor(h, n));
    LITHE_TRY(check_f32_matrix(x, "Hessian input"));
    if (x.dim(1) != n || m <= 0 || x.dim(0) < m || count < 0)
      return error(StatusCode::invalid_argument, "Hessian input: {} rows of {} features for a [{}][{}] Hessian ({})",
                   m, x.dim(1), n, n, x.describe());
    LITHE_TRY(cx_->sync_device());
    // Column-major, x is xᵀ [n][m]: H = beta H + alpha x xᵀ on the upper (row-major lower) triangle.
    const auto c = static_cast<double>(count);
    const auto alpha = static_cast<float>(2.0 / (c + 1.0)), beta = static_cast<float>(c / (c + 1.0));
    LITHE_TRY(check(cublasSsyrk(cx_->blas(), CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), &alpha, x.data_as<float>(), static_cast<int>(n), &beta,
                                h.data_as<float>(), static_cast<int>(n)),
                    "cublasSsyrk"));
    return cx_->sync();
  }

  Status finish_hessian(Tensor& h) override {
    LITHE_TRY(cuda::check_hessian_tensor(h, h.dim(0)));
    LITHE_TRY(cx_->sync_device());
    LITHE_TRY(cuda::mirror_lower(h.data_as<float>(), h.dim(0), cx_->stream()));
    return cx_->sync();
  }

  Result<SolvedLinear> gptq(const Tensor& w, const Tensor& h, const GptqOptions& opt) override {
    auto r = cuda::gptq_cuda(*cx_, w, h, opt);
    LITHE_TRY(cx_->sync());
    return r;
  }

  Result<SolvedLinear> sparsegpt(const Tensor& w, const Tensor& h, const SparseGptOptions& opt) override {
    auto r = cuda::sparsegpt_cuda(*cx_, w, h, opt);
    LITHE_TRY(cx_->sync());
    return r;
  }

  Result<double> reconstruction_error(const Tensor& w, const Tensor& w_hat, const Tensor& h) override {
    LITHE_ASSIGN(cuda::Elem et, cuda::weight_elem(w, "reconstruction_error weight"));
    LITHE_TRY(check_f32_matrix(w_hat, "reconstruction_error w_hat"));
    const int64_t n_out = w.dim(0), n = w.dim(1);
    if (w_hat.dim(0) != n_out || w_hat.dim(1) != n)
      return error(StatusCode::invalid_argument, "reconstruction_error: {} and {} differ in shape", w.describe(),
                   w_hat.describe());
    LITHE_TRY(cuda::check_hessian_tensor(h, n));
    LITHE_TRY(cx_->sync_device());
    // a = [W - Ŵ; W] (2 n_out rows), y = a H (column-major: yᵀ = H aᵀ, H symmetric), row dots.
    const auto cells = static_cast<size_t>(n_out * n);
    LITHE_ASSIGN(float* a, cx_->buf<float>(Buf::a, 2 * cells));
    LITHE_ASSIGN(float* y, cx_->buf<float>(Buf::y, 2 * cells));
    LITHE_ASSIGN(double* dots, cx_->buf<double>(Buf::dots, static_cast<size_t>(2 * n_out)));
    LITHE_TRY(cuda::stack_diff(w.data(), et, w_hat.data_as<float>(), n_out * n, a, cx_->stream()));
    const float one = 1.0f, zero = 0.0f;
    LITHE_TRY(check(cublasSgemm(cx_->blas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(2 * n_out),
                                static_cast<int>(n), &one, h.data_as<float>(), static_cast<int>(n), a,
                                static_cast<int>(n), &zero, y, static_cast<int>(n)),
                    "cublasSgemm (reconstruction error)"));
    LITHE_TRY(cuda::row_dots(a, y, 2 * n_out, n, dots, cx_->stream()));
    std::vector<double> host(static_cast<size_t>(2 * n_out));
    LITHE_TRY(cx_->download(host.data(), dots, host.size() * sizeof(double)));
    double num = 0, den = 0;
    for (int64_t r = 0; r < n_out; ++r) {
      num += host[static_cast<size_t>(r)];
      den += host[static_cast<size_t>(n_out + r)];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    return num / den;
  }

  Result<int64_t> count_zeros(const Tensor& w) override {
    LITHE_TRY(check_f32_matrix(w, "count_zeros"));
    LITHE_TRY(cx_->sync_device());
    LITHE_ASSIGN(unsigned long long* d, cx_->buf<unsigned long long>(Buf::count, 1));
    LITHE_TRY(cuda::count_zeros(w.data_as<float>(), w.numel(), d, cx_->stream()));
    unsigned long long z = 0;
    LITHE_TRY(cx_->download(&z, d, sizeof(z)));
    return static_cast<int64_t>(z);
  }

  Status store_weight(const Tensor& w_hat, Tensor& dst) override {
    LITHE_TRY(check_f32_matrix(w_hat, "store_weight source"));
    LITHE_ASSIGN(cuda::Elem et, cuda::weight_elem(dst, "store_weight destination"));
    if (dst.shape() != w_hat.shape())
      return error(StatusCode::invalid_argument, "store_weight: {} into {}", w_hat.describe(), dst.describe());
    LITHE_TRY(cx_->sync_device());
    LITHE_TRY(cuda::store_elems(w_hat.data_as<float>(), w_hat.numel(), dst.data(), et, cx_->stream()));
    return cx_->sync();
  }

  Status copy(const Tensor& src, Tensor& dst) override {
    LITHE_TRY(check_f32_matrix(src, "copy source"));
    LITHE_TRY(check_f32_matrix(dst, "copy destination"));
    if (src.dim(1) != dst.dim(1) || src.dim(0) > dst.dim(0))
      return error(StatusCode::invalid_argument, "copy: {} does not fit into {}", src.describe(), dst.describe());
    LITHE_TRY(cx_->sync_device());
    LITHE_TRY(check(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, cx_->stream()),
                    "cudaMemcpyAsync (device to device)"));
    return cx_->sync();
  }

  Result<Tensor> to_host_f32(const Tensor& t) override {
    LITHE_TRY(cx_->sync_device());
    LITHE_ASSIGN(Tensor host, t.to(Device::cpu));
    if (host.dtype() == DType::f32) return host;
    return convert(host, DType::f32);
  }

  Result<Tensor> from_host_f32(const Tensor& host) override {
    if (host.device() != Device::cpu || host.dtype() != DType::f32)
      return error(StatusCode::invalid_argument, "from_host_f32: expected an f32 host tensor, got {}",
                   host.describe());
    LITHE_TRY(cx_->sync_device());
    LITHE_ASSIGN(Tensor d, host.to(Device::cuda));
    LITHE_TRY(cx_->sync_device());
    return d;
  }

 private:
  std::unique_ptr<cuda::Context> cx_;
};

}  // namespace

Result<std::unique_ptr<SolverBackend>> make_cuda_solver_backend() {
  if (!cuda_available())
    return error(StatusCode::unsupported, "--device cuda: no CUDA device is visible (check nvidia-smi / "
                 "CUDA_VISIBLE_DEVICES), or use --device cpu");
  LITHE_ASSIGN(std::unique_ptr<cuda::Context> cx, cuda::Context::create());
  return std::unique_ptr<SolverBackend>(new CudaSolverBackend(std::move(cx)));
}

}  // namespace lithe::compress
