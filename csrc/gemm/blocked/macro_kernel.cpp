#include "macro_kernel.h"

#include <algorithm>

namespace eml::gemm::blocked {
namespace {

// Writes the top-left rows x cols of a full MR x NR scratch tile into C.
template <typename T>
void store_edge_tile(const T* tile, int64_t rows, int64_t cols, T* c, int64_t ldc,
                     const T* bias, bool accumulate) {
  constexpr int64_t NR = BlockSizes<T>::nr;
  for (int64_t r = 0; r < rows; ++r) {
    T* c_row = c + r * ldc;
    const T* tile_row = tile + r * NR;
    for (int64_t j = 0; j < cols; ++j) {
      if (accumulate) {
        c_row[j] += tile_row[j];
      } else {
        c_row[j] = bias != nullptr ? tile_row[j] + bias[j] : tile_row[j];
      }
    }
  }
}

}  // namespace

template <typename T>
void macro_kernel(MicroKernel<T> micro, int64_t kc, const T* packed_a, const T* packed_b,
                  OutputMatrix<T> c, const T* bias, bool accumulate) {
  constexpr int64_t MR = BlockSizes<T>::mr;
  constexpr int64_t NR = BlockSizes<T>::nr;
  alignas(64) T edge_tile[MR * NR];
  // jr outer: one KC x NR sliver of B stays in L1 while the A slivers stream from L2.
  for (int64_t j = 0; j < c.cols; j += NR) {
    const int64_t cols = std::min(NR, c.cols - j);
    const T* b_sliver = packed_b + j * kc;
    const T* bias_j = bias != nullptr ? bias + j : nullptr;
    for (int64_t i = 0; i < c.rows; i += MR) {
      const int64_t rows = std::min(MR, c.rows - i);
      const T* a_sliver = packed_a + i * kc;
      T* c_tile = c.data + i * c.ld + j;
      if (rows == MR && cols == NR) {
        micro(kc, a_sliver, b_sliver, c_tile, c.ld, bias_j, accumulate);
      } else {
        micro(kc, a_sliver, b_sliver, edge_tile, NR, nullptr, false);
        store_edge_tile(edge_tile, rows, cols, c_tile, c.ld, bias_j, accumulate);
      }
    }
  }
}

template void macro_kernel<float>(MicroKernel<float>, int64_t, const float*, const float*,
                                  OutputMatrix<float>, const float*, bool);
template void macro_kernel<double>(MicroKernel<double>, int64_t, const double*, const double*,
                                   OutputMatrix<double>, const double*, bool);

}  // namespace eml::gemm::blocked
