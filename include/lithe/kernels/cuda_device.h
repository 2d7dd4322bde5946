// What the CUDA device offers (read off the device, never assumed), and a smoke kernel that
// proves the build's architectures (sm_80, sm_90a) run there. Host-only header: no CUDA types.
#pragma once

#include <string>

#include "lithe/core/tensor.h"

namespace lithe::cuda {

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0, free_memory = 0;
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0;
};

Result<DeviceInfo> device_info(int device = 0);

// out[i] = a * x[i] + b for f32 device tensors of equal shape (the smoke kernel).
Status affine_f32(const Tensor& x, float a, float b, Tensor& out);

}  // namespace lithe::cuda
