// compressed_gemm (compressed_gemm.h): the tables of weight kernels per ISA, the
// packing-free path for few rows and the widen-then-blocked path for many.
#include "compressed_gemm.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "../bias_fill.h"
#include "../isa.h"
#include "blocked_gemm.h"
#include "partition.h"
#include "tuning.h"
#include "weight_kernels.h"

namespace eml::gemm {
namespace blocked {

template <typename W>
const WeightKernels<W>& generic_weight_kernels() {
  static const WeightKernels<W> kernels = [] {
    WeightKernels<W> table{};
    set_generic_weight_tiles(table);
    set_generic_weight_widen(table);
    return table;
  }();
  return kernels;
}

#if EML_GEMM_X86
// float16 weights need F16C to be widened in registers (as in kernels.cpp).
template <typename W>
const WeightKernels<W>& avx2_weight_kernels() {
  static const WeightKernels<W> kernels = []() -> WeightKernels<W> {
    if constexpr (std::is_same_v<W, float16_t>) {
      if (!cpu_has_f16c()) return generic_weight_kernels<W>();
    }
    WeightKernels<W> table{};
    set_avx2_weight_tiles(table);
    set_avx2_weight_widen(table);
    return table;
  }();
  return kernels;
}
#endif

template <typename W>
const WeightKernels<W>& active_weight_kernels() {
#if EML_GEMM_X86
  if (active_isa() != Isa::generic) return avx2_weight_kernels<W>();  // AVX-512: the same
#endif
  return generic_weight_kernels<W>();
}

namespace {

// Depth of one k block of the dot loop: a tile's rows of A (float) and of W stay in L1
// while every row tile of A meets the W tile.
constexpr int64_t kDotDepth = 512;

// Rows of W widened to float at once on the many-rows path: 8 MiB of float.
constexpr int64_t kWidenedElements = int64_t{1} << 21;

// Rows of the next dot tile: kDotRows, but never a single row left for last.
int64_t next_tile_rows(int64_t remaining) {
  if (remaining == kDotRows + 1) return 2;
  return std::min<int64_t>(kDotRows, remaining);
}

template <typename W>
void check_shapes(ConstMatrixView<float> a, ConstMatrixView<W> weight, OutputMatrix<float> c) {
  if (a.rows < 0 || a.cols < 0 || weight.rows < 0 || weight.cols < 0) {
    throw std::invalid_argument("compressed_gemm: negative matrix size");
  }
  if (a.rows != c.rows || weight.rows != c.cols || a.cols != weight.cols) {
    throw std::invalid_argument(
        "compressed_gemm: shapes of A (m x k), W (n x k), C (m x n) differ");
  }
  if (weight.cols > 1 && weight.col_stride != 1) {
    throw std::invalid_argument("compressed_gemm: W must be contiguous along k");
  }
  if (c.rows > 1 && c.ld < c.cols) {
    throw std::invalid_argument("compressed_gemm: C's leading dimension is below its column count");
  }
}

// The epilogue on C's columns [first, end): C = C * scales + bias (either may be null).
void scale_and_add_bias(OutputMatrix<float> c, int64_t first, int64_t end, const float* scales,
                        const float* bias) {
  if (scales == nullptr && bias == nullptr) return;
  for (int64_t i = 0; i < c.rows; ++i) {
    float* row = c.data + i * c.ld;
    for (int64_t j = first; j < end; ++j) {
      const float scaled = scales != nullptr ? row[j] * scales[j] : row[j];
      row[j] = bias != nullptr ? scaled + bias[j] : scaled;
    }
  }
}

// C[:, first:end) on the packing-free path; A is contiguous along k (lda).
template <typename W>
void dot_columns(const WeightKernels<W>& kernels, const float* a, int64_t lda,
                 ConstMatrixView<W> weight, OutputMatrix<float> c, int64_t first, int64_t end,
                 const float* scales, const float* bias) {
  const int64_t m = c.rows, k = weight.cols, ldw = weight.row_stride;
  for (int64_t j = first; j < end; j += kDotCols) {
    const int64_t cols = std::min<int64_t>(kDotCols, end - j);
    for (int64_t pc = 0; pc < k; pc += kDotDepth) {
      const int64_t depth = std::min(kDotDepth, k - pc);
      for (int64_t i = 0, rows = 0; i < m; i += rows) {
        rows = next_tile_rows(m - i);
        kernels.dot[rows - 1][cols - 1](depth, a + i * lda + pc, lda, weight.data + j * ldw + pc,
                                        ldw, c.data + i * c.ld + j, c.ld, nullptr, pc > 0);
      }
    }
    scale_and_add_bias(c, j, j + cols, scales, bias);  // while this tile of C is in cache
  }
}

template <typename W>
void dot_path(const WeightKernels<W>& kernels, ConstMatrixView<float> a,
              ConstMatrixView<W> weight, OutputMatrix<float> c, const float* scales,
              const float* bias, const Threading& threading) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  // The dot tiles read A along k: a strided A (few rows) is copied first.
  std::vector<float> a_copy;
  const float* a_data = a.data;
  int64_t lda = a.row_stride;
  if (a.col_stride != 1 && k > 1) {
    a_copy.resize(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) a_copy[i * k + p] = a(i, p);
    }
    a_data = a_copy.data();
    lda = k;
  }
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  const int64_t parts = std::max<int64_t>(
      1, std::min<int64_t>({threading.parallel_for ? threading.num_threads : 1,
                            (n + kDotCols - 1) / kDotCols,
                            static_cast<int64_t>(flops / tuning().min_parallel_flops)}));
  threading.run(0, parts, [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      const Range cols = split_range(n, parts, part, kDotCols);
      dot_columns(kernels, a_data, lda, weight, c, cols.begin, cols.end, scales, bias);
    }
  });
}

template <typename W>
void widened_path(const WeightKernels<W>& kernels, ConstMatrixView<float> a,
                  ConstMatrixView<W> weight, OutputMatrix<float> c, const float* scales,
                  const float* bias, const Threading& threading) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  constexpr int64_t kUnit = BlockSizes<float>::nr;
  const int64_t block_cols =
      std::min(n, std::max(kUnit, kWidenedElements / std::max<int64_t>(k, 1) / kUnit * kUnit));
  std::vector<float> widened(static_cast<size_t>(block_cols * k));
  for (int64_t first = 0; first < n; first += block_cols) {
    const int64_t cols = std::min(block_cols, n - first);
    threading.run(0, cols, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        kernels.widen(weight.data + (first + j) * weight.row_stride, k, widened.data() + j * k);
      }
    });
    // B = (rows first..first+cols of W)^T: k x cols, column j contiguous along k.
    const OutputMatrix<float> block_c{c.data + first, m, cols, c.ld};
    blocked_gemm<float>(a, ConstMatrixView<float>{widened.data(), k, cols, 1, k}, block_c, {},
                        threading);
    const float* block_scales = scales != nullptr ? scales + first : nullptr;
    const float* block_bias = bias != nullptr ? bias + first : nullptr;
    threading.run(0, m, [&](int64_t begin, int64_t end) {
      scale_and_add_bias(OutputMatrix<float>{block_c.data + begin * c.ld, end - begin, cols, c.ld},
                         0, cols, block_scales, block_bias);
    });
  }
}

}  // namespace
}  // namespace blocked

template <typename W>
void compressed_gemm(ConstMatrixView<float> a, ConstMatrixView<W> weight, const float* scales,
                     OutputMatrix<float> c, const float* bias, const Threading& threading) {
  using namespace blocked;
  check_shapes(a, weight, c);
  if (c.rows == 0 || c.cols == 0) return;
  if (a.cols == 0) {
    fill_with_bias(c, bias);
    return;
  }
  const WeightKernels<W>& kernels = active_weight_kernels<W>();
  if (c.rows <= kCompressedDirectRows) {
    dot_path(kernels, a, weight, c, scales, bias, threading);
  } else {
    widened_path(kernels, a, weight, c, scales, bias, threading);
  }
}

#define EML_INSTANTIATE_COMPRESSED_GEMM(W)                                                  \
  template const blocked::WeightKernels<W>& blocked::active_weight_kernels<W>();             \
  template void compressed_gemm<W>(ConstMatrixView<float>, ConstMatrixView<W>, const float*, \
                                   OutputMatrix<float>, const float*, const Threading&);
EML_INSTANTIATE_COMPRESSED_GEMM(int8_t)
EML_INSTANTIATE_COMPRESSED_GEMM(bfloat16_t)
EML_INSTANTIATE_COMPRESSED_GEMM(float16_t)
#undef EML_INSTANTIATE_COMPRESSED_GEMM

}  // namespace eml::gemm
