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
#endif

namespace eml::gemm {

enum class Isa { generic, avx2 };

// The best ISA this CPU and OS support: avx2 needs AVX2, FMA and the OS saving
// the YMM registers (XGETBV). Always generic on non-x86 CPUs.
Isa detected_isa();

// The ISA the kernels use now. Starts as detected_isa(), or generic when the
// environment variable EML_OPS_ISA=generic is set (read once).
Isa active_isa();

// Selects the kernels' ISA for all threads. Throws std::invalid_argument when the
// CPU lacks it.
void set_active_isa(Isa isa);

const char* isa_name(Isa isa);

// Whether the CPU converts float16 <-> float32 in hardware (F16C, CPUID.1:ECX bit 29,
// with the OS saving the YMM registers). The avx2 kernels for float16 need it; without
// it float16 operands are converted by scalar code.
bool cpu_has_f16c();

// Whether the CPU has bfloat16 dot-product instructions (AVX512_BF16 or AMX-BF16, with the
// OS saving their state). ATen's oneDNN kernels use them and then run bfloat16 several times
// faster than our float-accumulating AVX2 kernels can.
bool cpu_has_native_bf16();

}  // namespace eml::gemm
