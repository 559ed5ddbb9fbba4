// The packed-path register kernel in portable C++: the compiler vectorises the
// inner loop over NR at the baseline ISA (SSE2 on x86-64, NEON on Arm).
#include "kernels.h"

namespace eml::gemm::blocked {
namespace {

template <typename T, int MR, int NR>
void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict c,
                  int64_t ldc, const T* bias, bool accumulate) {
  T acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int r = 0; r < MR; ++r) {
      const T a_value = a[r];
      for (int j = 0; j < NR; ++j) acc[r][j] += a_value * b[j];
    }
    a += MR;
    b += NR;
  }
  for (int r = 0; r < MR; ++r) {
    T* c_row = c + r * ldc;
    if (accumulate) {
      for (int j = 0; j < NR; ++j) c_row[j] += acc[r][j];
    } else if (bias != nullptr) {
      for (int j = 0; j < NR; ++j) c_row[j] = acc[r][j] + bias[j];
    } else {
      for (int j = 0; j < NR; ++j) c_row[j] = acc[r][j];
    }
  }
}

}  // namespace

template <typename T>
MicroKernel<T> generic_micro_kernel() {
  return &micro_kernel<T, static_cast<int>(BlockSizes<T>::mr), static_cast<int>(BlockSizes<T>::nr)>;
}

template MicroKernel<float> generic_micro_kernel<float>();
template MicroKernel<double> generic_micro_kernel<double>();

}  // namespace eml::gemm::blocked
