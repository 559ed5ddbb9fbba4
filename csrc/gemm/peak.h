// A single-thread micro-benchmark of the CPU's floating-point FMA peak: the ceiling
// that GEMM efficiency is measured against.
#pragma once

namespace eml::gemm {

// GFLOP/s (an FMA counts as 2 flops) of one thread running enough independent FMA
// chains to fill every FMA pipe, for about `seconds`. Uses AVX2+FMA when the CPU has
// it (whatever the active ISA), otherwise portable multiply-adds as an estimate.
double measure_fma_peak_gflops(bool use_double, double seconds = 0.2);

}  // namespace eml::gemm
