// Helpers shared by the CPU kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"

namespace lithe::cpu {

// Puts the kernel knobs a test may force (ISA, row split, gq activation mode) back to their
// defaults when it goes out of scope, so one test's choices never leak into the next.
struct KernelKnobsRestore {
  Isa saved = active_isa();
  ~KernelKnobsRestore() {
    force_isa(saved);
    force_split(std::nullopt);
    force_gq_acts(std::nullopt);
  }
};

// Every ISA this machine can run, scalar first.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (static_cast<int>(i) <= static_cast<int>(detected_isa())) out.push_back(i);
  return out;
}

// linear(w, x, m) gives the same bits on 2 and 3 threads as on 1 (the row split changes nothing);
// `what` names the case in failures. Leaves the pool at 3 threads.
inline void expect_thread_invariant(const Tensor& w, const std::vector<float>& x, int64_t m, int64_t n_out,
                                    const std::string& what) {
  std::vector<float> base(static_cast<size_t>(m * n_out));
  set_num_threads(1);
  ASSERT_TRUE(linear(w, x.data(), m, base.data()).is_ok()) << what;
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    std::vector<float> y(base.size());
    ASSERT_TRUE(linear(w, x.data(), m, y.data()).is_ok()) << what;
    EXPECT_EQ(0, std::memcmp(y.data(), base.data(), y.size() * 4)) << what << ", " << threads << " threads";
  }
}

}  // namespace lithe::cpu
