#include "macro_kernel.h"

#include <algorithm>

#include "tuning.h"

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

// One micro-tile of C: the full tile straight into C, and so a whole-width tile of fewer
// rows where a kernel for them exists; other edge tiles through `edge_tile`.
template <typename T>
inline void run_tile(MicroKernel<T> micro, const MicroKernel<T>* micro_rows, int64_t kc,
                     const T* a_sliver, const T* b_sliver, T* c_tile, int64_t ldc, int64_t rows,
                     int64_t cols, const T* bias, bool accumulate, T* edge_tile) {
  constexpr int64_t MR = BlockSizes<T>::mr;
  constexpr int64_t NR = BlockSizes<T>::nr;
  if (rows == MR && cols == NR) {
    micro(kc, a_sliver, b_sliver, c_tile, ldc, bias, accumulate);
  } else if (cols == NR && micro_rows != nullptr && micro_rows[rows - 1] != nullptr) {
    micro_rows[rows - 1](kc, a_sliver, b_sliver, c_tile, ldc, bias, accumulate);
  } else {
    micro(kc, a_sliver, b_sliver, edge_tile, NR, nullptr, false);
    store_edge_tile(edge_tile, rows, cols, c_tile, ldc, bias, accumulate);
  }
}

}  // namespace

template <typename T>
void macro_kernel(MicroKernel<T> micro, MicroKernel<T> micro_pair,
                  const MicroKernel<T>* micro_rows, const MicroKernel<T>* micro_pair_rows,
                  int64_t kc, const T* packed_a, const T* packed_b, OutputMatrix<T> c,
                  const T* bias, bool accumulate) {
  constexpr int64_t MR = BlockSizes<T>::mr;
  constexpr int64_t NR = BlockSizes<T>::nr;
  alignas(64) T edge_tile[MR * NR];
  const auto tile = [&](int64_t i, int64_t j) {
    run_tile(micro, micro_rows, kc, packed_a + i * kc, packed_b + j * kc, c.data + i * c.ld + j, c.ld,
             std::min(MR, c.rows - i), std::min(NR, c.cols - j),
             bias != nullptr ? bias + j : nullptr, accumulate, edge_tile);
  };
  // Tiles per column step: two where a pair kernel exists and both tiles are whole wide.
  const auto step_tiles = [&](int64_t j) -> int64_t {
    return micro_pair != nullptr && j + 2 * NR <= c.cols ? 2 : 1;
  };
  const auto tiles = [&](int64_t i, int64_t j, int64_t count) {
    if (count == 2) {
      const int64_t rows = std::min(MR, c.rows - i);
      const MicroKernel<T> pair = rows == MR                  ? micro_pair
                                  : micro_pair_rows != nullptr ? micro_pair_rows[rows - 1]
                                                               : nullptr;
      if (pair != nullptr) {
        pair(kc, packed_a + i * kc, packed_b + j * kc, c.data + i * c.ld + j, c.ld,
             bias != nullptr ? bias + j : nullptr, accumulate);
        return;
      }
    }
    for (int64_t t = 0; t < count; ++t) tile(i, j + t * NR);
  };
  const int64_t panel_bytes = kc * c.cols * static_cast<int64_t>(sizeof(T));
  if (panel_bytes <= tuning().shallow_block_bytes) {
    // A shallow block (e.g. the rank-1 dL/dW of batch 1) is bound by the writes of C:
    // rows outer writes C in memory order, each page whole while it is in cache (on a
    // fresh output the first touch of every page zeroes it: 20% faster at 4096x1x4096).
    for (int64_t i = 0; i < c.rows; i += MR) {
      for (int64_t j = 0, count = 0; j < c.cols; j += count * NR) {
        count = step_tiles(j);
        tiles(i, j, count);
      }
    }
    return;
  }
  // jr outer: one KC x NR sliver of B (or a pair) stays in L1 while the A slivers stream
  // from L2.
  for (int64_t j = 0, count = 0; j < c.cols; j += count * NR) {
    count = step_tiles(j);
    for (int64_t i = 0; i < c.rows; i += MR) tiles(i, j, count);
  }
}

template void macro_kernel<float>(MicroKernel<float>, MicroKernel<float>,
                                  const MicroKernel<float>*, const MicroKernel<float>*, int64_t,
                                  const float*, const float*, OutputMatrix<float>, const float*,
                                  bool);
template void macro_kernel<double>(MicroKernel<double>, MicroKernel<double>,
                                   const MicroKernel<double>*, const MicroKernel<double>*,
                                   int64_t, const double*, const double*, OutputMatrix<double>,
                                   const double*, bool);

}  // namespace eml::gemm::blocked
