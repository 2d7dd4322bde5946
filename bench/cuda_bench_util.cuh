// Timing helpers shared by the CUDA benchmark programs (bench/bench_cuda_*.cu): error checks that
// exit with the failing expression, a spin kernel that keeps the stream busy so that the launches
// queued behind it run back to back whatever the CPU's launch cost, isolated (median) and
// back-to-back timings, and the device's copy bandwidth (the ceiling every table is measured
// against). Each program defines kBenchName before including it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
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

}  // namespace bench
