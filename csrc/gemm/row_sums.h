// Row sums of a strided matrix (the bias gradient: A = G^T), shared by every backend.
//
// A single float running sum over 2^25 ones stalls at 2^24: once the sum is that large,
// adding 1 rounds back to it. So each row is summed in blocks of kSumBlock columns, each
// block into a fresh partial sum that is then added to the row's total (a two-level
// cascade, as at::sum does): the error grows with kSumBlock + cols / kSumBlock, not cols.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gemm.h"

namespace eml::gemm {

// Columns summed into one partial sum before it is added to the row's total.
inline constexpr int64_t kSumBlock = 4096;

// sums[i] = sum_p a(i, p), in accumulator_t<S>, for every row i of `a`.
template <typename S>
void sum_rows(ConstMatrixView<S> a, accumulator_t<S>* sums) {
  using Acc = accumulator_t<S>;
  if (a.row_stride == 1 && a.col_stride != 1) {
    // Rows adjacent in memory (A = G^T): sweep the columns, a chunk of rows at a time.
    constexpr int64_t kChunkRows = 1024;
    Acc partial[kChunkRows];
    for (int64_t first_row = 0; first_row < a.rows; first_row += kChunkRows) {
      const int64_t rows = std::min(kChunkRows, a.rows - first_row);
      Acc* total = sums + first_row;
      std::fill(total, total + rows, Acc(0));
      for (int64_t first_col = 0; first_col < a.cols; first_col += kSumBlock) {
        const int64_t last_col = std::min(a.cols, first_col + kSumBlock);
        std::fill(partial, partial + rows, Acc(0));
        for (int64_t p = first_col; p < last_col; ++p) {
          const S* column = a.data + first_row + p * a.col_stride;
          for (int64_t i = 0; i < rows; ++i) partial[i] += widen(column[i]);
        }
        for (int64_t i = 0; i < rows; ++i) total[i] += partial[i];
      }
    }
    return;
  }
  for (int64_t i = 0; i < a.rows; ++i) {
    const S* row = a.data + i * a.row_stride;
    Acc total = 0;
    for (int64_t first_col = 0; first_col < a.cols; first_col += kSumBlock) {
      const int64_t last_col = std::min(a.cols, first_col + kSumBlock);
      Acc partial = 0;
      for (int64_t p = first_col; p < last_col; ++p) partial += widen(row[p * a.col_stride]);
      total += partial;
    }
    sums[i] = total;
  }
}

}  // namespace eml::gemm
