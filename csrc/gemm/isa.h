// Which instruction set the GEMM kernels may use, detected once at run time.
//
// The extension is built without -m flags (it must load on any x86-64 or Arm CPU),
// so AVX2/FMA kernels are compiled with target attributes and chosen here.
#pragma once

// 1 where the x86 (AVX2) kernels are compiled in. Define EML_GEMM_PORTABLE_ONLY to
// build as on Arm: portable kernels only, detected_isa() == generic.
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(EML_GEMM_PORTABLE_ONLY)
#define EML_GEMM_X86 1
#else
#define EML_GEMM_X86 0
#endif

#if EML_GEMM_X86
// The target of every AVX2 function (kernels, peak probe), run only where active_isa()
// is avx2. f16c: the float16 loads of simd_avx2.h; the avx2 kernels for float16 run only
// where cpu_has_f16c() (kernels.cpp), and no other function emits F16C instructions.
#define EML_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EML_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
// The target of the AVX-512 functions (micro-kernels, peak probe), run only where
// active_isa() is avx512; AVX-512F CPUs all have AVX2, FMA and F16C too.
#define EML_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define EML_AVX512_INLINE __attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) inline
#endif

#include <string>

namespace eml::gemm {

// In order of capability: each ISA's CPUs can run the ones before it. avx512 runs the
// packed path's micro-kernels on 512-bit registers and everything else as avx2 does.
enum class Isa { generic, avx2, avx512 };
inline constexpr Isa kAllIsas[] = {Isa::generic, Isa::avx2, Isa::avx512};

// The best ISA this CPU and OS support: avx2 needs AVX2, FMA and the OS saving the YMM
// registers (XGETBV); avx512 also AVX-512F and the OS saving the ZMM and mask registers.
// Always generic on non-x86 CPUs.
Isa detected_isa();

// Whether the CPU supports `isa` (every ISA up to detected_isa()).
bool isa_supported(Isa isa);

// The ISA the kernels use now. Starts as detected_isa(), or as the one the environment
// variable EML_OPS_ISA names (generic, avx2 or avx512; read once) when the CPU has it.
Isa active_isa();

// Selects the kernels' ISA for all threads. Throws std::invalid_argument when the
// CPU lacks it.
void set_active_isa(Isa isa);

const char* isa_name(Isa isa);

// The ISA of that name (generic, avx2 or avx512); throws std::invalid_argument otherwise.
Isa isa_from_name(const std::string& name);

// Whether the CPU converts float16 <-> float32 in hardware (F16C, CPUID.1:ECX bit 29,
// with the OS saving the YMM registers). The avx2 kernels for float16 need it; without
// it float16 operands are converted by scalar code.
bool cpu_has_f16c();

// Whether the CPU has bfloat16 dot-product instructions (AVX512_BF16 or AMX-BF16, with the
// OS saving their state). ATen's oneDNN kernels use them and then run bfloat16 several times
// faster than our float-accumulating AVX2 kernels can.
bool cpu_has_native_bf16();

// Whether the CPU has AVX512_BF16's dot products (vdpbf16ps), with the OS saving the AVX-512
// state: our bfloat16 dot tiles (blocked/direct_avx512_bf16.cpp) need it.
bool cpu_has_avx512_bf16();

// Whether the CPU has AMX-BF16 tiles (AMX-BF16 and AMX-TILE, with the OS saving the tile
// state), which ATen's oneDNN kernels use for bfloat16: 16 x 16 x 32 products per
// instruction, where vdpbf16ps (our dot tiles) computes 16 x 2.
bool cpu_has_amx_bf16();

// Whether the CPU has AVX-512F but executes its 512-bit FMAs as two 256-bit halves (AMD
// family 19h, Zen 4): 256-bit (AVX2-width) kernels then reach the same FMA rate.
bool cpu_splits_avx512();

}  // namespace eml::gemm
