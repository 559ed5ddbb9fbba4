#include "direct_gemm.h"

#include <algorithm>

namespace eml::gemm::blocked {
namespace {

// Depth of one k block: the operands re-read by the inner loop stay in L1
// (a dot tile's 4 rows of B: 4 x 512 floats = 8 KiB).
template <typename T>
constexpr int64_t kDirectKc = 2048 / sizeof(T);

// With at most this many rows of A, nothing is re-read enough to block k for: one
// pass streams B (W) from memory in long contiguous runs.
constexpr int64_t kUnblockedRows = 4;

template <typename T>
int64_t direct_kc(int64_t m, int64_t k) {
  return m <= kUnblockedRows ? k : kDirectKc<T>;
}

// Rows of the next dot tile: kDotRows, but never leave a single row for last.
int64_t dot_tile_rows(int64_t remaining) {
  if (remaining == kDotRows + 1) return 2;
  return std::min<int64_t>(kDotRows, remaining);
}

}  // namespace

template <typename T>
void dot_gemm(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
              OutputMatrix<T> c, const T* bias) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const int64_t lda = a.row_stride, ldb = b.col_stride;  // B's columns are rows of memory
  const int64_t block_k = direct_kc<T>(m, k);
  for (int64_t pc = 0; pc < k; pc += block_k) {
    const int64_t kc = std::min(block_k, k - pc);
    const bool accumulate = pc > 0;
    const T* block_bias = accumulate ? nullptr : bias;
    auto tile = [&](int64_t i, int64_t rows, int64_t j) {
      const int64_t cols = std::min<int64_t>(kDotCols, n - j);
      kernels.dot[rows - 1][cols - 1](kc, a.data + i * lda + pc, lda, b.data + j * ldb + pc, ldb,
                                      c.data + i * c.ld + j, c.ld,
                                      block_bias != nullptr ? block_bias + j : nullptr,
                                      accumulate);
    };
    // The outer loop walks the larger dimension, so the inner one reuses a small
    // tile of the other operand from L1.
    if (n >= m) {
      for (int64_t j = 0; j < n; j += kDotCols) {
        for (int64_t i = 0; i < m; i += dot_tile_rows(m - i)) tile(i, dot_tile_rows(m - i), j);
      }
    } else {
      for (int64_t i = 0; i < m; i += dot_tile_rows(m - i)) {
        for (int64_t j = 0; j < n; j += kDotCols) tile(i, dot_tile_rows(m - i), j);
      }
    }
  }
}

template <typename T>
void broadcast_gemm(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
                    OutputMatrix<T> c, const T* bias) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  constexpr int64_t kWidth = kBroadcastCols<T>;
  const int64_t block_k = direct_kc<T>(m, k);
  for (int64_t pc = 0; pc < k; pc += block_k) {
    const int64_t kc = std::min(block_k, k - pc);
    const bool accumulate = pc > 0;
    for (int64_t j = 0; j < n; j += kWidth) {
      const int64_t cols = std::min(kWidth, n - j);
      const T* tile_bias = (!accumulate && bias != nullptr) ? bias + j : nullptr;
      // A KC x width sliver of B stays in L1 across all row tiles.
      for (int64_t i = 0; i < m; i += kBroadcastRows) {
        const int64_t rows = std::min<int64_t>(kBroadcastRows, m - i);
        kernels.broadcast[rows - 1](kc, a.data + i * a.row_stride + pc * a.col_stride,
                                    a.row_stride, a.col_stride, b.data + pc * b.row_stride + j,
                                    b.row_stride, c.data + i * c.ld + j, c.ld, cols, tile_bias,
                                    accumulate);
      }
    }
  }
}

template <typename T>
void compute_row_sums(ConstMatrixView<T> a, T* row_sums) {
  for (int64_t i = 0; i < a.rows; ++i) row_sums[i] = T(0);
  // Sweep A in memory order when its rows are the strided dimension.
  if (a.row_stride == 1 && a.col_stride != 1) {
    for (int64_t p = 0; p < a.cols; ++p) {
      const T* column = a.data + p * a.col_stride;
      for (int64_t i = 0; i < a.rows; ++i) row_sums[i] += column[i];
    }
    return;
  }
  for (int64_t i = 0; i < a.rows; ++i) {
    const T* row = a.data + i * a.row_stride;
    T sum = 0;
    for (int64_t p = 0; p < a.cols; ++p) sum += row[p * a.col_stride];
    row_sums[i] = sum;
  }
}

template void dot_gemm<float>(const Kernels<float>&, ConstMatrixView<float>,
                              ConstMatrixView<float>, OutputMatrix<float>, const float*);
template void dot_gemm<double>(const Kernels<double>&, ConstMatrixView<double>,
                               ConstMatrixView<double>, OutputMatrix<double>, const double*);
template void broadcast_gemm<float>(const Kernels<float>&, ConstMatrixView<float>,
                                    ConstMatrixView<float>, OutputMatrix<float>, const float*);
template void broadcast_gemm<double>(const Kernels<double>&, ConstMatrixView<double>,
                                     ConstMatrixView<double>, OutputMatrix<double>,
                                     const double*);
template void compute_row_sums<float>(ConstMatrixView<float>, float*);
template void compute_row_sums<double>(ConstMatrixView<double>, double*);

}  // namespace eml::gemm::blocked
