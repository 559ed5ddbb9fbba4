#include "peak.h"

#include <chrono>
#include <cstdint>

#include "isa.h"

#if EML_GEMM_X86
#include <immintrin.h>
#endif

namespace eml::gemm {
namespace {

using Clock = std::chrono::steady_clock;

// Twelve independent accumulators: more than FMA latency (4-5 cycles) times FMA
// pipes (2) on current x86 cores, so the pipes, not the dependencies, limit.
constexpr int kChains = 12;
constexpr int64_t kIterationsPerRound = 1 << 16;

volatile double g_sink;  // keeps the results alive

#if EML_GEMM_X86

// Returns flops done in one round.
EML_TARGET_AVX2 double avx2_round_float() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 0.001f * c);
  const __m256 mul = _mm256_set1_ps(0.9999999f);
  const __m256 add = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIterationsPerRound; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
  }
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  g_sink = _mm256_cvtss_f32(total);
  return 2.0 * 8 * kChains * static_cast<double>(kIterationsPerRound);
}

EML_TARGET_AVX2 double avx2_round_double() {
  __m256d acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_pd(1.0 + 0.001 * c);
  const __m256d mul = _mm256_set1_pd(0.9999999);
  const __m256d add = _mm256_set1_pd(1e-7);
  for (int64_t it = 0; it < kIterationsPerRound; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_pd(acc[c], mul, add);
  }
  __m256d total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_pd(total, acc[c]);
  g_sink = _mm256_cvtsd_f64(total);
  return 2.0 * 4 * kChains * static_cast<double>(kIterationsPerRound);
}

// The same chains on 512-bit registers (twice the flops per instruction where the FMA
// pipes are 512 bits wide, as on Zen 5; the same rate as AVX2 where they are split).
EML_TARGET_AVX512 double avx512_round_float() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.001f * c);
  const __m512 mul = _mm512_set1_ps(0.9999999f);
  const __m512 add = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIterationsPerRound; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  g_sink = _mm512_reduce_add_ps(total);
  return 2.0 * 16 * kChains * static_cast<double>(kIterationsPerRound);
}

EML_TARGET_AVX512 double avx512_round_double() {
  __m512d acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_pd(1.0 + 0.001 * c);
  const __m512d mul = _mm512_set1_pd(0.9999999);
  const __m512d add = _mm512_set1_pd(1e-7);
  for (int64_t it = 0; it < kIterationsPerRound; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_pd(acc[c], mul, add);
  }
  __m512d total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_pd(total, acc[c]);
  g_sink = _mm512_reduce_add_pd(total);
  return 2.0 * 8 * kChains * static_cast<double>(kIterationsPerRound);
}

#endif

// Portable estimate: independent multiply-adds over a small array the compiler
// vectorises at the baseline ISA (SSE2 on x86-64, NEON on Arm).
template <typename T>
double portable_round() {
  constexpr int kLanes = 32;
  T acc[kLanes];
  for (int c = 0; c < kLanes; ++c) acc[c] = T(1) + T(0.001) * c;
  const T mul = T(0.9999999), add = T(1e-7);
  for (int64_t it = 0; it < kIterationsPerRound; ++it) {
    for (int c = 0; c < kLanes; ++c) acc[c] = acc[c] * mul + add;
  }
  T total = 0;
  for (int c = 0; c < kLanes; ++c) total += acc[c];
  g_sink = static_cast<double>(total);
  return 2.0 * kLanes * static_cast<double>(kIterationsPerRound);
}

double run_round(bool use_double) {
#if EML_GEMM_X86
  if (active_isa() == Isa::avx512) {
    return use_double ? avx512_round_double() : avx512_round_float();
  }
  if (isa_supported(Isa::avx2)) return use_double ? avx2_round_double() : avx2_round_float();
#endif
  return use_double ? portable_round<double>() : portable_round<float>();
}

}  // namespace

double measure_fma_peak_gflops(bool use_double, double seconds) {
  run_round(use_double);  // warm up: wake the core from low clocks
  // Best of short rounds: robust against interruptions by other processes.
  double best_gflops = 0;
  const auto start = Clock::now();
  do {
    const auto round_start = Clock::now();
    const double flops = run_round(use_double);
    const double elapsed = std::chrono::duration<double>(Clock::now() - round_start).count();
    if (elapsed > 0 && flops / elapsed / 1e9 > best_gflops) best_gflops = flops / elapsed / 1e9;
  } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds);
  return best_gflops;
}

}  // namespace eml::gemm
