// The entry point: argument checks, the degenerate shapes, the split of C among
// threads, and per part the choice between the packed and packing-free paths.
#include "../blocked_gemm.h"

#include <algorithm>
#include <stdexcept>

#include "../isa.h"
#include "block_sizes.h"
#include "direct_gemm.h"
#include "kernels.h"
#include "packed_gemm.h"
#include "partition.h"
#include "path.h"

namespace eml::gemm {
namespace blocked {
namespace {

template <typename T>
void check_shapes(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c) {
  if (a.rows < 0 || a.cols < 0 || b.rows < 0 || b.cols < 0 || c.rows < 0 || c.cols < 0) {
    throw std::invalid_argument("blocked_gemm: negative matrix size");
  }
  if (a.rows != c.rows || b.cols != c.cols || a.cols != b.rows) {
    throw std::invalid_argument("blocked_gemm: shapes of A (m x k), B (k x n), C (m x n) differ");
  }
  if (c.rows > 1 && c.ld < c.cols) {
    throw std::invalid_argument("blocked_gemm: C's leading dimension is below its column count");
  }
}

template <typename T>
const Kernels<T>& active_kernels() {
#if EML_GEMM_X86
  if (active_isa() == Isa::avx2) return avx2_kernels<T>();
#endif
  return generic_kernels<T>();
}

// k == 0: the product is empty, C is the bias (or zeros).
template <typename T>
void fill_with_bias(OutputMatrix<T> c, const T* bias) {
  for (int64_t i = 0; i < c.rows; ++i) {
    T* row = c.data + i * c.ld;
    if (bias != nullptr) {
      std::copy(bias, bias + c.cols, row);
    } else {
      std::fill(row, row + c.cols, T(0));
    }
  }
}

// One thread's share: the whole product for a block of C.
template <typename T>
void gemm_on_this_thread(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
                         OutputMatrix<T> c, const T* bias, T* row_sums) {
  switch (choose_path(a, b, c.rows, c.cols, a.cols)) {
    case Path::dot:
      dot_gemm(kernels, a, b, c, bias);
      break;
    case Path::broadcast:
      broadcast_gemm(kernels, a, b, c, bias);
      break;
    case Path::stream:
      stream_gemm(kernels, a, b, c, bias);
      break;
    case Path::automatic:
    case Path::packed:
      packed_gemm(kernels, a, b, c, bias, row_sums);
      return;
  }
  if (row_sums != nullptr) compute_row_sums(a, row_sums);
}

}  // namespace
}  // namespace blocked

template <typename T>
void blocked_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                  const Epilogue<T>& epilogue, const Threading& threading) {
  using namespace blocked;
  check_shapes(a, b, c);
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0) return;
  if (k == 0) {
    fill_with_bias(c, epilogue.bias);
    if (epilogue.a_row_sums != nullptr) {
      std::fill(epilogue.a_row_sums, epilogue.a_row_sums + m, T(0));
    }
    return;
  }
  if (n == 0) {
    if (epilogue.a_row_sums != nullptr) compute_row_sums(a, epilogue.a_row_sums);
    return;
  }
  const Kernels<T>& kernels = active_kernels<T>();
  const Grid grid = choose_grid(m, n, k, threading.parallel_for ? threading.num_threads : 1,
                                BlockSizes<T>::mr, BlockSizes<T>::nr);
  if (grid.parts() == 1) {
    gemm_on_this_thread(kernels, a, b, c, epilogue.bias, epilogue.a_row_sums);
    return;
  }
  threading.run(0, grid.parts(), [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      const Range rows = split_range(m, grid.row_parts, part / grid.col_parts, BlockSizes<T>::mr);
      const Range cols = split_range(n, grid.col_parts, part % grid.col_parts, BlockSizes<T>::nr);
      const ConstMatrixView<T> part_a{a.data + rows.begin * a.row_stride, rows.end - rows.begin, k,
                                      a.row_stride, a.col_stride};
      const ConstMatrixView<T> part_b{b.data + cols.begin * b.col_stride, k, cols.end - cols.begin,
                                      b.row_stride, b.col_stride};
      const OutputMatrix<T> part_c{c.data + rows.begin * c.ld + cols.begin, rows.end - rows.begin,
                                   cols.end - cols.begin, c.ld};
      // Only the parts at column 0 sum A's rows, so each row is summed exactly once.
      T* part_row_sums = (epilogue.a_row_sums != nullptr && part % grid.col_parts == 0)
                             ? epilogue.a_row_sums + rows.begin
                             : nullptr;
      if (part_c.rows == 0 || part_c.cols == 0) {  // not with choose_grid's grids; still safe
        if (part_row_sums != nullptr) compute_row_sums(part_a, part_row_sums);
        continue;
      }
      gemm_on_this_thread(kernels, part_a, part_b, part_c,
                          epilogue.bias != nullptr ? epilogue.bias + cols.begin : nullptr,
                          part_row_sums);
    }
  });
}

template void blocked_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>,
                                  OutputMatrix<float>, const Epilogue<float>&, const Threading&);
template void blocked_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                                   OutputMatrix<double>, const Epilogue<double>&,
                                   const Threading&);

}  // namespace eml::gemm
