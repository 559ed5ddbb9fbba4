// A single-thread micro-benchmark of the CPU's floating-point FMA peak: the ceiling
// that GEMM efficiency is measured against.
#pragma once

namespace eml::gemm {

// GFLOP/s (an FMA counts as 2 flops) of one thread running enough independent FMA
// chains to fill every FMA pipe, for about `seconds`: the ceiling of the kernels of the
// active ISA. AVX-512 FMAs when it is avx512; otherwise AVX2+FMA when the CPU has them
// (also when the active ISA is generic: the machine's peak), else portable multiply-adds
// as an estimate.
double measure_fma_peak_gflops(bool use_double, double seconds = 0.2);

}  // namespace eml::gemm
