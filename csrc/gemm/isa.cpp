#include "isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#if EML_GEMM_X86
#if defined(_MSC_VER)
#include <immintrin.h>
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif

namespace eml::gemm {
namespace {

#if EML_GEMM_X86

void cpuid(unsigned leaf, unsigned subleaf, unsigned regs[4]) {
#if defined(_MSC_VER)
  int out[4];
  __cpuidex(out, static_cast<int>(leaf), static_cast<int>(subleaf));
  for (int i = 0; i < 4; ++i) regs[i] = static_cast<unsigned>(out[i]);
#else
  __cpuid_count(leaf, subleaf, regs[0], regs[1], regs[2], regs[3]);
#endif
}

// XCR0: which register states the OS saves on context switches.
unsigned long long read_xcr0() {
#if defined(_MSC_VER)
  return _xgetbv(0);
#else
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
#endif
}

// Whether the OS saves every register state of `mask` (XCR0 bits).
bool os_saves(unsigned long long mask) { return (read_xcr0() & mask) == mask; }
constexpr unsigned long long kXmmYmmState = 0x6;   // XCR0 bits 1 (SSE) and 2 (AVX)
constexpr unsigned long long kAvx512State = 0xe6;  // also 5, 6, 7 (opmask, ZMM halves)
constexpr unsigned long long kAmxTileState = 0x60000;  // 17, 18 (TILECFG, TILEDATA)

bool cpu_has_avx2_fma() {
  unsigned regs[4];
  cpuid(0, 0, regs);
  if (regs[0] < 7) return false;
  cpuid(1, 0, regs);
  const bool fma = (regs[2] >> 12) & 1;
  const bool osxsave = (regs[2] >> 27) & 1;
  const bool avx = (regs[2] >> 28) & 1;
  if (!(fma && osxsave && avx)) return false;
  if (!os_saves(kXmmYmmState)) return false;
  cpuid(7, 0, regs);
  return (regs[1] >> 5) & 1;  // EBX bit 5: AVX2
}

bool cpu_has_f16c_and_avx() {
  unsigned regs[4];
  cpuid(0, 0, regs);
  if (regs[0] < 1) return false;
  cpuid(1, 0, regs);
  const bool osxsave = (regs[2] >> 27) & 1;
  const bool avx = (regs[2] >> 28) & 1;
  const bool f16c = (regs[2] >> 29) & 1;
  if (!(osxsave && avx && f16c)) return false;
  return os_saves(kXmmYmmState);
}

// The CPU's bfloat16 dot products, with the OS saving the AVX-512 state (XCR0 bits 1, 2, 5,
// 6, 7): AVX512_BF16 (CPUID.(7,1):EAX bit 5) and AMX-BF16 (CPUID.(7,0):EDX bit 22), the
// latter usable as tiles with AMX-TILE (EDX bit 24) and the OS saving the tile state.
struct Bf16DotProducts {
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
  bool amx_bf16_tiles = false;
};

Bf16DotProducts bf16_dot_products() {
  unsigned regs[4];
  cpuid(0, 0, regs);
  if (regs[0] < 7) return {};
  cpuid(1, 0, regs);
  if (!((regs[2] >> 27) & 1)) return {};  // OSXSAVE: xgetbv is usable
  if (!os_saves(kAvx512State)) return {};
  Bf16DotProducts found;
  cpuid(7, 0, regs);
  found.amx_bf16 = (regs[3] >> 22) & 1;
  found.amx_bf16_tiles = found.amx_bf16 && ((regs[3] >> 24) & 1) && os_saves(kAmxTileState);
  cpuid(7, 1, regs);
  found.avx512_bf16 = (regs[0] >> 5) & 1;
  return found;
}

bool cpu_has_bf16_dot_products() {
  const Bf16DotProducts found = bf16_dot_products();
  return found.avx512_bf16 || found.amx_bf16;
}

bool cpu_has_avx512_bf16_dot_products() { return bf16_dot_products().avx512_bf16; }

bool cpu_has_amx_bf16_tiles() { return bf16_dot_products().amx_bf16_tiles; }

// AVX-512F (CPUID.(7,0):EBX bit 16) with the OS saving the opmask and ZMM state.
bool cpu_has_avx512f() {
  if (!cpu_has_avx2_fma()) return false;  // also checks that xgetbv is usable
  if (!os_saves(kAvx512State)) return false;
  unsigned regs[4];
  cpuid(7, 0, regs);
  return (regs[1] >> 16) & 1;
}

// AMD family 19h (CPUID.1:EAX base family 0xF plus extended family 0xA): Zen 3 and Zen 4,
// of which only Zen 4 has AVX-512, issued as two 256-bit halves.
bool cpu_is_amd_family_19h() {
  unsigned regs[4];
  cpuid(0, 0, regs);
  const bool amd = regs[1] == 0x68747541 && regs[3] == 0x69746e65 && regs[2] == 0x444d4163;
  if (!amd || regs[0] < 1) return false;  // "AuthenticAMD" in EBX, EDX, ECX
  cpuid(1, 0, regs);
  const unsigned base_family = (regs[0] >> 8) & 0xf, extended_family = (regs[0] >> 20) & 0xff;
  return base_family + (base_family == 0xf ? extended_family : 0) == 0x19;
}

#else

bool cpu_is_amd_family_19h() { return false; }
bool cpu_has_avx2_fma() { return false; }
bool cpu_has_avx512f() { return false; }
bool cpu_has_f16c_and_avx() { return false; }
bool cpu_has_bf16_dot_products() { return false; }
bool cpu_has_avx512_bf16_dot_products() { return false; }
bool cpu_has_amx_bf16_tiles() { return false; }

#endif

Isa initial_isa() {
  const char* requested = std::getenv("EML_OPS_ISA");
  if (requested != nullptr) {
    for (Isa isa : kAllIsas) {
      if (std::strcmp(requested, isa_name(isa)) == 0 && isa_supported(isa)) return isa;
    }
  }
  return detected_isa();  // unset, unknown, or an ISA the CPU lacks: the best it has
}

// A function-local static: initialised once, thread-safely, on first use.
std::atomic<Isa>& active_isa_slot() {
  static std::atomic<Isa> slot{initial_isa()};
  return slot;
}

}  // namespace

Isa detected_isa() {
  static const Isa detected = cpu_has_avx512f()    ? Isa::avx512
                              : cpu_has_avx2_fma() ? Isa::avx2
                                                   : Isa::generic;
  return detected;
}

bool isa_supported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detected_isa());
}

bool cpu_has_f16c() {
  static const bool has_f16c = cpu_has_f16c_and_avx();
  return has_f16c;
}

bool cpu_has_avx512_bf16() {
  static const bool has_avx512_bf16 = cpu_has_avx512_bf16_dot_products();
  return has_avx512_bf16;
}

bool cpu_has_amx_bf16() {
  static const bool has_amx_bf16 = cpu_has_amx_bf16_tiles();
  return has_amx_bf16;
}

bool cpu_has_native_bf16() {
  static const bool has_native_bf16 = cpu_has_bf16_dot_products();
  return has_native_bf16;
}

bool cpu_splits_avx512() {
  static const bool splits = cpu_has_avx512f() && cpu_is_amd_family_19h();
  return splits;
}

Isa active_isa() { return active_isa_slot().load(std::memory_order_relaxed); }

void set_active_isa(Isa isa) {
  if (isa != Isa::generic && isa != Isa::avx2 && isa != Isa::avx512) {
    throw std::invalid_argument("eml_ops: unknown ISA");
  }
  if (!isa_supported(isa)) {
    throw std::invalid_argument(std::string("eml_ops: this CPU (or OS) does not support ") +
                                isa_name(isa) + " (it has " + isa_name(detected_isa()) + ")");
  }
  active_isa_slot().store(isa, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic:
      return "generic";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "unknown";
}

Isa isa_from_name(const std::string& name) {
  for (Isa isa : kAllIsas) {
    if (name == isa_name(isa)) return isa;
  }
  throw std::invalid_argument("eml_ops: unknown ISA '" + name +
                              "'; choose generic, avx2 or avx512");
}

}  // namespace eml::gemm
