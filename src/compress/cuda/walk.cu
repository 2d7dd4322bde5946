// The GPTQ / SparseGPT column walk of one lazy block on the GPU (kernels.h): a warp per row, the
// block's U[i1:i2, i1:i2] in shared memory. Lane l holds block columns l, l + 32, l + 64, l + 96
// in registers; column jb is broadcast from its lane, compressed by every lane alike, and its
// error applied to the later columns each lane holds. The arithmetic mirrors src/compress
// (quant_grid.h's find_params / quantize_code, column_walk.h's updates) operation by operation,
// with explicit round-to-nearest intrinsics so that no multiply-add is fused where the CPU code
// rounds twice.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels.h"

namespace lithe::compress::cuda {
namespace {

constexpr int kB = kWalkMaxBlock;
constexpr int kSlots = kB / 32;
constexpr int kWarps = 8;
constexpr unsigned kFull = 0xffffffffu;

struct Grid {
  float scale, zero;
};

// quant_grid.cpp's params_from_range after the sym / all-zero adjustments of find_params.
__device__ __forceinline__ Grid grid_from_range(float xmin, float xmax, bool sym, int maxq) {
  if (sym) {
    xmax = fmaxf(-xmin, xmax);
    xmin = -xmax;
  }
  if (xmin == 0.0f && xmax == 0.0f) {
    xmin = -1.0f;
    xmax = 1.0f;
  }
  Grid p;
  p.scale = __fdiv_rn(__fsub_rn(xmax, xmin), static_cast<float>(maxq));
  p.zero = sym ? static_cast<float>(maxq + 1) / 2.0f : rintf(__fdiv_rn(-xmin, p.scale));
  return p;
}

__device__ __forceinline__ int quant_code(float x, Grid p, int maxq) {
  float q = __fadd_rn(rintf(__fdiv_rn(x, p.scale)), p.zero);  // rintf: half to even
  if (!(q >= 0.0f)) q = 0.0f;
  if (q > static_cast<float>(maxq)) q = static_cast<float>(maxq);
  return static_cast<int>(q);
}

__device__ __forceinline__ float dequant(int code, Grid p) {
  return __fmul_rn(p.scale, __fsub_rn(static_cast<float>(code), p.zero));
}

// v[t] for a slot index known only at run time.
__device__ __forceinline__ float pick(const float (&v)[kSlots], int t) {
  float r = v[0];
#pragma unroll
  for (int i = 1; i < kSlots; ++i)
    if (t == i) r = v[i];
  return r;
}

// The grid of the dynamic group starting at block column jb (column j of n): min / max over its
// current values, from the registers when it ends in the block, else (it starts at the block's
// first column, nothing updated yet) from the working copy. Warp-collective.
__device__ Grid group_grid(const WalkArgs& a, const float (&v)[kSlots], const float* row, int jb, int64_t j,
                           int lane) {
  const int64_t len = a.group < a.n - j ? a.group : a.n - j;
  float mn = 0.0f, mx = 0.0f;
  if (jb + len <= a.bk) {
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int b = 32 * t + lane;
      if (b >= jb && b < jb + len) {
        mn = fminf(mn, v[t]);
        mx = fmaxf(mx, v[t]);
      }
    }
  } else {
    for (int64_t c = lane; c < len; c += 32) {
      const float x = row[j + c];
      mn = fminf(mn, x);
      mx = fmaxf(mx, x);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(kFull, mn, o));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
  }
  return grid_from_range(mn, mx, a.sym, a.maxq);
}

// n:m at the group starting at block column jb: the prune_n lowest scores v² / U_cc² of its
// prune_m columns (ties: lower column first) lose their keep bit and are marked in the mask.
// Warp-collective; returns the lane's new keep bits.
__device__ unsigned select_n_of_m(const WalkArgs& a, const float* us, const float (&v)[kSlots], unsigned keep,
                                  int64_t r, int jb, int lane) {
  const int pm = a.prune_m;
  float s[kSlots];
  int rank[kSlots];
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int b = 32 * t + lane;
    rank[t] = 0;
    s[t] = 0.0f;
    if (b >= jb && b < jb + pm) {
      const float d = us[b * kB + b];
      s[t] = __fdiv_rn(__fmul_rn(v[t], v[t]), __fmul_rn(d, d));
    }
  }
  for (int c = jb; c < jb + pm; ++c) {
    const float sc = __shfl_sync(kFull, pick(s, c >> 5), c & 31);
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int b = 32 * t + lane;
      if (sc < s[t] || (sc == s[t] && c < b)) ++rank[t];
    }
  }
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int b = 32 * t + lane;
    if (b >= jb && b < jb + pm && rank[t] < a.prune_n) {
      keep &= ~(1u << t);
      a.mask[r * a.n + a.i1 + b] = 0;
    }
  }
  return keep;
}

template <bool kQuant, bool kPrune>
__device__ void walk_row(const WalkArgs& a, const float* us, int64_t r, int lane) {
  const int bk = a.bk;
  const int64_t n = a.n, i1 = a.i1;
  const float* row = a.wk + r * n;
  float v[kSlots], e_own[kSlots];
  int code_own[kSlots];
  unsigned keep = (1u << kSlots) - 1;  // bit t: column 32 t + lane is kept
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int b = 32 * t + lane;
    v[t] = b < bk ? row[i1 + b] : 0.0f;
    e_own[t] = 0.0f;
    code_own[t] = 0;
    if (kPrune && a.prune_m == 0 && b < bk && a.mask[r * n + i1 + b] == 0) keep &= ~(1u << t);
  }
  // Group phases of the block's first column (32-bit modulo in the loop, not 64-bit).
  const int group = static_cast<int>(a.group), pm = a.prune_m;
  const int g_off = group > 0 ? static_cast<int>(i1 % group) : 0, m_off = pm > 0 ? static_cast<int>(i1 % pm) : 0;
  Grid p{1.0f, 0.0f};
  int64_t cur_g = -1;
  double loss = 0.0;
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    for (int l = 0; l < 32; ++l) {
      const int jb = 32 * t + l;
      if (jb >= bk) break;
      const int64_t j = i1 + jb;
      if (kPrune && pm > 0 && (m_off + jb) % pm == 0) keep = select_n_of_m(a, us, v, keep, r, jb, lane);
      if (kQuant) {
        if (group > 0) {
          const bool starts = (g_off + jb) % group == 0;
          if (starts || jb == 0) {
            const int64_t gi = r * a.n_groups + j / group;
            if (starts) {
              p = group_grid(a, v, row, jb, j, lane);
              if (lane == 0) {
                a.scales[gi] = p.scale;
                a.zeros[gi] = p.zero;
              }
            } else {  // a group begun in an earlier block (launch) goes on
              p = Grid{a.scales[gi], a.zeros[gi]};
            }
          }
        } else {
          const int64_t g = a.group_at ? a.group_at[j] : 0;
          if (g != cur_g) {
            cur_g = g;
            p = Grid{a.scales[r * a.n_groups + g], a.zeros[r * a.n_groups + g]};
          }
        }
      }
      const float x = __shfl_sync(kFull, v[t], l);
      float qv = x;
      int code = 0;
      if (kPrune) {
        const bool kept = ((__shfl_sync(kFull, keep, l) >> t) & 1u) != 0;
        qv = kept ? (kQuant ? dequant(quant_code(x, p, a.maxq), p) : x) : 0.0f;
        if (kQuant) code = quant_code(qv, p, a.maxq);
      } else if (kQuant) {
        code = quant_code(x, p, a.maxq);
        qv = dequant(code, p);
      }
      const float e = __fdiv_rn(__fsub_rn(x, qv), us[jb * kB + jb]);
      if (lane == l) {
        v[t] = qv;
        e_own[t] = e;
        code_own[t] = code;
      }
      loss += static_cast<double>(e) * e;
      if (e != 0.0f) {
#pragma unroll
        for (int t2 = t; t2 < kSlots; ++t2) {
          const int b = 32 * t2 + lane;
          if (b > jb) v[t2] = __fsub_rn(v[t2], __fmul_rn(e, us[jb * kB + b]));
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int b = 32 * t + lane;
    if (b < bk) {
      const int64_t k = i1 + b;
      const int64_t o = a.perm ? a.perm[k] : k;
      a.err[r * kB + b] = e_own[t];
      a.w_hat[r * n + o] = v[t];
      if (kQuant) a.codes[r * n + o] = static_cast<uint8_t>(code_own[t]);
    }
  }
  if (lane == 0) a.row_loss[r] += loss;
}

template <bool kQuant, bool kPrune>
__global__ void __launch_bounds__(kWarps * 32) walk_kernel(WalkArgs a) {
  extern __shared__ float us[];  // [kB][kB]: U[i1 + i][i1 + c], zero outside the block
  for (int i = threadIdx.x; i < kB * kB; i += blockDim.x) {
    const int rj = i / kB, c = i % kB;
    us[i] = (rj < a.bk && c < a.bk) ? a.u[(a.i1 + rj) * a.n + a.i1 + c] : 0.0f;
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < a.n_out;
       r += static_cast<int64_t>(gridDim.x) * kWarps)
    walk_row<kQuant, kPrune>(a, us, r, lane);
}

template <bool kQuant, bool kPrune>
Status launch(const WalkArgs& a, int sms, Stream s) {
  constexpr size_t smem = sizeof(float) * kB * kB;
  static const cudaError_t attr =
      cudaFuncSetAttribute(walk_kernel<kQuant, kPrune>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    return Status(StatusCode::internal, "column walk: cannot allow " + std::to_string(smem) +
                                            " bytes of shared memory: " + cudaGetErrorString(attr));
  const int64_t want = (a.n_out + kWarps - 1) / kWarps;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(want, static_cast<int64_t>(std::max(sms, 1)) * 8));
  walk_kernel<kQuant, kPrune><<<blocks, kWarps * 32, smem, s>>>(a);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status(StatusCode::internal, std::string("column walk launch failed: ") + cudaGetErrorString(e));
  return Status::ok();
}

}  // namespace

Status column_walk(const WalkArgs& a, int sms, Stream s) {
  if (a.n_out <= 0 || a.n <= 0 || a.bk <= 0 || a.bk > kB || a.i1 < 0 || a.i1 + a.bk > a.n)
    return Status(StatusCode::invalid_argument, "column walk: block [" + std::to_string(a.i1) + ", +" +
                                                    std::to_string(a.bk) + ") of a [" + std::to_string(a.n_out) +
                                                    "][" + std::to_string(a.n) + "] matrix (width <= 128)");
  if (a.wk == nullptr || a.u == nullptr || a.err == nullptr || a.w_hat == nullptr || a.row_loss == nullptr)
    return Status(StatusCode::invalid_argument, "column walk: missing buffers");
  const bool quant = a.codes != nullptr, prune = a.mask != nullptr;
  if (quant && (a.scales == nullptr || a.zeros == nullptr || a.maxq < 1 || a.n_groups < 1 || a.group < 0))
    return Status(StatusCode::invalid_argument, "column walk: bad grid arguments");
  if (prune && a.prune_m > 0 && (a.prune_n <= 0 || a.prune_n >= a.prune_m || a.prune_m > kB))
    return Status(StatusCode::invalid_argument,
                  "column walk: bad n:m " + std::to_string(a.prune_n) + ":" + std::to_string(a.prune_m));
  if (prune && a.perm != nullptr) return Status(StatusCode::invalid_argument, "column walk: pruning has no act-order");
  if (!quant && !prune) return Status(StatusCode::invalid_argument, "column walk: nothing to compress");
  if (quant && prune) return launch<true, true>(a, sms, s);
  if (quant) return launch<true, false>(a, sms, s);
  return launch<false, true>(a, sms, s);
}

}  // namespace lithe::compress::cuda
