#include "direct_gemm.h"

#include <algorithm>

namespace eml::gemm::blocked {
namespace {

// Depth of one k block of the dot path: the operand re-read by the inner loop
// stays in L1 (a dot tile's 4 rows of B: 4 x 512 floats = 8 KiB).
template <typename T>
constexpr int64_t kDotKc = 2048 / sizeof(T);

// Depth of one k block of the broadcast path: few enough rows of B that the pages
// of a B strip stay in the TLB.
template <typename T>
constexpr int64_t kBroadcastKc = 1024 / sizeof(T);

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
  auto tile = [&](int64_t i, int64_t j, int64_t pc) {
    const int64_t rows = dot_tile_rows(m - i);
    const int64_t cols = std::min<int64_t>(kDotCols, n - j);
    const bool accumulate = pc > 0;
    kernels.dot[rows - 1][cols - 1](
        std::min(kDotKc<T>, k - pc), a.data + i * lda + pc, lda, b.data + j * ldb + pc, ldb,
        c.data + i * c.ld + j, c.ld, (!accumulate && bias != nullptr) ? bias + j : nullptr,
        accumulate);
  };
  // One tile of the larger operand walks k in order (its rows stream through memory
  // contiguously) while each k block of it, in L1, meets all tiles of the smaller one.
  if (n >= m) {
    for (int64_t j = 0; j < n; j += kDotCols) {
      for (int64_t pc = 0; pc < k; pc += kDotKc<T>) {
        for (int64_t i = 0; i < m; i += dot_tile_rows(m - i)) tile(i, j, pc);
      }
    }
  } else {
    for (int64_t i = 0; i < m; i += dot_tile_rows(m - i)) {
      for (int64_t pc = 0; pc < k; pc += kDotKc<T>) {
        for (int64_t j = 0; j < n; j += kDotCols) tile(i, j, pc);
      }
    }
  }
}

template <typename T>
void broadcast_gemm(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
                    OutputMatrix<T> c, const T* bias) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  constexpr int64_t kWidth = kBroadcastCols<T>;
  // Blocks of k rows of B, few enough that the pages of a B strip stay in the TLB.
  const int64_t block_k = kBroadcastKc<T>;
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
void stream_gemm(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
                 OutputMatrix<T> c, const T* bias) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  // kStreamRows rows x kStreamCols of C: 8 KiB, resident in L1 during the k loop.
  constexpr int64_t kStreamCols = 2048 / sizeof(T);
  for (int64_t j = 0; j < n; j += kStreamCols) {
    const int64_t cols = std::min(kStreamCols, n - j);
    for (int64_t i = 0; i < m; ++i) {
      T* c_row = c.data + i * c.ld + j;
      if (bias != nullptr) {
        std::copy(bias + j, bias + j + cols, c_row);
      } else {
        std::fill(c_row, c_row + cols, T(0));
      }
    }
    for (int64_t i = 0; i < m; i += kStreamRows) {
      const int64_t rows = std::min<int64_t>(kStreamRows, m - i);
      kernels.stream[rows - 1](k, a.data + i * a.row_stride, a.row_stride, a.col_stride,
                               b.data + j, b.row_stride, c.data + i * c.ld + j, c.ld, cols);
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
template void stream_gemm<float>(const Kernels<float>&, ConstMatrixView<float>,
                                 ConstMatrixView<float>, OutputMatrix<float>, const float*);
template void stream_gemm<double>(const Kernels<double>&, ConstMatrixView<double>,
                                  ConstMatrixView<double>, OutputMatrix<double>, const double*);
template void compute_row_sums<float>(ConstMatrixView<float>, float*);
template void compute_row_sums<double>(ConstMatrixView<double>, double*);

}  // namespace eml::gemm::blocked
