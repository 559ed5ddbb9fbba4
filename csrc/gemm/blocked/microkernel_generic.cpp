// The packed-path register kernel in portable C++: the compiler vectorises the
// inner loop over NR at the baseline ISA (SSE2 on x86-64, NEON on Arm).
#include "kernels.h"

namespace eml::gemm::blocked {
namespace {

// Computes the MR x NR tile in passes of ROWS rows, so that one pass's accumulators
// (ROWS x NR values) fit the 16 vector registers of SSE2; the B sliver is re-read
// from L1 by each pass.
template <typename T, int MR, int NR, int ROWS>
void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict c,
                  int64_t ldc, const T* bias, bool accumulate) {
  static_assert(MR % ROWS == 0, "passes must cover the tile");
  for (int first = 0; first < MR; first += ROWS) {
    T acc[ROWS][NR] = {};
    for (int64_t p = 0; p < kc; ++p) {
      const T* a_step = a + p * MR + first;
      const T* b_step = b + p * NR;
      for (int r = 0; r < ROWS; ++r) {
        const T a_value = a_step[r];
        for (int j = 0; j < NR; ++j) acc[r][j] += a_value * b_step[j];
      }
    }
    for (int r = 0; r < ROWS; ++r) {
      T* c_row = c + (first + r) * ldc;
      if (accumulate) {
        for (int j = 0; j < NR; ++j) c_row[j] += acc[r][j];
      } else if (bias != nullptr) {
        for (int j = 0; j < NR; ++j) c_row[j] = acc[r][j] + bias[j];
      } else {
        for (int j = 0; j < NR; ++j) c_row[j] = acc[r][j];
      }
    }
  }
}

}  // namespace

template <typename T>
MicroKernel<T> generic_micro_kernel() {
  constexpr int kMr = static_cast<int>(BlockSizes<T>::mr);
  constexpr int kNr = static_cast<int>(BlockSizes<T>::nr);
  constexpr int kPassRows = kNr * sizeof(T) <= 32 ? 3 : 2;  // accumulators: 6-8 of 16 registers
  return &micro_kernel<T, kMr, kNr, kPassRows>;
}

template MicroKernel<float> generic_micro_kernel<float>();
template MicroKernel<double> generic_micro_kernel<double>();

}  // namespace eml::gemm::blocked
