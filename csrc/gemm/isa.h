// Which instruction set the GEMM kernels may use, detected once at run time.
//
// The extension is built without -m flags (it must load on any x86-64 or Arm CPU),
// so AVX2/FMA kernels are compiled with target attributes and chosen here.
#pragma once

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

}  // namespace eml::gemm
