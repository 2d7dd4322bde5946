// The CPU SolverBackend (host tensors, H in f64: the solvers of gptq.h / sparsegpt.h as they
// are), the host RTN / magnitude paths every backend shares, and the factory.
#include "lithe/compress/solver_backend.h"

#include <algorithm>
#include <cstring>

#include "linalg.h"

namespace lithe::compress {
namespace {

Status check_host(const Tensor& t, DType dtype, const char* what) {
  if (t.device() != Device::cpu || t.dtype() != dtype || t.ndim() != 2 || !t.is_contiguous())
    return error(StatusCode::invalid_argument, "{}: expected a contiguous {} host matrix, got {}", what,
                 dtype_name(dtype), t.describe());
  return Status::ok();
}

std::span<const float> floats(const Tensor& t) { return {t.data_as<float>(), static_cast<size_t>(t.numel())}; }

Result<Tensor> host_matrix(const std::vector<float>& v, int64_t n_out, int64_t n_in) {
  LITHE_ASSIGN(Tensor t, Tensor::empty(DType::f32, {n_out, n_in}));
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

// The loss and Hessian-preparation facts every Hessian solver's result carries.
template <typename R>
void take_solver_stats(const R& r, SolvedLinear& s) {
  s.loss = r.loss;
  s.n_dead = r.n_dead;
  s.percdamp_used = r.percdamp_used;
  s.damp = r.damp;
  s.damp_retries = r.damp_retries;
}

class CpuSolverBackend final : public SolverBackend {
 public:
  Device device() const override { return Device::cpu; }
  Status synchronize() override { return Status::ok(); }

  Result<Tensor> new_hessian(int64_t n) override {
    if (n <= 0) return error(StatusCode::invalid_argument, "Hessian size {} must be positive", n);
    return Tensor::empty(DType::f64, {n, n});
  }

  Status accumulate_hessian(Tensor& h, int64_t count, const Tensor& x, int64_t m) override {
    LITHE_TRY(check_host(h, DType::f64, "Hessian"));
    LITHE_TRY(check_host(x, DType::f32, "Hessian input"));
    const int64_t n = h.dim(0);
    if (h.dim(1) != n || x.dim(1) != n || m <= 0 || x.dim(0) < m || count < 0)
      return error(StatusCode::invalid_argument, "Hessian input: {} rows of {} features for a {} Hessian", m,
                   x.dim(1), h.describe());
    g_.resize(static_cast<size_t>(n * n));
    detail::gram_f(n, m, x.data_as<float>(), g_.data());  // XᵀX of this window, f32 over its m tokens
    const double keep = static_cast<double>(count) / static_cast<double>(count + 1);
    const double add = 2.0 / static_cast<double>(count + 1);
    double* hd = h.data_as<double>();
    for (size_t i = 0; i < g_.size(); ++i) hd[i] = hd[i] * keep + add * static_cast<double>(g_[i]);
    return Status::ok();
  }

  Status finish_hessian(Tensor& h) override { return check_host(h, DType::f64, "Hessian"); }

  Result<SolvedLinear> gptq(const Tensor& w, const Tensor& h, const GptqOptions& opt) override {
    LITHE_TRY(check_inputs(w, h));
    LITHE_ASSIGN(GptqResult r, compress::gptq(floats(w), w.dim(0), w.dim(1), doubles(h), opt));
    SolvedLinear s;
    LITHE_ASSIGN(s.w_hat, host_matrix(r.w_hat, w.dim(0), w.dim(1)));
    s.q = std::move(r.q);
    s.perm = std::move(r.perm);
    take_solver_stats(r, s);
    return s;
  }

  Result<SolvedLinear> sparsegpt(const Tensor& w, const Tensor& h, const SparseGptOptions& opt) override {
    LITHE_TRY(check_inputs(w, h));
    LITHE_ASSIGN(SparseGptResult r, compress::sparsegpt(floats(w), w.dim(0), w.dim(1), doubles(h), opt));
    SolvedLinear s;
    LITHE_ASSIGN(s.w_hat, host_matrix(r.w, w.dim(0), w.dim(1)));
    s.q = std::move(r.q);
    s.mask = std::move(r.mask);
    take_solver_stats(r, s);
    return s;
  }

  Result<double> reconstruction_error(const Tensor& w, const Tensor& w_hat, const Tensor& h) override {
    LITHE_TRY(check_inputs(w, h));
    LITHE_TRY(check_host(w_hat, DType::f32, "reconstruction_error w_hat"));
    return compress::reconstruction_error(floats(w), floats(w_hat), doubles(h), w.dim(0), w.dim(1));
  }

  Result<int64_t> count_zeros(const Tensor& w) override {
    LITHE_TRY(check_host(w, DType::f32, "count_zeros"));
    const std::span<const float> v = floats(w);
    return static_cast<int64_t>(std::count(v.begin(), v.end(), 0.0f));
  }

  Status store_weight(const Tensor& w_hat, Tensor& dst) override {
    LITHE_TRY(check_host(w_hat, DType::f32, "store_weight source"));
    if (dst.shape() != w_hat.shape() || dst.dtype() != DType::f32 || dst.device() != Device::cpu)
      return error(StatusCode::invalid_argument, "store_weight: {} into {}", w_hat.describe(), dst.describe());
    if (dst.buffer()->writable()) {  // the dequantized copy the model owns: overwrite it
      std::memcpy(dst.data(), w_hat.data(), w_hat.nbytes());
    } else {  // a read-only view of the file (stored f32): the new tensor takes its place
      dst = w_hat;
    }
    return Status::ok();
  }

  Status copy(const Tensor& src, Tensor& dst) override {
    LITHE_TRY(check_host(src, DType::f32, "copy source"));
    LITHE_TRY(check_host(dst, DType::f32, "copy destination"));
    if (src.dim(1) != dst.dim(1) || src.dim(0) > dst.dim(0))
      return error(StatusCode::invalid_argument, "copy: {} does not fit into {}", src.describe(), dst.describe());
    std::memcpy(dst.data(), src.data(), src.nbytes());
    return Status::ok();
  }

  Result<Tensor> to_host_f32(const Tensor& t) override {
    LITHE_TRY(check_host(t, DType::f32, "to_host_f32"));
    return t;
  }
  Result<Tensor> from_host_f32(const Tensor& host) override {
    LITHE_TRY(check_host(host, DType::f32, "from_host_f32"));
    return host;
  }

 private:
  static std::span<const double> doubles(const Tensor& h) {
    return {h.data_as<double>(), static_cast<size_t>(h.numel())};
  }
  static Status check_inputs(const Tensor& w, const Tensor& h) {
    LITHE_TRY(check_host(w, DType::f32, "weight"));
    LITHE_TRY(check_host(h, DType::f64, "Hessian"));
    if (h.dim(0) != w.dim(1) || h.dim(1) != w.dim(1))
      return error(StatusCode::invalid_argument, "Hessian {} does not fit the weight {}", h.describe(), w.describe());
    return Status::ok();
  }

  std::vector<float> g_;  // one window's XᵀX
};

}  // namespace

Result<SolvedLinear> SolverBackend::rtn(const Tensor& w, const QuantGrid& grid) {
  LITHE_ASSIGN(Tensor hw, to_host_f32(w));
  const int64_t n_out = hw.dim(0), n_in = hw.dim(1);
  LITHE_ASSIGN(QuantizedMatrix q, compress::rtn(floats(hw), n_out, n_in, grid));
  SolvedLinear s;
  LITHE_ASSIGN(Tensor w_hat, host_matrix(dequantize(q), n_out, n_in));
  LITHE_ASSIGN(s.w_hat, from_host_f32(w_hat));
  s.q = std::move(q);
  return s;
}

Result<SolvedLinear> SolverBackend::magnitude(const Tensor& w, const MagnitudeOptions& opt) {
  LITHE_ASSIGN(Tensor hw, to_host_f32(w));
  const int64_t n_out = hw.dim(0), n_in = hw.dim(1);
  LITHE_ASSIGN(PruneResult r, prune_magnitude(floats(hw), n_out, n_in, opt));
  SolvedLinear s;
  LITHE_ASSIGN(Tensor w_hat, host_matrix(r.w, n_out, n_in));
  LITHE_ASSIGN(s.w_hat, from_host_f32(w_hat));
  s.mask = std::move(r.mask);
  return s;
}

std::unique_ptr<SolverBackend> make_cpu_solver_backend() { return std::make_unique<CpuSolverBackend>(); }

Result<std::unique_ptr<SolverBackend>> make_solver_backend(Device device) {
  if (device == Device::cpu) return make_cpu_solver_backend();
  return make_cuda_solver_backend();
}

}  // namespace lithe::compress
