// Built instead of the CUDA solvers when lithe has no CUDA: --device cuda is refused clearly.
#include "lithe/compress/solver_backend.h"

namespace lithe::compress {

Result<std::unique_ptr<SolverBackend>> make_cuda_solver_backend() {
  return error(StatusCode::unsupported, "the GPU compression solvers need a lithe built with CUDA: use --device "
               "cpu, or rebuild on a machine with the CUDA toolkit (nvcc)");
}

}  // namespace lithe::compress
