// Hessian preparation on the GPU (solvers.h): hessian.cpp's steps with cuSOLVER's 64-bit API.
// Row-major lower triangles are cuSOLVER's (column-major) upper ones.
#include <algorithm>

#include "solvers.h"

namespace lithe::compress::cuda {

Result<Elem> weight_elem(const Tensor& w, const char* what) {
  if (w.device() != Device::cuda || w.ndim() != 2 || !w.is_contiguous() || w.dim(0) <= 0 || w.dim(1) <= 0)
    return error(StatusCode::invalid_argument, "{}: expected a contiguous 2-D cuda matrix, got {}", what,
                 w.describe());
  switch (w.dtype()) {
    case DType::f32: return Elem::f32;
    case DType::f16: return Elem::f16;
    case DType::bf16: return Elem::bf16;
    default:
      return error(StatusCode::unsupported, "{}: the CUDA solvers take f32, f16 or bf16 weights, not {}", what,
                   w.describe());
  }
}

Status check_hessian_tensor(const Tensor& h, int64_t n) {
  if (h.device() != Device::cuda || h.dtype() != DType::f32 || h.ndim() != 2 || !h.is_contiguous() ||
      h.dim(0) != n || h.dim(1) != n)
    return error(StatusCode::invalid_argument, "Hessian: expected an f32 [{}][{}] cuda tensor, got {}", n, n,
                 h.describe());
  return Status::ok();
}

Result<DeviceDiagonal> fetch_diagonal(Context& cx, const Tensor& h) {
  const int64_t n = h.dim(0);
  LITHE_ASSIGN(float* d, cx.buf<float>(Buf::diag, static_cast<size_t>(n)));
  LITHE_ASSIGN(unsigned long long* bad, cx.buf<unsigned long long>(Buf::count, 1));
  LITHE_TRY(hessian_diagonal(h.data_as<float>(), n, d, bad, cx.stream()));
  std::vector<float> host(static_cast<size_t>(n));
  DeviceDiagonal out;
  LITHE_TRY(cx.download(host.data(), d, host.size() * sizeof(float)));
  LITHE_TRY(cx.download(&out.n_bad, bad, sizeof(out.n_bad)));
  out.diag.assign(host.begin(), host.end());
  return out;
}

Result<DevicePrepared> prepare_hessian_cuda(Context& cx, const Tensor& h, const DeviceDiagonal& dd,
                                            std::span<const int32_t> perm, const HessianOptions& opt) {
  const int64_t n = h.dim(0);
  LITHE_TRY(check_hessian_tensor(h, n));
  if (!perm.empty() && static_cast<int64_t>(perm.size()) != n)
    return error(StatusCode::invalid_argument, "permutation has {} entries, Hessian has {} columns", perm.size(), n);
  LITHE_TRY(check_damp_options(opt));
  DevicePrepared out;
  out.n = n;
  LITHE_ASSIGN(out.diagonal, inspect_hessian_diagonal(dd.diag));
  if (dd.n_bad > 0) return error(StatusCode::invalid_argument, "Hessian has a non-finite entry");

  const auto un = static_cast<size_t>(n);
  LITHE_ASSIGN(uint8_t* dead, cx.buf<uint8_t>(Buf::dead, un));
  LITHE_TRY(cx.upload(dead, out.diagonal.dead.data(), un));
  out.dead = dead;
  if (!perm.empty()) {
    LITHE_ASSIGN(int32_t* p, cx.buf<int32_t>(Buf::perm, un));
    LITHE_TRY(cx.upload(p, perm.data(), un * sizeof(int32_t)));
    out.perm = p;
  }
  LITHE_ASSIGN(double* m, cx.buf<double>(Buf::m, un * un));
  LITHE_ASSIGN(int* info, cx.buf<int>(Buf::info, 1));
  size_t potrf_dev = 0, potrf_host = 0, trtri_dev = 0, trtri_host = 0;
  LITHE_TRY(check(cusolverDnXpotrf_bufferSize(cx.solver(), cx.params(), CUBLAS_FILL_MODE_UPPER, n, CUDA_R_64F, m, n,
                                              CUDA_R_64F, &potrf_dev, &potrf_host),
                  "cusolverDnXpotrf_bufferSize"));
  LITHE_TRY(check(cusolverDnXtrtri_bufferSize(cx.solver(), CUBLAS_FILL_MODE_UPPER, CUBLAS_DIAG_NON_UNIT, n, CUDA_R_64F,
                                              m, n, &trtri_dev, &trtri_host),
                  "cusolverDnXtrtri_bufferSize"));
  const size_t dev_bytes = std::max<size_t>({potrf_dev, trtri_dev, 1});
  LITHE_ASSIGN(void* work, cx.buf<char>(Buf::solver_dev, dev_bytes));
  std::vector<char> host_work(std::max<size_t>({potrf_host, trtri_host, 1}));

  // P(H+λI)P = L Lᵀ (lower, row-major); retried with more dampening as hessian.cpp does.
  double frac = opt.percdamp;
  for (;;) {
    const double lambda = frac * out.diagonal.mean_diag;
    LITHE_TRY(build_reversed(h.data_as<float>(), n, out.perm, lambda, m, cx.stream()));
    LITHE_TRY(check(cusolverDnXpotrf(cx.solver(), cx.params(), CUBLAS_FILL_MODE_UPPER, n, CUDA_R_64F, m, n, CUDA_R_64F,
                                     work, dev_bytes, host_work.data(), host_work.size(), info),
                    "cusolverDnXpotrf"));
    int status = 0;
    LITHE_TRY(cx.download(&status, info, sizeof(int)));
    if (status < 0) return error(StatusCode::internal, "cusolverDnXpotrf: bad argument {}", -status);
    if (status == 0) {
      out.percdamp_used = frac;
      out.damp = lambda;
      break;
    }
    LITHE_ASSIGN(frac, next_percdamp(frac, n, out.diagonal.mean_diag, opt));
    ++out.damp_retries;
  }
  if (out.damp_retries > 0) warn_damp_raised(n, opt, out.percdamp_used);

  // U = P L^-1 P (hessian.cpp): invert L in place, then read it reversed into the upper factor.
  LITHE_TRY(check(cusolverDnXtrtri(cx.solver(), CUBLAS_FILL_MODE_UPPER, CUBLAS_DIAG_NON_UNIT, n, CUDA_R_64F, m, n, work,
                                   dev_bytes, host_work.data(), host_work.size(), info),
                  "cusolverDnXtrtri"));
  int status = 0;
  LITHE_TRY(cx.download(&status, info, sizeof(int)));
  if (status != 0) return error(StatusCode::internal, "cusolverDnXtrtri failed with info {}", status);
  LITHE_ASSIGN(out.u, cx.buf<float>(Buf::u, un * un));
  LITHE_TRY(extract_upper(m, n, out.u, cx.stream()));
  return out;
}

}  // namespace lithe::compress::cuda
