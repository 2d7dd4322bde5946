// The AVX2 kernel set (AVX2, FMA, F16C): kernels_*.inc compiled with the flags that
// src/CMakeLists.txt gives this file. Chosen at run time only when isa.cpp finds those features.
#include "kernels/cpu/kernel_table.h"

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers about the deliberately undefined vectors behind
// _mm512_undefined_ps() (GCC PR105593); the warning is located in the header, so it is silenced there.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace lithe::cpu::avx2 {
namespace {
using detail::KernelTable;
using detail::LinearJob;
using detail::WKind;
#define LITHE_CPU_ISA Isa::avx2
#include "kernels/cpu/simd.inc"
#include "kernels/cpu/linear_quant.inc"
#include "kernels/cpu/linear_float.inc"
#include "kernels/cpu/linear_gq.inc"
#include "kernels/cpu/ops.inc"
#include "kernels/cpu/attention.inc"
#include "kernels/cpu/table.inc"
}  // namespace
}  // namespace lithe::cpu::avx2

namespace lithe::cpu::detail {
const KernelTable& table_avx2() { return avx2::kTable; }
}  // namespace lithe::cpu::detail

#else  // not x86-64: isa.cpp never selects this set
namespace lithe::cpu::detail {
const KernelTable& table_avx2() { return table_scalar(); }
}  // namespace lithe::cpu::detail
#endif
