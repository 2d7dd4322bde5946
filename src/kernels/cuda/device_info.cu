// Device query and a smoke kernel (affine on f32) used to check the CUDA build end to end; the
// per-device facts and host helpers of common.cuh.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "common.cuh"
#include "lithe/kernels/cuda_device.h"

namespace lithe::cuda {
namespace {

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status(StatusCode::io_error,
                std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// One thread per element, grid-stride so any size works with a bounded grid.
__global__ void affine_kernel(const float* __restrict__ x, float a, float b, float* __restrict__ out, long n) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x)
    out[i] = fmaf(a, x[i], b);
}

}  // namespace

Result<DeviceInfo> device_info(int device) {
  cudaDeviceProp p{};
  LITHE_TRY(check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties"));
  DeviceInfo d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  d.shared_per_block_optin = p.sharedMemPerBlockOptin;
  size_t free_b = 0, total_b = 0;
  LITHE_TRY(check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
  d.free_memory = free_b;
  return d;
}

Status affine_f32(const Tensor& x, float a, float b, Tensor& out) {
  if (x.device() != Device::cuda || out.device() != Device::cuda || x.dtype() != DType::f32 ||
      out.dtype() != DType::f32 || x.shape() != out.shape() || !x.is_contiguous() || !out.is_contiguous())
    return Status(StatusCode::invalid_argument, "affine_f32 needs two contiguous f32 cuda tensors of one shape, got " +
                                                    x.describe() + " and " + out.describe());
  const long n = x.numel();
  if (n == 0) return Status::ok();
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<long>((n + threads - 1) / threads, 65535));
  affine_kernel<<<blocks, threads>>>(x.data_as<float>(), a, b, out.data_as<float>(), n);
  LITHE_TRY(check(cudaGetLastError(), "affine_kernel launch"));
  return check(cudaDeviceSynchronize(), "affine_kernel");
}

namespace detail {
std::string ptr_str(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

Status device_facts(DeviceFacts& out) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> sms{}, major{}, smem{}, mem{};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return Status(StatusCode::internal, std::string("cannot read the current device: ") +
                                            (e != cudaSuccess ? cudaGetErrorString(e) : "device index out of range"));
  }
  if (sms[dev].load(std::memory_order_acquire) == 0) {
    int a = 0, b = 0, c = 0;
    e = cudaDeviceGetAttribute(&a, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&b, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&c, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(StatusCode::internal, std::string("cannot read device attributes: ") + cudaGetErrorString(e));
    }
    // Peak bandwidth: memory clock (kHz) x 2 (double data rate) x bus width (bits) / 8; left 0
    // where either attribute is missing (not an error: only tuning reads it).
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      clock_khz = bus_bits = 0;
    }
    mem[dev].store(static_cast<int>(int64_t{clock_khz} * 2 * bus_bits / 8 / 1000000), std::memory_order_relaxed);
    major[dev].store(b, std::memory_order_relaxed);
    smem[dev].store(c, std::memory_order_relaxed);
    sms[dev].store(a, std::memory_order_release);
  }
  out.sms = sms[dev].load(std::memory_order_acquire);
  out.major = major[dev].load(std::memory_order_relaxed);
  out.smem_optin = smem[dev].load(std::memory_order_relaxed);
  out.mem_gbs = mem[dev].load(std::memory_order_relaxed);
  return Status::ok();
}

bool env_zero(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, "0") == 0;
}

int env_knob(const char* name, int fallback) {
  const char* e = std::getenv(name);
  const int v = e != nullptr && *e != '\0' ? std::atoi(e) : -1;
  return v >= 0 ? v : fallback;
}

bool count_fences() {
  static const bool on = env_knob("LITHE_COUNT_FENCES") == 1;
  return on;
}

int max_active_clusters(const void* kernel, const cudaLaunchConfig_t& cfg, int size) {
  DeviceFacts d;
  int dev = 0;
  if (size < 1 || size > kMaxClusterSize || !device_facts(d).is_ok() || d.major < 9 || cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  struct Key {
    int dev;
    const void* kernel;
    int size;
    unsigned block;
    size_t smem;
    bool operator==(const Key&) const = default;
  };
  static std::mutex mu;
  static std::vector<std::pair<Key, int>> known;  // a handful of (kernel, shape) pairs per process
  const Key key{dev, kernel, size, cfg.blockDim.x * cfg.blockDim.y * cfg.blockDim.z, cfg.dynamicSmemBytes};
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [k, n] : known)
    if (k == key) return n;
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim = {static_cast<unsigned>(size), 1, 1};
  cudaLaunchConfig_t c = cfg;
  c.gridDim = dim3(static_cast<unsigned>(size));
  c.attrs = &a;
  c.numAttrs = 1;
  cudaFuncAttributes fa{};
  int n = 0;
  if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess || fa.ptxVersion < 90 ||
      cudaOccupancyMaxActiveClusters(&n, kernel, &c) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  known.emplace_back(key, n);
  return n;
}

bool pdl_enabled(bool by_default) {
  // Off by default for most kernels: side by side on the decode step (bench/cuda_decode_ab.sh,
  // llama2-7b f16 tg at depth 512, 2026-11-21) it lost 3% on an H100 (182.5 / 183.1 vs 188.6 / 188.8
  // tok/s) and 9.5% on an H200 (222.6 vs 246.1). The gq GEMV asks for it (common.cuh).
  static const int forced = [] {  // 1 on, 0 off, -1 unset
    const char* e = std::getenv("LITHE_PDL");
    return e == nullptr ? -1 : std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  static const bool sm90 = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return sm90 && (forced < 0 ? by_default : forced == 1);
}
}  // namespace detail

}  // namespace lithe::cuda
