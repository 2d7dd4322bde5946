// Run-time choice of the CPU kernel set: cpuid for the instruction sets, xgetbv for the register
// state the OS saves on context switches (an AVX-512 CPU under an OS or hypervisor that does not
// enable the ZMM state must not run AVX-512 code), then LITHE_ISA or force_isa() to pick a lower one.
#include <atomic>
#include <cstdlib>
#include <string>

#include "lithe/core/log.h"
#include "lithe/kernels/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LITHE_X86 1
#endif

namespace lithe::cpu {
namespace {

#if LITHE_X86
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

Isa probe() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::scalar;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !avx) return Isa::scalar;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;     // SSE and AVX state
  const bool zmm_state = (xcr0 & 0xe0) == 0xe0;   // opmask, ZMM0-15 upper halves, ZMM16-31
  if (!ymm_state || __get_cpuid_max(0, nullptr) < 7) return Isa::scalar;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31), avx512vnni = c & (1u << 11);
  if (!(avx2 && fma && f16c)) return Isa::scalar;
  if (zmm_state && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni) return Isa::avx512;
  return Isa::avx2;
}
#else
Isa probe() { return Isa::scalar; }
#endif

Isa clamp(Isa want) { return static_cast<int>(want) <= static_cast<int>(detected_isa()) ? want : detected_isa(); }

Isa initial_isa() {
  const char* env = std::getenv("LITHE_ISA");
  if (env == nullptr || *env == '\0') return detected_isa();
  const auto want = isa_from_name(env);
  if (!want) {
    log::warn("LITHE_ISA='{}' is not one of scalar, avx2, avx512; using {}", env, isa_name(detected_isa()));
    return detected_isa();
  }
  if (clamp(*want) != *want)
    log::warn("LITHE_ISA={}: this CPU only supports up to {}", env, isa_name(detected_isa()));
  return clamp(*want);
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(initial_isa())};
  return slot;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (name == isa_name(i)) return i;
  return std::nullopt;
}

Isa detected_isa() {
  static const Isa isa = probe();
  return isa;
}

Isa active_isa() { return static_cast<Isa>(active_slot().load(std::memory_order_relaxed)); }

void force_isa(Isa isa) { active_slot().store(static_cast<int>(clamp(isa)), std::memory_order_relaxed); }

}  // namespace lithe::cpu
