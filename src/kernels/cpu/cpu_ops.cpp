// Entry points of the CPU kernels (cpu.h): check arguments, pick the kernel table of the active
// ISA, quantize activations once per call into the caller's thread-local buffer, and split the
// work over global_pool(). Compiled for the baseline ISA; the SIMD code lives in kernels_*.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>

#include "kernels/cpu/kernel_table.h"
#include "kernels/ref/cpu_ref.h"
#include "lithe/core/log.h"
#include "lithe/core/thread_pool.h"

namespace lithe::cpu {
namespace {

using detail::KernelTable;
using detail::LinearJob;
using detail::WKind;

const KernelTable& table() {
  switch (active_isa()) {
    case Isa::avx512: return detail::table_avx512();
    case Isa::avx2: return detail::table_avx2();
    case Isa::scalar: break;
  }
  return detail::table_scalar();
}

// A 64-byte aligned buffer that only grows: per-call scratch without per-call allocations.
class Scratch {
 public:
  uint8_t* get(int64_t bytes) {
    const auto need = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    if (need > cap_) {
      cap_ = std::max(need, cap_ + cap_ / 2);
      raw_ = std::make_unique<uint8_t[]>(cap_ + 63);
    }
    const auto addr = reinterpret_cast<uintptr_t>(raw_.get());
    return raw_.get() + ((64 - addr % 64) % 64);
  }

 private:
  std::unique_ptr<uint8_t[]> raw_;
  size_t cap_ = 0;
};

thread_local Scratch t_acts;  // quantized activations of the linear call this thread makes
thread_local Scratch t_work;  // per-thread kernel scratch (packed weights, attention state)

// When to split over the pool. A split pays only if the serial time exceeds a few pool round
// trips, and that cost differs by orders of magnitude between machines and pool implementations
// (a condition-variable wake-up under KVM measured 15-80 us here, a spinning hand-off ~1 us).
// So the round trip is measured (median of 9) the first time a pool is used, and each op
// estimates its serial time from its size with conservative single-core rates.
// With 2 threads a split saves half the serial time and costs about one round trip, so it breaks
// even at 2 round trips; 3 keeps a margin. The rates are what one core of the development machine
// (Zen 4) sustains; a slower core only makes splitting more worthwhile than estimated.
constexpr double kSplitFactor = 3.0;           // split when serial time > 3 round trips
constexpr double kStreamBytesPerUs = 16000.0;  // matrix-vector weight stream from DRAM (~16 GB/s)
constexpr double kMacsPerUs = 48000.0;         // quantized / f32 matrix-matrix (~48 GMAC/s)
constexpr double kAttnMacsPerUs = 16000.0;     // attention (~16 GMAC/s: softmax and reductions)
constexpr double kFloatsPerUs = 1000.0;        // element-wise / row ops incl. exp and sin/cos

double pool_round_trip_us(ThreadPool& pool) {
  static std::mutex mu;
  static const ThreadPool* measured = nullptr;
  static double us = 0.0;
  std::lock_guard<std::mutex> lk(mu);
  if (measured != &pool) {
    double t[9];
    for (double& v : t) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.run_on_all([](int) {});
      v = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    std::nth_element(t, t + 4, t + 9);
    us = t[4];
    measured = &pool;
  }
  return us;
}

std::atomic<int> g_force_split{-1};  // -1: measured policy, 0: never, 1: always

// Whether work estimated to take serial_us on one core should be split over the pool.
bool split(ThreadPool& pool, double serial_us) {
  if (pool.size() <= 1) return false;
  const int forced = g_force_split.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  return serial_us > kSplitFactor * pool_round_trip_us(pool);
}

}  // namespace

void force_split(std::optional<bool> always) {
  g_force_split.store(always ? (*always ? 1 : 0) : -1, std::memory_order_relaxed);
}

bool linear_supports(DType w) { return w == DType::gq || ref_detail::linear_kind(w).is_ok(); }

// ---- gq weights ---------------------------------------------------------------------------------
namespace {

GqActs initial_gq_acts() {
  const char* env = std::getenv("LITHE_GQ_ACTS");
  if (env == nullptr || *env == '\0') return GqActs::int16;
  const std::string_view v(env);
  if (v == "int8") return GqActs::int8;
  if (v == "int16") return GqActs::int16;
  if (v == "f32") return GqActs::f32;
  log::warn("LITHE_GQ_ACTS='{}' is not one of int8, int16, f32; using int16", env);
  return GqActs::int16;
}

std::atomic<int> g_forced_gq_acts{-1};  // -1: the environment's choice

// The layout's sections must hold everything the kernels read (a tensor may come from elsewhere).
Status check_gq_sections(const Tensor& w, const PackedWeight& p, const detail::GqGeom& g) {
  const int64_t need[3] = {p.n_out * g.row_stride, p.fmt.sym ? g.ent_stride : 0, p.has_perm ? p.n_in * 4 : 0};
  const auto addr = reinterpret_cast<uintptr_t>(w.data());
  for (int i = 0; i < 3; ++i) {
    const int64_t at = p.section[static_cast<size_t>(i)];
    if (need[i] > 0 && (at < 0 || at > p.bytes || need[i] > p.bytes - at || (addr + static_cast<uint64_t>(at)) % 4 != 0))
      return error(StatusCode::invalid_argument,
                   "cpu linear: gq weight {}: section {} at byte {} (4-byte aligned) must hold {} bytes of the {} "
                   "the tensor has",
                   w.describe(), i, at, need[i], p.bytes);
  }
  return Status::ok();
}

Status linear_gq(const Tensor& w, const float* x, int64_t m, float* y) {
  const PackedWeight* p = w.packed();
  if (p == nullptr)
    return error(StatusCode::invalid_argument, "cpu linear: gq weight {} carries no PackedWeight", w.describe());
  if (p->layout != kLayoutCpuGq)
    return error(StatusCode::unsupported,
                 "cpu linear: gq weight {} is laid out for another backend (layout {:#x}; the CPU kernels read "
                 "{:#x}, made by cpu::pack_gq)",
                 w.describe(), p->layout, kLayoutCpuGq);
  if (w.device() != Device::cpu)
    return error(StatusCode::invalid_argument, "cpu linear: weight {} is not in host memory", w.describe());
  LITHE_TRY(gq_supports(p->fmt, p->n_out, p->n_in));
  const detail::GqGeom g = detail::gq_geom(p->fmt.bits, p->fmt.group, p->fmt.sym, p->n_out, p->n_in);
  LITHE_TRY(check_gq_sections(w, *p, g));
  if (m < 0) return error(StatusCode::invalid_argument, "cpu linear: m = {} must be >= 0", m);
  if (m > 0 && (x == nullptr || y == nullptr))
    return error(StatusCode::invalid_argument, "cpu linear: null {} pointer for m = {}", x == nullptr ? "x" : "y", m);
  if (m == 0) return Status::ok();

  const KernelTable& t = table();
  ThreadPool& pool = global_pool();
  const auto* base = static_cast<const uint8_t*>(w.data());
  detail::GqJob j;
  j.g = g;
  j.mode = gq_acts();
  j.rows = base + p->section[0];
  j.zeros = p->fmt.sym ? base + p->section[1] : j.rows + 2 * g.ent_stride;
  j.z_stride = p->fmt.sym ? 0 : g.row_stride;
  j.m = m;
  j.y = y;
  // Activations: gathered by perm, padded to whole units, quantized or not; once per call.
  j.act_row_bytes = g.units * (j.mode == GqActs::int8    ? detail::kGqActI8UnitBytes
                               : j.mode == GqActs::int16 ? detail::kGqActI16UnitBytes
                                                         : detail::kGqActF32UnitBytes);
  uint8_t* acts = t_acts.get(m * (j.act_row_bytes + g.xs_stride * 4));
  j.acts = acts;
  j.xsum = reinterpret_cast<float*>(acts + m * j.act_row_bytes);
  const int32_t* perm = p->has_perm ? reinterpret_cast<const int32_t*>(base + p->section[2]) : nullptr;
  if (m == 1 || !split(pool, static_cast<double>(m * g.n_in) / kFloatsPerUs)) {
    t.gq_prepare_acts(j, x, perm, 0, m);
  } else {
    pool.parallel_for(m, 1, [&](int64_t b, int64_t e) { t.gq_prepare_acts(j, x, perm, b, e); });
  }
  const int64_t scratch_bytes = t.gq_scratch_bytes(j);
  constexpr int64_t grain = 16;
  const int64_t units = (g.n_out + grain - 1) / grain;
  const double serial_us = m <= 4 ? static_cast<double>(p->bytes) / kStreamBytesPerUs
                                  : static_cast<double>(g.n_out * g.n_in * m) / kMacsPerUs;
  if (units == 1 || !split(pool, serial_us)) {
    t.gq_linear_rows(j, 0, g.n_out, scratch_bytes > 0 ? t_work.get(scratch_bytes) : nullptr);
    return Status::ok();
  }
  pool.parallel_for(units, 1, [&](int64_t b, int64_t e) {
    uint8_t* scratch = scratch_bytes > 0 ? t_work.get(scratch_bytes) : nullptr;
    t.gq_linear_rows(j, b * grain, std::min(e * grain, g.n_out), scratch);
  });
  return Status::ok();
}

}  // namespace

GqActs gq_acts() {
  static const GqActs env = initial_gq_acts();
  const int forced = g_forced_gq_acts.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<GqActs>(forced) : env;
}

void force_gq_acts(std::optional<GqActs> mode) {
  g_forced_gq_acts.store(mode ? static_cast<int>(*mode) : -1, std::memory_order_relaxed);
}

namespace {
// BatchLayout::layout of the records made by table t (one per ISA: each lays its records out its own way).
int batch_layout_id(const KernelTable& t) { return 0x4c430000 + static_cast<int>(t.isa); }

// A job over the (checked) weight w; the activation fields left empty.
LinearJob weight_job(const Tensor& w, WKind kind) {
  LinearJob j{};
  j.kind = kind;
  j.w = static_cast<const uint8_t*>(w.data());
  j.row_bytes = w.strides()[0];
  j.n_out = w.dim(0);
  j.n_in = w.dim(1);
  return j;
}

// The batch layout rows of w for table t, or null (none, or made by another ISA's kernels).
const uint8_t* batch_rows(const KernelTable& t, const Tensor& w) {
  const BatchLayout* b = w.batch_layout();
  if (b == nullptr || b->layout != batch_layout_id(t)) return nullptr;
  return static_cast<const uint8_t*>(b->buffer->data());
}
}  // namespace

Result<Tensor> with_batch_layout(const Tensor& w) {
  if (!w.defined() || w.dtype() == DType::gq) return w;
  WKind kind{};
  LITHE_TRY(ref_detail::check_linear(w, nullptr, 0, nullptr, kind));
  const KernelTable& t = table();
  const int64_t row_bytes = t.batch_row_bytes(kind, w.dim(1));
  if (row_bytes == 0) return w;
  const LinearJob j = weight_job(w, kind);
  LITHE_ASSIGN(BufferPtr buf, alloc_host(static_cast<size_t>(row_bytes * j.n_out)));
  auto* dst = static_cast<uint8_t*>(buf->data());
  global_pool().parallel_for(j.n_out, 64, [&](int64_t b, int64_t e) { t.pack_weight_rows(j, b, e, dst); });
  return w.with_batch_layout(BatchLayout{std::move(buf), batch_layout_id(t)});
}

Status linear(const Tensor& w, const float* x, int64_t m, float* y) {
  if (w.defined() && w.dtype() == DType::gq) return linear_gq(w, x, m, y);
  WKind kind{};
  LITHE_TRY(ref_detail::check_linear(w, x, m, y, kind));
  if (m == 0) return Status::ok();
  const KernelTable& t = table();
  ThreadPool& pool = global_pool();
  LinearJob j = weight_job(w, kind);
  j.m = m;
  j.x = x;
  j.y = y;
  if (!detail::is_float_kind(kind)) {
    j.xq_row_bytes = t.act_row_bytes(kind, j.n_in);
    uint8_t* xq = t_acts.get(m * j.xq_row_bytes);
    j.xq = xq;
    if (m == 1 || !split(pool, static_cast<double>(m * j.n_in) / kFloatsPerUs)) {
      t.quantize_acts(kind, x, j.n_in, 0, m, xq);
    } else {
      pool.parallel_for(m, 1, [&](int64_t b, int64_t e) { t.quantize_acts(kind, x, j.n_in, b, e, xq); });
    }
  }
  j.packed = batch_rows(t, w);
  const int64_t scratch_bytes = j.packed != nullptr ? 0 : t.linear_scratch_bytes(kind, j.n_in, m);
  const int64_t grain = t.linear_row_grain(kind, j.n_in, m);
  const int64_t units = (j.n_out + grain - 1) / grain;
  // m <= 4 streams the weights once (memory-bound); larger m is compute-bound.
  const double serial_us = m <= 4 ? static_cast<double>(j.row_bytes * j.n_out) / kStreamBytesPerUs
                                  : static_cast<double>(j.n_out * j.n_in * m) / kMacsPerUs;
  if (units == 1 || !split(pool, serial_us)) {
    t.linear_rows(j, 0, j.n_out, scratch_bytes > 0 ? t_work.get(scratch_bytes) : nullptr);
    return Status::ok();
  }
  pool.parallel_for(units, 1, [&](int64_t b, int64_t e) {
    uint8_t* scratch = scratch_bytes > 0 ? t_work.get(scratch_bytes) : nullptr;
    t.linear_rows(j, b * grain, std::min(e * grain, j.n_out), scratch);
  });
  return Status::ok();
}

void rmsnorm(const float* x, const float* weight, float eps, int64_t m, int64_t n, float* y) {
  if (m <= 0 || n <= 0) return;
  const KernelTable& t = table();
  ThreadPool& pool = global_pool();
  if (m == 1 || !split(pool, static_cast<double>(m * n) / kFloatsPerUs)) return t.rmsnorm_rows(x, weight, eps, n, 0, m, y);
  pool.parallel_for(m, 1, [&](int64_t b, int64_t e) { t.rmsnorm_rows(x, weight, eps, n, b, e, y); });
}

// Element-wise ops split into 64-element aligned pieces.
void silu_mul(float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  const KernelTable& t = table();
  ThreadPool& pool = global_pool();
  if (!split(pool, static_cast<double>(n) / kFloatsPerUs)) return t.silu_mul(gate, up, n);
  pool.parallel_for((n + 63) / 64, 1, [&](int64_t b, int64_t e) {
    t.silu_mul(gate + 64 * b, up + 64 * b, std::min(64 * e, n) - 64 * b);
  });
}

float softmax_weights(float* x, int64_t n, float scale, float* sums) {
  if (n <= 0) return -std::numeric_limits<float>::infinity();
  return table().softmax_weights(x, n, scale, sums);
}

void add_inplace(float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  const KernelTable& t = table();
  ThreadPool& pool = global_pool();
  if (!split(pool, static_cast<double>(n) / kFloatsPerUs)) return t.add(y, x, n);
  pool.parallel_for((n + 63) / 64, 1, [&](int64_t b, int64_t e) {
    t.add(y + 64 * b, x + 64 * b, std::min(64 * e, n) - 64 * b);
  });
}

namespace {
void rope_impl(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
               const RopeTable& table_, RopeStyle style, const float* angles) {
  const int64_t rot = table_.rot_dim;
  LITHE_CHECK_MSG(rot >= 0 && rot % 2 == 0 && rot <= head_dim && rot <= 1024 &&
                      static_cast<int64_t>(table_.inv_freq.size()) >= rot / 2,
                  "rope: rot_dim {} must be even, <= head_dim {} and <= 1024, with rot_dim / 2 inv_freq entries ({})",
                  rot, head_dim, table_.inv_freq.size());
  if (n_tokens <= 0 || n_heads <= 0 || rot == 0) return;
  const KernelTable& t = table();
  const int s = style == RopeStyle::interleaved ? 0 : 1;
  const float* f = table_.inv_freq.data();
  ThreadPool& pool = global_pool();
  const int64_t angle_cost = angles != nullptr ? 0 : rot * 20;
  if (n_tokens == 1 || !split(pool, static_cast<double>(n_tokens * (n_heads * rot + angle_cost)) / kFloatsPerUs))
    return t.rope_tokens(x, 0, n_tokens, n_heads, head_dim, pos, f, rot, s, angles);
  pool.parallel_for(n_tokens, 1, [&](int64_t b, int64_t e) {
    t.rope_tokens(x, b, e, n_heads, head_dim, pos, f, rot, s, angles);
  });
}
}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeTable& table_,
          RopeStyle style) {
  rope_impl(x, n_tokens, n_heads, head_dim, pos, table_, style, nullptr);
}

std::vector<float> rope_angles(const RopeTable& table_, int64_t n_pos) {
  const int64_t half = table_.rot_dim / 2;
  std::vector<float> a(static_cast<size_t>(std::max<int64_t>(0, n_pos) * 2 * half));
  for (int64_t p = 0; p < n_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(p) * static_cast<double>(table_.inv_freq[static_cast<size_t>(i)]);
      a[static_cast<size_t>((p * half + i) * 2)] = static_cast<float>(std::cos(ang));
      a[static_cast<size_t>((p * half + i) * 2 + 1)] = static_cast<float>(std::sin(ang));
    }
  return a;
}

void rope_lookup(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                 const RopeTable& table_, const float* angles, RopeStyle style) {
  rope_impl(x, n_tokens, n_heads, head_dim, pos, table_, style, angles);
}

Status attention(const AttentionArgs& a) { return attention_many(std::span<const AttentionArgs>(&a, 1)); }

Status attention_many(std::span<const AttentionArgs> as) {
  const KernelTable& t = table();
  // Per sequence: 16 queries per item (enough to reuse each converted slot block, small enough
  // that a 512-token prefill has hundreds of items to balance over the threads) and its first
  // item in the joint numbering.
  std::vector<int64_t> q_block(as.size()), first(as.size() + 1, 0);
  int64_t scratch_bytes = 0;
  double macs = 0;  // causal work: ~n_q * n_kv (decode) or n_q^2 / 2 (prefill) slot visits, 2 MACs per dimension
  for (size_t s = 0; s < as.size(); ++s) {
    const AttentionArgs& a = as[s];
    LITHE_TRY(ref_detail::check_attention(a));
    q_block[s] = std::max<int64_t>(1, std::min<int64_t>(16, a.n_q));
    first[s + 1] = first[s] + (a.n_q == 0 ? 0 : detail::attention_n_items(a, q_block[s]));
    scratch_bytes = std::max(scratch_bytes, t.attention_scratch_floats(a.head_dim, q_block[s]) * 4);
    macs += static_cast<double>(a.n_q) * static_cast<double>(std::max<int64_t>(1, a.n_kv - a.n_q / 2)) *
            static_cast<double>(a.n_heads * a.head_dim) * 2.0;
  }
  const int64_t items = first.back();
  if (items == 0) return Status::ok();
  auto run = [&](int64_t b, int64_t e) {
    float* scratch = scratch_bytes > 0 ? reinterpret_cast<float*>(t_work.get(scratch_bytes)) : nullptr;
    // The sequences [b, e) spans, each over its own items.
    size_t s = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
    for (; b < e; ++s) {
      const int64_t end = std::min(e, first[s + 1]);
      if (end > b) t.attention_items(as[s], q_block[s], b - first[s], end - first[s], scratch);
      b = std::max(b, end);
    }
  };
  ThreadPool& pool = global_pool();
  if (items == 1 || !split(pool, macs / kAttnMacsPerUs)) {
    run(0, items);
  } else {
    pool.parallel_for(items, 1, run);
  }
  return Status::ok();
}

}  // namespace lithe::cpu
