// Group-quantized (gq) linear layers on the GPU: the packers that lay a canonical gq::Matrix
// (kernels/group_quant.h) out for a kernel, once, at load, and the launchers of those kernels.
// Host-only header (as cuda_ops.h): device pointers, a stream, no CUDA headers.
//
// Two kernel families, each with its own layout (PackedWeight::layout):
// - Marlin-class GEMM (marlin*.cu): f16 activations x int4 weights on tensor cores, group 128 or
//   per channel (group == n_in), sym or asym, act-order, optionally 2:4 sparse; any batch m >= 1.
//   The f32 activations are converted to f16 (and gathered by perm) into scratch first.
// - GEMV (gq_gemv.cu): batch m <= 16 on tensor cores, int2/int3/int4/int8, any group that is a
//   multiple of 32 or per channel, sym or asym, act-order, 2:4 sparse int4 on sparse tensor cores
//   (n_in and group multiples of 64; other 2:4 matrices are packed dense, PackedWeight::fmt.sparse24
//   says which); reads f32 activations directly; several
//   matrices per launch with the decode epilogues (swiglu, residual) and a folded RMSNorm; x is split
//   into two f16 halves (hi + lo: ~22 bits) for the MMAs, so results stay near f32. Its
//   layout can also be expanded to a dense f16 matrix (for cuBLAS at larger m, prefill).
// Every launcher computes y[m][n_out] = x[m][n_in] · Wᵀ (accumulate: y +=), x and y f32 device,
// row-major, contiguous; W as the reference gq::dequantize() defines it (original column order).
#pragma once

#include <cstdint>
#include <vector>

#include "lithe/core/packed.h"
#include "lithe/core/status.h"
#include "lithe/kernels/cuda_ops.h"
#include "lithe/kernels/group_quant.h"

struct CUstream_st;

namespace lithe::cuda {

using Stream = CUstream_st*;

// PackedWeight::layout values.
inline constexpr int kLayoutMarlin = 0x4d41524c;  // "MARL"
inline constexpr int kLayoutGemv = 0x47454d56;    // "GEMV"

// A packed matrix in host memory, ready to be copied to the device as one block: the kernels take
// the device copy's base pointer and find each section at desc.section[i].
struct PackedHost {
  PackedWeight desc;
  std::vector<uint8_t> bytes;
};

// ---- Marlin-class int4 GEMM (marlin*.cu) --------------------------------------------------------
// OK when the kernel can run m (its bits, group, shape); otherwise unsupported, naming the shape
// and what is required.
Status marlin_supports(const QuantFormat& f, int64_t n_out, int64_t n_in);
Result<PackedHost> pack_marlin(const gq::Matrix& m);
// Device scratch a call with m activation rows needs. The caller allocates it once, zeroed; the
// kernels leave the part that must stay zero (the reduction locks) zeroed.
int64_t marlin_scratch_bytes(const PackedWeight& w, int64_t m);
Status marlin_linear(const PackedWeight& w, const void* w_dev, const float* x, int64_t m, float* y, bool accumulate,
                     void* scratch, int64_t scratch_bytes, Stream s);

// ---- GEMV, batch <= 16 (gq_gemv.cu) ------------------------------------------------------------
Status gemv_supports(const QuantFormat& f, int64_t n_out, int64_t n_in);
Result<PackedHost> pack_gemv(const gq::Matrix& m);
inline constexpr int64_t kGemvMaxRows = 16;
// One matrix of a GEMV launch: a GEMV-layout weight (desc + device copy) and its output y [m][n_out].
struct GemvOut {
  const PackedWeight* w = nullptr;
  const void* w_dev = nullptr;
  float* y = nullptr;
};
// Rows of a GEMV work item: the rope_kv epilogue needs head_dim to divide it (a pair's rows meet).
inline constexpr int64_t kGemvItemRows = 128;
// Up to 3 GEMV-layout matrices of one format and n_in sharing x [m][n_in] (m <= kGemvMaxRows), in
// one launch, with the matvec epilogues (cuda_ops.h) store, accumulate, swiglu (gate, up: equal
// n_out, no act-order; y_1 unused) or rope_kv (q, k, v and `rope`, as matvec's; head_dim dividing
// kGemvItemRows) and optionally an RMSNorm of x folded in (norm.w: f32 [n_in]).
// The k dimension is split over several blocks per 16-row tile, whose partial sums meet in
// `scratch` (gemv_scratch_bytes; zeroed once by the caller, left all zero by every launch, so one
// buffer serves launches of every shape): how many depends only on
// the shapes and the device, never on m, so row i of y is the same bits whatever m is. On sm_90,
// where the blocks of every work item fit on the device at once as one thread-block cluster (with
// room to spare), they add their sums in shared memory instead (the same bits).
int64_t gemv_scratch_bytes(const GemvOut* outs, int n_outs, Epilogue e);
// The cluster size a gemv launch of these matrices at batch m uses for its k-split sums on the
// current device: 0 for scratch sums (or no split), else the blocks per item (for tests and
// benchmarks; LITHE_GEMV_CLUSTER=0 turns cluster sums off). For a launch without a folded norm: with
// one, blocks at m <= 8 take up to 8 KiB more shared memory (its weights), which may fit fewer.
int gemv_cluster_size(const GemvOut* outs, int n_outs, int64_t m, Epilogue e);
// Deferred residual sums (a decode step's o and down projections). An accumulate launch with
// `add` leaves y alone: each block adds its k-split partial sums, in 2^-32 fixed point, into the
// int64 accumulator add [m][n_out] (red.add: integer sums, so the same bits whatever order the
// blocks come in, and no block waits for the others). A later launch with a folded norm reading
// that residual as x passes `in` = the accumulator and reads x + in. The next accumulate launch
// passes `fold` = that accumulator (and a zeroed other one as `add`): its blocks first add it into
// its own y ([m][n_out], the residual) and zero it. gemv_fold does the same alone (y += acc, acc =
// 0) where anything else is to read y. A partial sum outside (-2^20, 2^20) (or NaN) poisons the
// accumulator: the value read back is NaN.
struct GemvResidual {
  int64_t* add = nullptr;
  int64_t* fold = nullptr;
  const int64_t* in = nullptr;
};
inline constexpr int kGemvResidualMaxSplit = 31;  // the most blocks a poisoned sum can take
// The batch sizes where deferring pays: every block of a reading launch reads its range of x + acc
// at once (12 bytes a value instead of 4), which at m = 8 and 16 cost more than the sums it saves
// (an H100, bench/RESULTS.md, twenty-fifth session).
inline constexpr int64_t kGemvResidualMaxRows = 1;
// x from a launch that flags its parts as they land (AttentionParams::ready): columns
// [j * cols, (j + 1) * cols) of x are written once flags[j] != 0. The GEMV's blocks then wait for
// the flags of their columns instead of griddepcontrol.wait, so the launch must be the flagging
// launch's successor and read nothing else that the flags do not order (m = 1).
struct GemvReady {
  const unsigned* flags = nullptr;
  int64_t cols = 0;
};
Status gemv(const GemvOut* outs, int n_outs, const float* x, int64_t m, Epilogue e, void* scratch,
            int64_t scratch_bytes, Stream s, const MatvecNorm& norm = {}, const MatvecRope* rope = nullptr,
            const GemvResidual* res = nullptr, const GemvReady* ready = nullptr);
// y[n] += acc[n] (fixed point, GemvResidual), acc[n] = 0.
Status gemv_fold(float* y, int64_t* acc, int64_t n, Stream s);
// One matrix, store or accumulate.
Status gemv_linear(const PackedWeight& w, const void* w_dev, const float* x, int64_t m, float* y, bool accumulate,
                   void* scratch, int64_t scratch_bytes, Stream s);
// The dense f16 matrix [n_out][n_in] (original column order) of a GEMV-layout weight, into `out`.
Status gemv_dequantize_f16(const PackedWeight& w, const void* w_dev, void* out, Stream s);

}  // namespace lithe::cuda
