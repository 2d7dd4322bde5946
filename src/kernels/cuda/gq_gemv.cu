// Group-quantized matrix-vector products for decode (cuda_gq.h: gemv, gemv_linear), batch
// m <= kGemvMaxRows, and the expansion of the same packed matrix to dense f16
// (gemv_dequantize_f16): the host side, which checks the arguments, splits the work and launches
// the kernels (gq_gemv_args.h; gq_gemv_grid.cuh describes them).
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gq_gemv_args.h"
#include "kernels/cuda/gq_gemv_layout.h"
#include "kernels/cuda/gq_gemv_math.cuh"
#include "kernels/cuda/rope.cuh"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda {
namespace {

using namespace gemv_impl;
using detail::aligned;
using detail::overlap;
using detail::ptr_str;

// Checks a packed weight against the layout it claims; fills its Mat (not y, item0) and the shape.
Status make_mat(const PackedWeight& w, const void* w_dev, const std::string& f, Mat& mt, Geo& geo) {
  using detail::bad_arg;
  if (w.layout != kLayoutGemv)
    return bad_arg(f + "layout " + std::to_string(w.layout) + " is not the GEMV layout (pack_gemv)");
  const Status sup = gemv_supports(w.fmt, w.n_out, w.n_in);
  if (!sup.is_ok()) return sup;
  if (w.fmt.sparse24 && !L::runs_sparse(w.fmt, w.n_in))
    return bad_arg(f + "a 2:4 sparse GEMV layout needs int4 with n_in and group multiples of 64, not " +
                   format_name(w.fmt, w.n_in) + " (pack_gemv packs such matrices dense)");
  const L::Geometry g = L::geometry(w.fmt, w.n_out, w.n_in, w.has_perm);
  if (w.section[0] != g.codes || w.section[1] != g.hi || w.section[2] != g.recs || w.section[3] != g.perm ||
      w.bytes != g.bytes)
    return bad_arg(f + "the descriptor's sections / size (" + std::to_string(w.bytes) +
                   " bytes) do not match the GEMV layout of its shape (" + std::to_string(g.bytes) + " bytes)");
  if (w_dev == nullptr || !aligned(w_dev, 16))
    return bad_arg(f + "w_dev = " + ptr_str(w_dev) + " is null or not 16-byte aligned");
  const auto* base = static_cast<const uint8_t*>(w_dev);
  mt.codes = reinterpret_cast<const uint4*>(base + g.codes);
  mt.hi = reinterpret_cast<const uint2*>(base + g.hi);
  mt.recs = reinterpret_cast<const uint2*>(base + g.recs);
  mt.perm = w.has_perm ? reinterpret_cast<const int32_t*>(base + g.perm) : nullptr;
  mt.n_out = w.n_out;
  geo.n_in = static_cast<int>(w.n_in);
  geo.chunks = static_cast<int>(g.chunks);
  geo.groups = static_cast<int>(g.groups);
  geo.units = static_cast<int>(g.units);
  const uint64_t bpg = static_cast<uint64_t>(w.fmt.group / L::x_per_code(w.fmt.sparse24) / 32);
  geo.gmagic = bpg == 1 ? 0u : static_cast<uint32_t>(((uint64_t{1} << 32) + bpg - 1) / bpg);
  return Status::ok();
}

// The k-split of `items` items over `chunks` chunks of `cols` columns: as many k-slices per item as
// fill one wave of resident blocks (kBlocksPerSm per SM: a second, partial wave runs at a fraction
// of the bandwidth; on an H100 one wave made a Llama-2-7B int4 decode 17% faster than ~1.3 waves),
// at least enough that a block stages <= kMaxStagedCols columns, while every warp keeps at least
// one full batch (`loads` chunks). Depends on the shape and the device only, never on m.
struct Split {
  int ks, cpb;
};
using detail::env_knob;
Split pick_split(int64_t items, int chunks, int cols, int loads, int sms) {
  const int64_t max_ks = std::max(1, chunks / loads);
  static const int knob_per_sm = env_knob("LITHE_GEMV_BLOCKS_PER_SM");
  static const int min_ks = std::max(1, env_knob("LITHE_GEMV_MIN_KS"));  // k slices at least
  const int per_sm = knob_per_sm > 0 ? knob_per_sm : kBlocksPerSm;
  const int64_t want = std::max<int64_t>(int64_t{per_sm} * sms / items,
                                         detail::ceil_div(int64_t{chunks} * cols, kMaxStagedCols));
  Split sp;
  sp.ks = static_cast<int>(std::clamp<int64_t>(std::max<int64_t>(want, min_ks), 1, max_ks));
  sp.cpb = static_cast<int>(detail::ceil_div(chunks, sp.ks));
  sp.ks = static_cast<int>(detail::ceil_div(chunks, sp.cpb));  // no empty blocks
  return sp;
}

// Batches each warp asks L2 for ahead of its loads (Args::pf). On an H100 (peak 3.35 TB/s;
// bench/RESULTS.md, twenty-first session) one batch ahead made int4 g128 decode 2.8% faster at
// m = 1 and int8 0.5%, but cost int3 1.7% and int4 layers 1-3% at m = 4..8, so it is on where it
// helped only. On an H200 (peak 4.9 TB/s; thirty-first session, side by side) it cost int4 g128
// decode 3.1% (482.3 vs 467.7 tok/s) and int8 5.8%: where memory answers faster, asking costs more
// than the early bytes bring. So it is on only for devices whose peak memory bandwidth is below
// kPrefetchBelowGbs (the H100's setting was not re-measured on the present kernel).
// LITHE_GEMV_PREFETCH=N (a benchmark knob) sets N for every launch; LITHE_GEMV_PREFETCH_WAIT=N the
// batches asked for before griddepcontrol.wait (default: the same N).
constexpr int kPrefetchBelowGbs = 4000;
int prefetch_batches(const QuantFormat& f, int64_t m, int mem_gbs) {
  static const int knob = env_knob("LITHE_GEMV_PREFETCH", -1);
  if (knob >= 0) return std::min(knob, 8);
  const bool slow_memory = mem_gbs > 0 && mem_gbs < kPrefetchBelowGbs;
  return slow_memory && m == 1 && (f.bits == 4 || f.bits == 8) ? kPrefetchBatches : 0;
}

// Tiles and items of a launch (swiglu: the gate's tiles), its split and its scratch: [items] u32
// counters (padded to 256 bytes), then the partial sums (Args::partial); none when ks == 1.
struct Plan {
  int64_t items = 0;
  Split split{1, 1};
  int64_t counter_bytes = 0, scratch_bytes = 0;
};
Plan plan_of(const GemvOut* outs, int n_outs, Epilogue e, int sms) {
  Plan p;
  const int R = e == Epilogue::swiglu ? 2 : 1;
  for (int j = 0; j < (R == 2 ? 1 : n_outs); ++j)
    p.items += detail::ceil_div(detail::ceil_div(outs[j].w->n_out, L::kTileRows), kWarps);
  const PackedWeight& w = *outs[0].w;
  const L::Geometry g = L::geometry(w.fmt, w.n_out, w.n_in, w.has_perm);
  p.split = pick_split(p.items, static_cast<int>(g.chunks), L::x_span(w.fmt.bits, w.fmt.sparse24),
                       loads_of(w.fmt.bits), sms);
  if (p.split.ks > 1) {
    p.counter_bytes = (p.items * 4 + 255) / 256 * 256;
    p.scratch_bytes = p.counter_bytes + p.items * p.split.ks * (R * kMaxM * kItemRows + kMaxM) * 4;
  }
  return p;
}

// The fields of Args that pick the kernel and its grid: plan p, m, the epilogue and whether cluster
// sums are asked for (LITHE_GEMV_CLUSTER=0: never; the launcher checks the split and the fit).
void plan_args(const Plan& p, int64_t m, Epilogue e, Args& a) {
  static const bool cluster_off = detail::env_zero("LITHE_GEMV_CLUSTER");
  a.items = p.items;
  a.ks = p.split.ks;
  a.cpb = p.split.cpb;
  a.cluster = cluster_off ? 0 : 1;
  a.fences = detail::count_fences() ? 1 : 0;
  a.m = static_cast<int>(m);
  a.epi = e;
}

// f.template operator()<BITS, SP>() for the format of a GEMV-layout weight (bits 2, 3, 4 or 8, and
// 2:4 sparse int4: one instantiation of the kernels each, gq_gemv_bits.cu.in).
template <class F>
auto with_format(const QuantFormat& fm, F&& f) {
  if (fm.sparse24) return f.template operator()<4, true>();  // make_mat: int4 only
  switch (fm.bits) {
    case 2: return f.template operator()<2, false>();
    case 3: return f.template operator()<3, false>();
    case 4: return f.template operator()<4, false>();
    default: return f.template operator()<8, false>();
  }
}

// The queries' check of their arguments (gemv itself reports what is wrong): 1..3 matrices, none null.
bool outs_given(const GemvOut* outs, int n_outs) {
  if (outs == nullptr || n_outs < 1 || n_outs > 3) return false;
  return std::all_of(outs, outs + n_outs, [](const GemvOut& o) { return o.w != nullptr; });
}

// GemvResidual's rules: `add` on a one-matrix accumulate launch without a norm, `fold` only with
// `add`, the accumulators 16-byte aligned and apart from each other, x and y.
Status check_residual(const std::string& f, const GemvResidual& r, const GemvOut* outs, int n_outs, int64_t m,
                      Epilogue e, const MatvecNorm& norm) {
  using detail::bad_arg;
  if ((r.add != nullptr || r.fold != nullptr) && (e != Epilogue::accumulate || n_outs != 1 || norm.w != nullptr))
    return bad_arg(f + "GemvResidual add / fold need one matrix, the accumulate epilogue and no norm (n_outs = " +
                   std::to_string(n_outs) + ")");
  if (r.fold != nullptr && r.add == nullptr) return bad_arg(f + "GemvResidual fold needs add");
  for (const void* p : {static_cast<const void*>(r.add), static_cast<const void*>(r.fold), static_cast<const void*>(r.in)})
    if (p != nullptr && !aligned(p, 16))
      return bad_arg(f + "GemvResidual accumulator " + ptr_str(p) + " is not 16-byte aligned");
  // Bytes of the output-shaped accumulators (add, fold: int64 [m][n_out]), of y and of `in` ([m][n_in]).
  const int64_t acc_bytes = m * outs[0].w->n_out * 8, y_bytes = acc_bytes / 2, in_bytes = m * outs[0].w->n_in * 8;
  if (r.add != nullptr && r.fold != nullptr && overlap(r.add, acc_bytes, r.fold, acc_bytes))
    return bad_arg(f + "GemvResidual add and fold overlap");
  if (r.add != nullptr && overlap(r.add, acc_bytes, outs[0].y, y_bytes))
    return bad_arg(f + "GemvResidual add overlaps y");
  if (r.in != nullptr && r.add != nullptr && overlap(r.in, in_bytes, r.add, acc_bytes))
    return bad_arg(f + "GemvResidual in overlaps add");
  return Status::ok();
}

__global__ void fold_kernel(float* y, long long* acc, int64_t n) {
  detail::pdl_wait();  // launched with launch_pdl: y and acc come from earlier kernels
  detail::pdl_release();
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[k] += from_fixed(acc[k]);
    acc[k] = 0;
  }
}

}  // namespace

Status gemv_fold(float* y, int64_t* acc, int64_t n, Stream s) {
  using detail::bad_arg;
  if (n < 0) return bad_arg("gemv_fold: n = " + std::to_string(n) + " is negative");
  if (n == 0) return Status::ok();
  if (y == nullptr || acc == nullptr || !aligned(y, 4) || !aligned(acc, 8))
    return bad_arg("gemv_fold: y = " + ptr_str(y) + " or acc = " + ptr_str(acc) + " is null or misaligned");
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(n, 256), 1024));
  detail::launch_pdl(fold_kernel, dim3(blocks), dim3(256), 0, s, y, reinterpret_cast<long long*>(acc), n);
  return detail::launched("gemv_fold");
}

int gemv_cluster_size(const GemvOut* outs, int n_outs, int64_t m, Epilogue e) {
  if (!outs_given(outs, n_outs) || m < 1 || m > kGemvMaxRows) return 0;
  Args a{};
  Geo geo{};
  detail::DeviceFacts d;
  if (!make_mat(*outs[0].w, outs[0].w_dev, "", a.mat[0], geo).is_ok() || !detail::device_facts(d).is_ok()) return 0;
  plan_args(plan_of(outs, n_outs, e, d.sms), m, e, a);
  return with_format(outs[0].w->fmt, [&]<int BITS, bool SP>() { return cluster_size<BITS, SP>(a); });
}

int64_t gemv_scratch_bytes(const GemvOut* outs, int n_outs, Epilogue e) {
  if (!outs_given(outs, n_outs)) return 0;
  detail::DeviceFacts d;
  // The scratch grows with the split, which grows with the SM count: an unreadable device gets the
  // bound of a large one.
  if (!detail::device_facts(d).is_ok()) d.sms = 1024;
  return plan_of(outs, n_outs, e, d.sms).scratch_bytes;
}

Status gemv(const GemvOut* outs, int n_outs, const float* x, int64_t m, Epilogue e, void* scratch,
            int64_t scratch_bytes, Stream s, const MatvecNorm& norm, const MatvecRope* rope,
            const GemvResidual* res, const GemvReady* ready) {
  using detail::bad_arg;
  std::string f = "gemv: ";
  if (outs == nullptr || n_outs < 1 || n_outs > 3)
    return bad_arg(f + "n_outs = " + std::to_string(n_outs) + " is not in 1..3 (or outs is null)");
  if (e != Epilogue::store && e != Epilogue::accumulate && e != Epilogue::swiglu && e != Epilogue::rope_kv)
    return bad_arg(f + "epilogue " + std::to_string(static_cast<int>(e)) +
                   " is not store, accumulate, swiglu or rope_kv");
  if (e == Epilogue::rope_kv && n_outs != 3)
    return bad_arg(f + "rope_kv needs exactly 3 matrices (q, k, v), got n_outs = " + std::to_string(n_outs));
  if (e == Epilogue::swiglu && n_outs != 2)
    return bad_arg(f + "swiglu needs exactly 2 matrices (gate, up), got n_outs = " + std::to_string(n_outs));
  Args a{};
  for (int j = 0; j < n_outs; ++j) {
    if (outs[j].w == nullptr) return bad_arg(f + "outs[" + std::to_string(j) + "].w is null");
    const PackedWeight& w = *outs[j].w;
    const std::string fj = "gemv [" + std::to_string(w.n_out) + " x " + std::to_string(w.n_in) + "]: ";
    Geo geo{};
    LITHE_TRY(make_mat(w, outs[j].w_dev, fj, a.mat[j], geo));
    if (j == 0) {
      a.g = geo;
      f = fj;
    } else if (w.fmt.bits != outs[0].w->fmt.bits || w.fmt.group != outs[0].w->fmt.group ||
               w.fmt.sparse24 != outs[0].w->fmt.sparse24 || w.n_in != outs[0].w->n_in ||
               w.has_perm != outs[0].w->has_perm) {
      return bad_arg(fj + "fused matrices differ in format, n_in or act-order from outs[0] (" +
                     format_name(outs[0].w->fmt, outs[0].w->n_in) + ", n_in " + std::to_string(outs[0].w->n_in) + ")");
    }
  }
  const int64_t n_in = outs[0].w->n_in;
  if (e == Epilogue::swiglu && (outs[0].w->n_out != outs[1].w->n_out || outs[0].w->has_perm))
    return bad_arg(f + "swiglu needs gate and up of equal n_out without act-order, got " +
                   std::to_string(outs[0].w->n_out) + " and " + std::to_string(outs[1].w->n_out) +
                   (outs[0].w->has_perm ? " (act-order)" : ""));
  if (m < 1 || m > kGemvMaxRows)
    return bad_arg(f + "m = " + std::to_string(m) + " is not in 1.." + std::to_string(kGemvMaxRows));
  // x and the norm weight are read as column pairs (float2; n_in is even).
  if (x == nullptr || !aligned(x, 8)) return bad_arg(f + "x = " + ptr_str(x) + " is null or not 8-byte aligned");
  if (norm.w != nullptr && !(norm.eps >= 0.0f))
    return bad_arg(f + "norm.eps = " + std::to_string(norm.eps) + " must be >= 0");
  if (norm.w != nullptr && !aligned(norm.w, 8))
    return bad_arg(f + "norm.w = " + ptr_str(norm.w) + " is not 8-byte aligned");
  if (e == Epilogue::rope_kv) {
    LITHE_TRY(detail::check_rope(f + "rope_kv: ", outs[0].w->n_out, outs[1].w->n_out, outs[2].w->n_out, rope));
    if (kItemRows % rope->head_dim != 0)
      return bad_arg(f + "rope_kv: head_dim " + std::to_string(rope->head_dim) + " does not divide the " +
                     std::to_string(kItemRows) + " rows of a GEMV item");
    a.rope = *rope;
  }
  const int n_y = e == Epilogue::swiglu ? 1 : n_outs;
  for (int j = 0; j < n_y; ++j) {
    float* y = outs[j].y;
    const int64_t n_out = outs[j].w->n_out;
    const std::string name = "outs[" + std::to_string(j) + "].y";
    if (y == nullptr || !aligned(y, alignof(float))) return bad_arg(f + name + " = " + ptr_str(y) + " is null or not 4-byte aligned");
    if (overlap(y, m * n_out * 4, x, m * n_in * 4)) return bad_arg(f + name + " overlaps x");
    for (int k = 0; k < j; ++k)
      if (overlap(y, m * n_out * 4, outs[k].y, m * outs[k].w->n_out * 4))
        return bad_arg(f + name + " overlaps outs[" + std::to_string(k) + "].y");
    a.mat[j].y = y;
  }
  const GemvResidual r = res != nullptr ? *res : GemvResidual{};
  LITHE_TRY(check_residual(f, r, outs, n_outs, m, e, norm));
  if (ready != nullptr && ready->flags != nullptr) {
    if (m != 1 || ready->cols <= 0 || ready->cols > n_in || !aligned(ready->flags, 4))
      return bad_arg(f + "GemvReady needs m = 1 and 0 < cols <= n_in " + std::to_string(n_in) + " (m = " +
                     std::to_string(m) + ", cols = " + std::to_string(ready->cols) + ", flags " +
                     ptr_str(ready->flags) + ")");
    a.ready = ready->flags;
    a.ready_cols = static_cast<int>(ready->cols);
  }
  detail::DeviceFacts d;
  LITHE_TRY(detail::device_facts(d));
  Plan p = plan_of(outs, n_outs, e, d.sms);
  if (r.add != nullptr) {  // no scratch; at most kGemvResidualMaxSplit blocks add into one sum
    const int chunks = a.g.chunks;
    if (p.split.ks > kGemvResidualMaxSplit) {
      p.split.cpb = static_cast<int>(detail::ceil_div(chunks, kGemvResidualMaxSplit));
      p.split.ks = static_cast<int>(detail::ceil_div(chunks, p.split.cpb));
    }
    p.counter_bytes = p.scratch_bytes = 0;
  }
  int64_t item0 = 0;
  for (int j = 0; j < n_outs; ++j) {
    a.mat[j].item0 = e == Epilogue::swiglu ? 0 : item0;
    item0 += detail::ceil_div(detail::ceil_div(outs[j].w->n_out, L::kTileRows), kWarps);
  }
  const int64_t need = p.scratch_bytes;
  if (need > 0 && (scratch == nullptr || scratch_bytes < need || !aligned(scratch, 256)))
    return bad_arg(f + "scratch " + ptr_str(scratch) + " of " + std::to_string(scratch_bytes) + " bytes: needs " +
                   std::to_string(need) + " bytes, 256-byte aligned and zeroed (gemv_scratch_bytes)");
  a.n_mats = n_outs;
  plan_args(p, m, e, a);
  a.pf = prefetch_batches(outs[0].w->fmt, m, d.mem_gbs);
  static const int wait_knob = env_knob("LITHE_GEMV_PREFETCH_WAIT", -1);
  a.pf0 = wait_knob >= 0 ? std::min(wait_knob, 16) : a.pf;
  static const bool norm_late = detail::env_zero("LITHE_GEMV_NORM_EARLY");  // a benchmark knob: 0 reads it after x
  a.norm_early = norm_late ? 0 : 1;
  static const bool runs_off = detail::env_zero("LITHE_GEMV_STATIC_RUNS");  // a benchmark knob: 0 never
  a.runs = runs_off ? 0 : 1;
  if (r.add != nullptr) a.cluster = 0;
  a.acc_add = r.add;
  a.acc_fold = r.fold;
  a.acc_in = r.in;
  a.x = x;
  a.norm = norm.w;
  a.eps = norm.eps;
  if (need > 0) {
    a.counters = static_cast<unsigned*>(scratch);
    a.partial = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + p.counter_bytes);
  }
  return with_format(outs[0].w->fmt, [&]<int BITS, bool SP>() { return launch_grid<BITS, SP>(a, s); });
}

Status gemv_linear(const PackedWeight& w, const void* w_dev, const float* x, int64_t m, float* y, bool accumulate,
                   void* scratch, int64_t scratch_bytes, Stream s) {
  const GemvOut out{&w, w_dev, y};
  return gemv(&out, 1, x, m, accumulate ? Epilogue::accumulate : Epilogue::store, scratch, scratch_bytes, s);
}

Status gemv_dequantize_f16(const PackedWeight& w, const void* w_dev, void* out, Stream s) {
  using detail::bad_arg;
  const std::string f = "gemv_dequantize_f16 [" + std::to_string(w.n_out) + " x " + std::to_string(w.n_in) + "]: ";
  Mat mt;
  Geo g{};
  LITHE_TRY(make_mat(w, w_dev, f, mt, g));
  if (out == nullptr || !aligned(out, 16))
    return bad_arg(f + "out = " + ptr_str(out) + " is null or not 16-byte aligned");
  const int64_t slots = detail::ceil_div(w.n_out, L::kTileRows) * g.chunks * 32;
  return with_format(w.fmt, [&]<int BITS, bool SP>() { return launch_dequant<BITS, SP>(mt, g, slots, out, s); });
}

}  // namespace lithe::cuda

