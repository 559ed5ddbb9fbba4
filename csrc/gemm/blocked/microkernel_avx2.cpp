// The packed-path register kernels with AVX2 + FMA: float 6x16, double 6x8.
//
// MR x NV vectors of accumulators (12 ymm registers) plus NV vectors of B and one
// broadcast of A fit in the 16 ymm registers; 12 independent FMA chains cover the
// FMA latency (4 cycles) times the 2 FMA pipes of Zen 3 / recent Intel cores.
#include "kernels.h"

#if EML_GEMM_X86

#include "simd_avx2.h"

namespace eml::gemm::blocked {
namespace {

using avx2::Vec;

template <typename T, int MR, int NV>
EML_TARGET_AVX2 void micro_kernel(int64_t kc, const T* a, const T* b, T* c, int64_t ldc,
                                  const T* bias, bool accumulate) {
  using VT = Vec<T>;
  using V = typename VT::V;
  constexpr int L = VT::lanes;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = VT::zero();
  }
  // C is needed only at the end: start fetching it now.
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + NV * L - 1), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = VT::load(b + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V av = VT::broadcast(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = VT::fma(av, bv[v], acc[r][v]);
    }
    a += MR;
    b += NV * L;
  }
  if (accumulate) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        T* dst = c + r * ldc + v * L;
        VT::storeu(dst, VT::add(VT::loadu(dst), acc[r][v]));
      }
    }
  } else if (bias != nullptr) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const V bias_v = VT::loadu(bias + v * L);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) VT::storeu(c + r * ldc + v * L, VT::add(acc[r][v], bias_v));
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) VT::storeu(c + r * ldc + v * L, acc[r][v]);
    }
  }
}

template <typename T>
constexpr int vectors_per_row = static_cast<int>(BlockSizes<T>::nr) / Vec<T>::lanes;

}  // namespace

template <typename T>
MicroKernel<T> avx2_micro_kernel() {
  static_assert(BlockSizes<T>::nr % Vec<T>::lanes == 0);
  return &micro_kernel<T, static_cast<int>(BlockSizes<T>::mr), vectors_per_row<T>>;
}

template MicroKernel<float> avx2_micro_kernel<float>();
template MicroKernel<double> avx2_micro_kernel<double>();

}  // namespace eml::gemm::blocked

#endif
