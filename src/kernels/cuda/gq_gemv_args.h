// The GEMV kernels' launch arguments and the launchers that gq_gemv.cu (host side) calls; the
// kernels themselves are in gq_gemv_grid.cuh and gq_gemv_dequant.cuh (device code they share:
// gq_gemv_math.cuh), compiled once per bit width (gq_gemv_bits.cu.in) so that they build in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gq_gemv_layout.h"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda::gemv_impl {

namespace L = gemv_layout;

constexpr int kWarps = 8;  // warps of a block
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxM = 16;
constexpr int kRows = L::kTileRows;
constexpr int kItemRows = kWarps * kRows;  // rows of an item (a block's tiles)
static_assert(kItemRows == kGemvItemRows, "cuda_gq.h names the item's rows");
static_assert(kRows == 16, "one MMA's rows per tile");
static_assert(kMaxM == kGemvMaxRows, "scratch is laid out for kGemvMaxRows rows of x");
// Chunk loads per lane per batch (U = loads / R chunks of each tile): 2 KiB per warp (int2/int3:
// 1 KiB, the same 256 columns; their 4 records per chunk would spill), twice that in flight while a
// batch is multiplied and the next one loads.
constexpr int loads_of(int bits) { return bits == 2 || bits == 3 ? 2 : 4; }
// Occupancy asked of ptxas, in blocks of 256 threads per SM (2: <= 128 registers, 1: <= 255). The
// kernels need 89-128 registers; M = 16 fits 128 with a 24-28 byte spill (ptxas -v, sm_90a,
// 2026-11-22), except swiglu (R = 2), which would spill 200-500 bytes and takes up to 207.
constexpr int min_blocks_of(int m, int r) { return m == 16 && r == 2 ? 1 : 2; }
// Batches each warp asks L2 for ahead of its register loads where that helps (gq_gemv.cu:
// prefetch_batches; 2 or 3 measured slower than 1 on an H100).
constexpr int kPrefetchBatches = 1;
constexpr int kBlocksPerSm = 2;  // resident blocks per SM: the k-split fills one wave of them
// Columns a block stages at most (bounds the staged x: M = 16 takes 2 KiB per 32 columns).
constexpr int kMaxStagedCols = 2048;
// Shared memory for staged x that leaves room for kBlocksPerSm blocks per SM (228 KiB on sm_90,
// less 1 KiB a block and the kernel's static arrays): more is staged in passes (pass_of).
constexpr size_t kMaxStagedBytes = 96 * 1024;
// The kernels that stage in passes where needed: at M <= 8 kMaxStagedCols columns fit, and the
// swiglu kernel at M = 16 runs one block per SM anyway (the pass code costs the others registers).
constexpr bool can_pass(int m, int r) { return m == 16 && r == 1; }
static_assert(min_blocks_of(16, 1) == kBlocksPerSm, "the pass kernel runs kBlocksPerSm blocks per SM");

// One matrix: its sections on the device and its output.
struct Mat {
  const uint4* codes = nullptr;
  const uint2* hi = nullptr;  // int3's hi chunks or 2:4 meta words
  const uint2* recs = nullptr;  // [tiles][groups][8] pairs (row g, row g + 8)
  const int32_t* perm = nullptr;  // act-order only
  float* y = nullptr;
  int64_t n_out = 0;
  int64_t item0 = 0;  // its first item (an item never spans two matrices: one perm per block)
};

// The shape shared by the matrices of a launch (n_in counts columns of x; chunks, groups and units
// code columns: 2:4 matrices have half as many).
struct Geo {
  int n_in, chunks, groups, units;
  uint32_t gmagic;  // group of unit u: umulhi(u, gmagic), or u when 0 (group 32)
};

struct Args {
  Mat mat[3];
  int n_mats;
  Geo g;
  int64_t items;  // kWarps tiles each, matrix by matrix (swiglu: the gate's tiles)
  int ks, cpb;    // blocks per item (k-split), chunks per block
  int cluster;    // asked: 1 cluster sums where the split and the device allow (launch), 0 never;
                  // the kernel's: 1 this launch runs as clusters of ks blocks, 0 scratch sums
  int pf;         // batches a warp asks L2 for ahead of its loads (0: none)
  int pf0;        // batches it asks for before griddepcontrol.wait
  int norm_early;  // 1: M <= 8 copies its columns' norm weights before griddepcontrol.wait (gemv_kernel)
  int fences;     // scratch sums: detail::arrive_last's fences (count_fences())
  const float* x;
  const float* norm;  // folded RMSNorm weight [n_in], or null
  float eps;
  int m;
  Epilogue epi;
  MatvecRope rope;     // rope_kv only
  float* partial;      // ks > 1: [items][ks][R][kMaxM][kItemRows] partial sums, then [items][ks][kMaxM] x^2 sums
  unsigned* counters;  // ks > 1: [items] blocks arrived
  // Deferred residual sums (cuda_gq.h: GemvResidual), [m][n] int64 in 2^-32 fixed point each:
  int64_t* acc_add;         // accumulate, one matrix: the partial sums go here instead of into y
  int64_t* acc_fold;        // added into y (mat[0].y, m x n_out) and zeroed first, over all blocks
  const int64_t* acc_in;    // x reads x + acc_in
  // Chunks of x a block stages at once (the launcher's pass_of: cpb unless too large; read only by
  // the can_pass kernels, last so that the others' parameters keep their offsets).
  int pass;
  int runs;  // 1: static group runs where the range allows (gemv_kernel, M <= 4); 0: never
  // GemvReady (cuda_gq.h): x's column blocks of ready_cols flagged by the producer; the blocks wait
  // for their range's flags instead of griddepcontrol.wait. Null: griddepcontrol.wait.
  const unsigned* ready;
  int ready_cols;
};

// The launchers, one instantiation per bit width (2, 3, 4, 8) and for 2:4 sparse int4 (SP) each.
template <int BITS, bool SP>
Status launch_grid(const Args& a, Stream s);  // gemv_kernel: a.ks blocks per item
template <int BITS, bool SP>
int cluster_size(const Args& a);  // the cluster size launch_grid gives a (0: scratch sums)
template <int BITS, bool SP>
Status launch_dequant(const Mat& mt, const Geo& g, int64_t slots, void* out, Stream s);

}  // namespace lithe::cuda::gemv_impl
