// Timing helpers shared by the CUDA benchmark programs (bench/bench_cuda_*.cu): error checks that
// exit with the failing expression, a spin kernel that keeps the stream busy so that the launches
// queued behind it run back to back whatever the CPU's launch cost, isolated (median) and
// back-to-back timings, and the device's copy bandwidth (the ceiling every table is measured
// against). Each program defines kBenchName before including it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lithe/core/status.h"

namespace bench {

[[noreturn]] inline void die(const char* what, const std::string& err, int line) {
  std::fprintf(stderr, "%s:%d: %s failed: %s\n", kBenchName, line, what, err.c_str());
  std::exit(1);
}
inline void check(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) die(what, cudaGetErrorString(e), line);
}
inline void check(cublasStatus_t e, const char* what, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) die(what, cublasGetStatusString(e), line);
}
inline void check(const lithe::Status& s, const char* what, int line) {
  if (!s.is_ok()) die(what, s.to_string(), line);
}
#define CK(x) ::bench::check((x), #x, __LINE__)

// Holds the stream busy for `ns` nanoseconds (globaltimer).
__global__ void spin_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

struct Timing {
  double median_us, b2b_us;  // isolated runs (median), back to back (mean)
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times launch(i) for i = 0..reps-1 queued behind a spin kernel, an event between runs; then the
// same runs back to back with no event between them (as in a replayed graph): total / runs.
template <typename F>
Timing time_runs(F&& launch, int reps, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) launch(i);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(reps) + 1);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  spin_kernel<<<1, 1, 0, s>>>(2'000'000 + 60'000ull * static_cast<uint64_t>(reps));
  CK(cudaEventRecord(ev[0], s));
  for (int i = 0; i < reps; ++i) {
    launch(i);
    CK(cudaEventRecord(ev[static_cast<size_t>(i) + 1], s));
  }
  CK(cudaStreamSynchronize(s));
  std::vector<double> us(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[static_cast<size_t>(i)], ev[static_cast<size_t>(i) + 1]));
    us[static_cast<size_t>(i)] = ms * 1e3;
  }
  spin_kernel<<<1, 1, 0, s>>>(2'000'000 + 60'000ull * static_cast<uint64_t>(reps));
  CK(cudaEventRecord(ev[0], s));
  for (int i = 0; i < reps; ++i) launch(i);
  CK(cudaEventRecord(ev[1], s));
  CK(cudaStreamSynchronize(s));
  float b2b = 0;
  CK(cudaEventElapsedTime(&b2b, ev[0], ev[1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  return {median(us), b2b * 1e3 / reps};
}

// Device-to-device copy of 1 GiB, read + write bytes per second, median of `reps`, in GB/s.
inline double copy_bandwidth(int reps, cudaStream_t s) {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemsetAsync(a, 1, bytes, s));
  const Timing t = time_runs([&](int) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); }, reps, s);
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (t.median_us * 1e-6) / 1e9;
}

// max |got[k] - want[k]| / max |want[k]| over the first n values (the benches' sanity column).
inline double rel_diff(const float* got, const float* want, size_t n) {
  double diff = 0, mag = 0;
  for (size_t k = 0; k < n; ++k) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[k]) - want[k]));
    mag = std::max(mag, std::fabs(static_cast<double>(want[k])));
  }
  return mag > 0 ? diff / mag : diff;
}

// Whether the environment turns engine knob `name` off ("0"), as the engine reads it.
inline bool knob_off(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, "0") == 0;
}

// The integers of environment variable `var` (a comma-separated list, each >= `lo`), or `dflt`
// when it is unset; exits 2 naming the variable on a malformed list.
inline std::vector<int> ints_from_env(const char* var, std::vector<int> dflt, long lo) {
  const char* e = std::getenv(var);
  if (e == nullptr) return dflt;
  std::vector<int> out;
  for (const char* c = e; *c != 0;) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end == c || v < lo) {
      std::fprintf(stderr, "%s=%s: expected a comma-separated list of integers >= %ld\n", var, e, lo);
      std::exit(2);
    }
    out.push_back(static_cast<int>(v));
    c = *end == ',' ? end + 1 : end;
  }
  return out;
}

// The batch sizes of BENCH_M=1,8, or `dflt` when it is unset.
inline std::vector<int> batches_from_env(std::vector<int> dflt) { return ints_from_env("BENCH_M", std::move(dflt), 1); }

// What every benchmark program sets up: the stream, cuBLAS on it, the device, the repetitions per
// row (20 with --quick, else 100) and the copy bandwidth.
struct Bench {
  cudaStream_t s;
  cublasHandle_t blas;
  cudaDeviceProp prop;
  size_t l2;
  double copy_gbs;
  int reps;
  bool quick;
};

// Parses --quick and the program's own flags (name, target), exiting 2 with a usage line on any
// other argument and 1 without a device; then sets up Bench and prints the device and the copy
// bandwidth lines every table starts with.
inline Bench open_bench(int argc, char** argv, std::initializer_list<std::pair<const char*, bool*>> flags = {}) {
  Bench b{};
  for (int i = 1; i < argc; ++i) {
    bool known = std::strcmp(argv[i], "--quick") == 0;
    b.quick = b.quick || known;
    for (const auto& [name, target] : flags)
      if (std::strcmp(argv[i], name) == 0) known = *target = true;
    if (!known) {
      std::string usage = "[--quick]";
      for (const auto& f : flags) usage += std::string(" [") + f.first + "]";
      std::fprintf(stderr, "usage: %s %s\n", argv[0], usage.c_str());
      std::exit(2);
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", kBenchName);
    std::exit(1);
  }
  CK(cudaGetDeviceProperties(&b.prop, 0));
  b.reps = b.quick ? 20 : 100;
  b.l2 = static_cast<size_t>(b.prop.l2CacheSize);
  CK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  CK(cublasCreate(&b.blas));
  CK(cublasSetStream(b.blas, b.s));
  const int copy_reps = b.quick ? 5 : 20;
  b.copy_gbs = copy_bandwidth(copy_reps, b.s);
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %.1f MiB; runs per row: %d\n", b.prop.name, b.prop.major,
              b.prop.minor, b.prop.multiProcessorCount, b.l2 / 1048576.0, b.reps);
  std::printf("copy bandwidth (1 GiB device-to-device, read + write, median of %d): %.0f GB/s\n", copy_reps,
              b.copy_gbs);
  return b;
}

// Copies of a `bytes`-byte operand that together overflow the L2 three times, so rotating through
// them times reads from HBM.
inline int copies_for(size_t bytes, size_t l2) {
  return static_cast<int>(std::max<size_t>(2, (3 * l2 + bytes - 1) / bytes));
}

}  // namespace bench
