// CPU kernel benchmarks (kernels/cpu), with the machine's own ceiling measured in the same binary.
//   memcpy/*            256 MB memcpy, 1 thread and all pool threads: bytes copied per second
//   read/*              256 MB sum (read-only stream, what a matrix-vector product does)
//   pool/round_trip     one global_pool().parallel_for over all threads doing nothing
//   linear/<dtype>/<n_out>x<n_in>/m<m>/<isa>
//                       m = 1: GB/s = weight bytes / time. The weights rotate over copies that
//                       together exceed the L3 cache, so every call streams from DRAM as in decode.
//                       linear_hot/*: one copy kept in cache (the kernel's compute ceiling).
//                       m = 512: GFLOP/s = 2 m n_out n_in / time (prefill).
//   gq_vs_q4/<weights>/<n_out>x<n_in>/m<m>/<isa>
//                       group-quantized weights (cpu::pack_gq: int4 g128 asym/sym, g32, per channel,
//                       int3, int2, int8; default int16 activations, "+int8acts" / "+f32acts":
//                       GqActs::int8 / f32) next to q4_0 / q4_1 at the same
//                       shapes, m = 1 and 64: GB/s = packed weight bytes (codes, scales, zeros) / time
//                       (m = 1 streams from DRAM as above), GFLOP/s for m = 64. Run:
//                       --benchmark_filter=gq_vs_q4
//   smollm2/decode/*    (suffix /split_always, /split_never: force_split) the 211 linears of one SmolLM2-135M token (30 layers x q,k,v,o,gate,up,down
//                       in q4_1 + the 49152x576 q8_0 head), distinct weights (~92 MB): tokens/s of
//                       the linear layers alone. smollm2/prefill/*: the same at m = 512 (per token).
//   smollm2/batch64[+layouts]/*  one server step of 64 sequences: the same linears and the head at
//                       m = 64, without / with the weights' batch layout (cpu::with_batch_layout).
//   attention/*         SmolLM2 heads (9 q / 3 kv, dim 64): decode at 512 cached, prefill of 512.
// Run: build/bin/bench_cpu_kernels --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lithe/core/half.h"
#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/group_quant.h"

namespace {

using lithe::DType;
using lithe::Tensor;
namespace cpu = lithe::cpu;

constexpr size_t kBig = size_t{256} << 20;      // memcpy / read buffers
constexpr size_t kStreamBytes = size_t{128} << 20;  // weight copies per benchmark: 4x the 32 MB L3

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa i : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512})
    if (static_cast<int>(i) <= static_cast<int>(cpu::detected_isa())) out.push_back(i);
  return out;
}

// ---- machine ceiling ------------------------------------------------------------------------
struct BigBuffers {
  std::unique_ptr<uint8_t[]> a{new uint8_t[kBig]}, b{new uint8_t[kBig]};
  BigBuffers() {
    std::memset(a.get(), 1, kBig);
    std::memset(b.get(), 2, kBig);
  }
};
BigBuffers& big() {
  static BigBuffers bufs;
  return bufs;
}

void BM_memcpy(benchmark::State& st, bool all_threads) {
  auto& bb = big();
  auto& pool = lithe::global_pool();
  for (auto _ : st) {
    if (all_threads) {
      pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
        const size_t chunk = kBig / 64;
        std::memcpy(bb.b.get() + b * chunk, bb.a.get() + b * chunk, static_cast<size_t>(e - b) * chunk);
      });
    } else {
      std::memcpy(bb.b.get(), bb.a.get(), kBig);
    }
    benchmark::ClobberMemory();
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(kBig) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

uint64_t sum_words(const uint8_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    s0 += w[0], s1 += w[1], s2 += w[2], s3 += w[3];
  }
  return s0 + s1 + s2 + s3;
}

void BM_read(benchmark::State& st, bool all_threads) {
  auto& bb = big();
  auto& pool = lithe::global_pool();
  for (auto _ : st) {
    uint64_t total = 0;
    if (all_threads) {
      std::vector<uint64_t> part(64);
      pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
        const size_t chunk = kBig / 64;
        part[static_cast<size_t>(b)] = sum_words(bb.a.get() + b * chunk, static_cast<size_t>(e - b) * chunk);
      });
      for (auto v : part) total += v;
    } else {
      total = sum_words(bb.a.get(), kBig);
    }
    benchmark::DoNotOptimize(total);
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(kBig) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_pool_round_trip(benchmark::State& st) {
  auto& pool = lithe::global_pool();
  std::vector<int64_t> sink(64);
  for (auto _ : st) pool.parallel_for(pool.size(), 1, [&](int64_t b, int64_t) { sink[static_cast<size_t>(b)]++; });
  benchmark::DoNotOptimize(sink.data());
}

// ---- weights ------------------------------------------------------------------------------------
// Random bytes with small f16 scales (the kernels' speed does not depend on the values).
Tensor random_weight(DType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  Tensor w = Tensor::empty(t, {n_out, n_in}).value();
  auto* p = static_cast<uint8_t*>(w.data());
  std::mt19937 rng(seed);
  const size_t n = w.nbytes();
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const uint32_t r = rng();
    std::memcpy(p + i, &r, 4);
  }
  const auto& tr = lithe::dtype_traits(t);
  const uint16_t h = lithe::f32_to_f16(0.01f);
  if (t == DType::f32) {
    for (size_t i = 0; i < n; i += 4) {
      const float v = static_cast<float>(static_cast<int>(p[i] % 200) - 100) * 0.01f;
      std::memcpy(p + i, &v, 4);
    }
  } else if (t == DType::f16 || t == DType::bf16) {
    const uint16_t v = t == DType::f16 ? h : lithe::f32_to_bf16(0.01f);
    for (size_t i = 0; i < n; i += 2) std::memcpy(p + i, &v, 2);
  } else {
    const int off = t == DType::q6_k ? 208 : 0;
    for (size_t b = 0; b < n / static_cast<size_t>(tr.block_bytes); ++b) {
      std::memcpy(p + b * tr.block_bytes + off, &h, 2);
      if (t == DType::q4_1 || t == DType::q4_k) std::memcpy(p + b * tr.block_bytes + 2, &h, 2);
    }
  }
  return w;
}

std::vector<float> random_acts(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

// ---- linear ---------------------------------------------------------------------------------
// The timed loop of both linear benchmarks: cpu::linear over the weight copies in turn (m = 1:
// weight GB/s, streamed; m > 1: GFLOP/s).
void time_linear(benchmark::State& st, const std::vector<Tensor>& ws, int64_t wbytes, int64_t n_out, int64_t n_in,
                 int64_t m) {
  const auto x = random_acts(m * n_in, 7);
  std::vector<float> y(static_cast<size_t>(m * n_out));
  size_t i = 0;
  for (auto _ : st) {
    const lithe::Status s = cpu::linear(ws[i], x.data(), m, y.data());
    if (!s.is_ok()) st.SkipWithError(s.to_string().c_str());
    i = (i + 1) % ws.size();
    benchmark::DoNotOptimize(y.data());
  }
  if (m == 1) {
    st.counters["GB/s"] = benchmark::Counter(static_cast<double>(wbytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  } else {
    st.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * static_cast<double>(m * n_out * n_in) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
}

void BM_linear(benchmark::State& st, DType t, int64_t n_out, int64_t n_in, int64_t m, cpu::Isa isa, bool hot) {
  cpu::force_isa(isa);
  const int64_t wbytes = lithe::row_bytes(t, n_in).value() * n_out;
  // m = 1: enough copies to exceed the L3 cache, so the weights stream from memory.
  // hot: one copy, cache-resident (the kernel's compute ceiling).
  const int64_t copies = m == 1 && !hot ? std::max<int64_t>(1, static_cast<int64_t>(kStreamBytes) / wbytes + 1) : 1;
  std::vector<Tensor> ws;
  for (int64_t c = 0; c < copies; ++c) ws.push_back(random_weight(t, n_out, n_in, static_cast<uint32_t>(c + 1)));
  time_linear(st, ws, wbytes, n_out, n_in, m);
}

std::string dims(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

// ---- gq weights (pack_gq) next to the GGUF kinds --------------------------------------------------
void BM_linear_gq(benchmark::State& st, lithe::QuantFormat f, int64_t n_out, int64_t n_in, int64_t m, cpu::Isa isa,
                  cpu::GqActs acts) {
  cpu::force_isa(isa);
  cpu::force_gq_acts(acts);
  const Tensor first = cpu::pack_gq(lithe::gq::random_matrix(f, n_out, n_in, 1, false)).value();
  const auto wbytes = static_cast<int64_t>(first.nbytes());
  // m = 1: copies of the packed bytes that together exceed the L3 cache (decode streams from DRAM).
  const int64_t copies = m == 1 ? std::max<int64_t>(1, static_cast<int64_t>(kStreamBytes) / wbytes + 1) : 1;
  std::vector<Tensor> ws{first};
  for (int64_t c = 1; c < copies; ++c) {
    auto buf = lithe::alloc_host(static_cast<size_t>(wbytes)).value();
    std::memcpy(buf->data(), first.data(), static_cast<size_t>(wbytes));
    ws.push_back(Tensor::packed(buf, 0, *first.packed()).value());
  }
  time_linear(st, ws, wbytes, n_out, n_in, m);
  cpu::force_gq_acts(std::nullopt);
}

void register_gq() {
  struct G {
    const char* name;
    lithe::QuantFormat f;  // group 0: per channel
    cpu::GqActs acts;
  };
  auto qf = [](int bits, int64_t group, bool sym) {
    lithe::QuantFormat f;
    f.bits = bits;
    f.group = group;
    f.sym = sym;
    return f;
  };
  const G gq[] = {  // the default activation mode (int16) unless the name says otherwise
      {"gq_int4_g128_asym", qf(4, 128, false), cpu::GqActs::int16},
      {"gq_int4_g128_asym+int8acts", qf(4, 128, false), cpu::GqActs::int8},
      {"gq_int4_g128_asym+f32acts", qf(4, 128, false), cpu::GqActs::f32},
      {"gq_int4_g128_sym", qf(4, 128, true), cpu::GqActs::int16},
      {"gq_int4_g32_asym", qf(4, 32, false), cpu::GqActs::int16},
      {"gq_int4_perchannel_sym", qf(4, 0, true), cpu::GqActs::int16},
      {"gq_int3_g128_asym", qf(3, 128, false), cpu::GqActs::int16},
      {"gq_int2_g128_asym", qf(2, 128, false), cpu::GqActs::int16},
      {"gq_int8_g128_asym", qf(8, 128, false), cpu::GqActs::int16},
  };
  const std::pair<int64_t, int64_t> shapes[] = {{576, 1536}, {1536, 576}, {4096, 4096}};  // n_out, n_in
  for (cpu::Isa isa : isas()) {
    const std::string in = std::string(cpu::isa_name(isa));
    for (int64_t m : {1, 64}) {
      if (m > 1 && isa == cpu::Isa::scalar) continue;
      for (const auto& [n_out, n_in] : shapes) {
        std::string tail = "/";
        tail.append(dims(n_out, n_in)).append("/m").append(std::to_string(m)).append("/").append(in);
        auto name = [&](std::string_view weights) {  // (appends: GCC 12 -Wrestrict misfires on operator+)
          std::string n = "gq_vs_q4/";
          n.append(weights).append(tail);
          return n;
        };
        for (DType t : {DType::q4_0, DType::q4_1})
          benchmark::RegisterBenchmark(name(lithe::dtype_name(t)).c_str(), BM_linear, t, n_out, n_in, m, isa, false)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        for (const G& g : gq) {
          lithe::QuantFormat f = g.f;
          if (f.group == 0) f.group = n_in;
          benchmark::RegisterBenchmark(name(g.name).c_str(), BM_linear_gq, f, n_out, n_in, m, isa, g.acts)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
    }
  }
}

// ---- SmolLM2-135M linears of one token (decode) / per token of a 512 prefill --------------------
struct Layer {
  Tensor q, k, v, o, gate, up, down;
};
struct Model {
  std::vector<Layer> layers;
  Tensor head;
  int64_t bytes = 0;
};
Model& smollm2() {
  static Model model = [] {
    Model md;
    uint32_t seed = 100;
    for (int l = 0; l < 30; ++l) {
      Layer ly{random_weight(DType::q4_1, 576, 576, seed++),  random_weight(DType::q4_1, 192, 576, seed++),
               random_weight(DType::q4_1, 192, 576, seed++),  random_weight(DType::q4_1, 576, 576, seed++),
               random_weight(DType::q4_1, 1536, 576, seed++), random_weight(DType::q4_1, 1536, 576, seed++),
               random_weight(DType::q4_1, 576, 1536, seed++)};
      for (const Tensor* t : {&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down})
        md.bytes += static_cast<int64_t>(t->nbytes());
      md.layers.push_back(std::move(ly));
    }
    md.head = random_weight(DType::q8_0, 49152, 576, seed);
    md.bytes += static_cast<int64_t>(md.head.nbytes());
    return md;
  }();
  return model;
}

// The timed loop: every linear at m rows, then the head at head_m.
void time_linears(benchmark::State& st, const Model& md, int64_t m, int64_t head_m) {
  const auto x = random_acts(m * 1536, 3);
  std::vector<float> y(static_cast<size_t>(m * 49152));
  for (auto _ : st) {
    for (const Layer& ly : md.layers)
      for (const Tensor* t : {&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down})
        (void)cpu::linear(*t, x.data(), m, y.data());
    (void)cpu::linear(md.head, x.data(), head_m, y.data());
    benchmark::DoNotOptimize(y.data());
  }
}

// split: nullopt = the measured policy; true / false = always / never split over the pool.
void BM_smollm2(benchmark::State& st, int64_t m, cpu::Isa isa, std::optional<bool> split) {
  cpu::force_isa(isa);
  cpu::force_split(split);
  Model& md = smollm2();
  time_linears(st, md, m, 1);  // logits of the last token only
  cpu::force_split(std::nullopt);
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(m), benchmark::Counter::kIsIterationInvariantRate);
  if (m == 1) {
    st.counters["GB/s"] = benchmark::Counter(static_cast<double>(md.bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  } else {
    const double flops = 2.0 * static_cast<double>(m) * 30 * (2 * 576 * 576 + 2 * 192 * 576 + 3 * 1536 * 576) +
                         2.0 * 49152 * 576;
    st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
}

// One batched decode step of the server: the same linears and the head at m sequences, the weights
// as loaded (each batched call decodes its blocks into scratch) or with a batch layout (decoded
// once, at load: cpu::with_batch_layout, serve's default).
void BM_smollm2_batch(benchmark::State& st, int64_t m, cpu::Isa isa, bool layouts) {
  cpu::force_isa(isa);
  Model md = smollm2();
  if (layouts) {
    auto lay = [](Tensor& t) { t = cpu::with_batch_layout(t).value(); };
    for (Layer& ly : md.layers)
      for (Tensor* t : {&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down}) lay(*t);
    lay(md.head);
  }
  time_linears(st, md, m, m);
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(m), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- attention --------------------------------------------------------------------------------
void BM_attention(benchmark::State& st, int64_t n_q, int64_t n_kv, DType kv, cpu::Isa isa) {
  cpu::force_isa(isa);
  const int64_t H = 9, G = 3, D = 64;
  const auto q = random_acts(n_q * H * D, 1);
  const auto kf = random_acts(n_kv * G * D, 2), vf = random_acts(n_kv * G * D, 3);
  std::vector<uint16_t> kh, vh;
  for (float f : kf) kh.push_back(lithe::f32_to_f16(f));
  for (float f : vf) vh.push_back(lithe::f32_to_f16(f));
  std::vector<int32_t> kv_pos(static_cast<size_t>(n_kv)), q_pos(static_cast<size_t>(n_q));
  for (int64_t i = 0; i < n_kv; ++i) kv_pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = 0; i < n_q; ++i) q_pos[static_cast<size_t>(i)] = static_cast<int32_t>(n_kv - n_q + i);
  std::vector<float> out(static_cast<size_t>(n_q * H * D));
  cpu::AttentionArgs a{q.data(), n_q,  q_pos.data(), kv == DType::f16 ? static_cast<const void*>(kh.data()) : kf.data(),
                       kv == DType::f16 ? static_cast<const void*>(vh.data()) : vf.data(),
                       kv,       n_kv, kv_pos.data(), G * D, H, G, D, 0.125f, out.data()};
  for (auto _ : st) {
    (void)cpu::attention(a);
    benchmark::DoNotOptimize(out.data());
  }
  // causal: query t sees n_kv - n_q + t + 1 slots; 2 dot products of D per (query, head, slot)
  double pairs = 0;
  for (int64_t t = 0; t < n_q; ++t) pairs += static_cast<double>(n_kv - n_q + t + 1);
  st.counters["GFLOP/s"] = benchmark::Counter(pairs * H * D * 4 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_row_ops(benchmark::State& st, int64_t m, cpu::Isa isa) {
  cpu::force_isa(isa);
  auto x = random_acts(m * 1536, 1), w = random_acts(1536, 2), g = random_acts(m * 1536, 3);
  cpu::RopeTable table;
  table.rot_dim = 64;
  for (int i = 0; i < 32; ++i) table.inv_freq.push_back(static_cast<float>(std::pow(10000.0, -i / 32.0)));
  std::vector<int32_t> pos(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::vector<float> q(static_cast<size_t>(m * 576));
  for (auto _ : st) {  // one layer's element-wise work: 2 norms, 2 residual adds, silu_mul, rope of q and k
    cpu::rmsnorm(x.data(), w.data(), 1e-5f, m, 576, q.data());
    cpu::rmsnorm(x.data(), w.data(), 1e-5f, m, 576, q.data());
    cpu::silu_mul(g.data(), x.data(), m * 1536);
    cpu::add_inplace(x.data(), q.data(), m * 576);
    cpu::add_inplace(x.data(), q.data(), m * 576);
    cpu::rope(q.data(), m, 9, 64, pos.data(), table, cpu::RopeStyle::interleaved);
    cpu::rope(q.data(), m, 3, 64, pos.data(), table, cpu::RopeStyle::interleaved);
    benchmark::DoNotOptimize(q.data());
  }
}


void register_all() {
  benchmark::RegisterBenchmark("memcpy/256MB/1thread", BM_memcpy, false)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("memcpy/256MB/pool", BM_memcpy, true)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("read/256MB/1thread", BM_read, false)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("read/256MB/pool", BM_read, true)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("pool/round_trip", BM_pool_round_trip)->Unit(benchmark::kMicrosecond)->UseRealTime();

  struct S {
    int64_t n_out, n_in;
  };
  const S smol[] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}};
  const DType dtypes[] = {DType::q4_0, DType::q4_1, DType::q8_0, DType::q4_k, DType::q6_k,
                          DType::f16,  DType::bf16, DType::f32};
  for (cpu::Isa isa : isas()) {
    const std::string in = std::string(cpu::isa_name(isa));
    for (int64_t m : {1, 512}) {
      if (m == 512 && isa == cpu::Isa::scalar) continue;  // minutes per run; the reference speed
      for (DType t : dtypes) {
        for (const S& s : smol) {
          if (s.n_in % lithe::dtype_traits(t).block_elems != 0) continue;  // k-quants need n_in % 256 == 0
          const std::string name = "linear/" + std::string(lithe::dtype_name(t)) + "/" + dims(s.n_out, s.n_in) + "/m" +
                                   std::to_string(m) + "/" + in;
          benchmark::RegisterBenchmark(name.c_str(), BM_linear, t, s.n_out, s.n_in, m, isa, false)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
        if (m == 1) {  // the same weights kept in L2: compute ceiling of the matrix-vector kernel
          const std::string name = "linear_hot/" + std::string(lithe::dtype_name(t)) + "/576x1536/m1/" + in;
          benchmark::RegisterBenchmark(name.c_str(), BM_linear, t, 576, 1536, 1, isa, true)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
        if (m == 1) {  // llama-2-7b-like projection
          const std::string name = "linear/" + std::string(lithe::dtype_name(t)) + "/4096x4096/m1/" + in;
          benchmark::RegisterBenchmark(name.c_str(), BM_linear, t, 4096, 4096, 1, isa, false)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
      const std::string head = "linear/q8_0/49152x576/m" + std::to_string(m) + "/" + in;
      benchmark::RegisterBenchmark(head.c_str(), BM_linear, DType::q8_0, 49152, 576, m, isa, false)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    if (isa != cpu::Isa::scalar) {
      const std::pair<const char*, std::optional<bool>> policies[] = {
          {"", std::nullopt}, {"/split_always", true}, {"/split_never", false}};
      for (const auto& [suffix, split] : policies)
        benchmark::RegisterBenchmark(("smollm2/decode/" + in + suffix).c_str(), BM_smollm2, 1, isa, split)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      benchmark::RegisterBenchmark(("smollm2/prefill512/" + in).c_str(), BM_smollm2, 512, isa, std::nullopt)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      for (bool layouts : {false, true})
        benchmark::RegisterBenchmark(("smollm2/batch64" + std::string(layouts ? "+layouts/" : "/") + in).c_str(),
                                     BM_smollm2_batch, 64, isa, layouts)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
    for (DType kv : {DType::f32, DType::f16}) {
      const std::string k = std::string(lithe::dtype_name(kv));
      benchmark::RegisterBenchmark(("attention/decode_ctx512/" + k + "/" + in).c_str(), BM_attention, 1, 512, kv, isa)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
      if (isa != cpu::Isa::scalar)
        benchmark::RegisterBenchmark(("attention/prefill512/" + k + "/" + in).c_str(), BM_attention, 512, 512, kv, isa)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
    for (int64_t m : {1, 512})
      benchmark::RegisterBenchmark(("rowops/layer/m" + std::to_string(m) + "/" + in).c_str(), BM_row_ops, m, isa)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  }
  register_gq();
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("detected_isa", std::string(cpu::isa_name(cpu::detected_isa())));
  benchmark::AddCustomContext("threads", std::to_string(lithe::global_pool().size()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
