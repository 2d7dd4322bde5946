// Log-probability of one target token per logit row (launcher declared in cuda_ops.h): what a
// perplexity run needs, so only `rows` floats leave the GPU instead of rows x vocab.
// One block per row: block max, then the sum of exp(x - max) accumulated in double (as the host
// reference does), then out = x[target] - (log(sum) + max). A negative target gives 0.
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"

namespace lithe::cuda {
namespace {

constexpr int kThreads = 512;

__device__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads) logprob_kernel(const float* logits, int64_t vocab,
                                                           const int32_t* targets, float* out) {
  __shared__ float wmax[kThreads / 32];
  __shared__ double wsum[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i]);
  mx = detail::warp_max(mx);
  if (lane == 0) wmax[warp] = mx;
  __syncthreads();
  mx = wmax[0];
  for (int w = 1; w < n_warps; ++w) mx = fmaxf(mx, wmax[w]);
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) s += static_cast<double>(expf(row[i] - mx));
  s = warp_sum_d(s);
  if (lane == 0) wsum[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < n_warps; ++w) total += wsum[w];
    const int32_t t = targets[blockIdx.x];
    const float lse = static_cast<float>(log(total)) + mx;
    out[blockIdx.x] = (t < 0) ? 0.0f : row[t] - lse;
  }
}

}  // namespace

Status token_logprobs(const float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float* out,
                      Stream s) {
  if (vocab < 1 || vocab > INT32_MAX)
    return detail::bad_arg("token_logprobs: vocab must be in [1, " + std::to_string(INT32_MAX) + "], got " +
                           std::to_string(vocab));
  if (rows < 0 || rows > INT32_MAX)
    return detail::bad_arg("token_logprobs: rows must be in [0, " + std::to_string(INT32_MAX) + "], got " +
                           std::to_string(rows));
  if (rows == 0) return Status::ok();
  if (logits == nullptr || targets == nullptr || out == nullptr)
    return detail::bad_arg("token_logprobs: logits, targets and out must not be null");
  logprob_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(logits, vocab, targets, out);
  return detail::launched("logprob_kernel");
}

}  // namespace lithe::cuda
