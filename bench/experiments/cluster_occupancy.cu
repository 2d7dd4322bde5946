// How many thread-block clusters of 2..8 blocks fit on this GPU at once, for blocks of 256
// threads and S KiB of dynamic shared memory (argv, default 200: one block per SM, as the Marlin
// wgmma kernels; 100: two per SM, as the GEMV). nvcc -arch=sm_90a -o /tmp/co bench/experiments/cluster_occupancy.cu && /tmp/co 200
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

__global__ void __launch_bounds__(256, 1) probe(int* out) {
  extern __shared__ int s[];
  if (threadIdx.x == 0 && out != nullptr) out[blockIdx.x] = s[0];
}

int main(int argc, char** argv) {
  const int kib = argc > 1 ? std::atoi(argv[1]) : 200;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, kib * 1024);
  std::printf("%s, %d SMs, %d KiB shared memory per block\n", prop.name, prop.multiProcessorCount, kib);
  for (int ks = 2; ks <= 8; ++ks) {
    cudaLaunchAttribute a{};
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim = {static_cast<unsigned>(ks), 1, 1};
    cudaLaunchConfig_t c{};
    c.gridDim = dim3(ks);
    c.blockDim = dim3(256);
    c.dynamicSmemBytes = static_cast<size_t>(kib) * 1024;
    c.attrs = &a;
    c.numAttrs = 1;
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, probe, &c);
    std::printf("clusters of %d: %d at once (%d blocks)%s%s\n", ks, n, n * ks, e == cudaSuccess ? "" : ": ",
                e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  return 0;
}
