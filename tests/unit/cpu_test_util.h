// Helpers shared by the CPU kernel tests.
#pragma once

#include <vector>

#include "lithe/kernels/cpu.h"

namespace lithe::cpu {

// Every ISA this machine can run, scalar first.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (static_cast<int>(i) <= static_cast<int>(detected_isa())) out.push_back(i);
  return out;
}

}  // namespace lithe::cpu
