// The entry point: argument checks, the degenerate shapes, the split of C among
// threads, and per part the choice between the packed and packing-free paths.
#include "blocked_gemm.h"

#include <algorithm>
#include <vector>

#include "../bias_fill.h"
#include "../isa.h"
#include "../row_sums.h"
#include "block_sizes.h"
#include "direct_gemm.h"
#include "kernels.h"
#include "packed_gemm.h"
#include "partition.h"
#include "path.h"
#include "tuning.h"
#include "workspace.h"

namespace eml::gemm {
namespace blocked {
namespace {

// One thread's share: the whole product for a block of C, in the accumulator type.
template <typename S>
void gemm_on_this_thread(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                         OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums) {
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
  if (row_sums != nullptr) sum_rows(a, row_sums);
}

// Float results of a 16-bit GEMM held at once per thread (8 MiB): C is computed in
// blocks, each rounded when done. Blocks of at least MC rows keep the cost of packing B again
// per block small; blocks of at most this many columns (a multiple of the packed path's
// column blocks, which pack A again anyway) bound the buffer for very wide outputs.
constexpr int64_t kAccumulatorElements = int64_t{1} << 21;

int64_t max_block_cols(const CacheBlocks& blocks) {
  return std::max(blocks.nc, kAccumulatorElements / blocks.mc / blocks.nc * blocks.nc);
}

// A 16-bit GEMM's share on one thread: float results (and float row sums) in the thread's
// accumulator buffer, rounded once to S.
template <typename S>
void half_gemm_on_this_thread(const Kernels<S>& kernels, ConstMatrixView<S> a,
                              ConstMatrixView<S> b, OutputMatrix<S> c, const float* bias,
                              S* row_sums) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const CacheBlocks& blocks = tuning().blocks<float>();
  const int64_t block_cols = std::min(n, max_block_cols(blocks));
  const int64_t block_rows =
      std::min(m, std::max(blocks.mc, kAccumulatorElements / block_cols));
  // Rows that do not alias, so that the packed path need not stage them again.
  const int64_t results_ld = unaliased_ld<float>(block_cols);
  float* results = accumulator_buffer(static_cast<size_t>(block_rows * (results_ld + 1)));
  float* sums = results + block_rows * results_ld;
  for (int64_t first_col = 0; first_col < n; first_col += block_cols) {
    const int64_t cols = std::min(block_cols, n - first_col);
    const ConstMatrixView<S> block_b{b.data + first_col * b.col_stride, k, cols, b.row_stride,
                                     b.col_stride};
    const bool sum_rows = row_sums != nullptr && first_col == 0;  // each row once
    for (int64_t first_row = 0; first_row < m; first_row += block_rows) {
      const int64_t rows = std::min(block_rows, m - first_row);
      const ConstMatrixView<S> block_a{a.data + first_row * a.row_stride, rows, k, a.row_stride,
                                       a.col_stride};
      gemm_on_this_thread(kernels, block_a, block_b,
                          OutputMatrix<float>{results, rows, cols, results_ld},
                          bias != nullptr ? bias + first_col : nullptr, sum_rows ? sums : nullptr);
      for (int64_t i = 0; i < rows; ++i) {
        kernels.narrow(results + i * results_ld, cols,
                       c.data + (first_row + i) * c.ld + first_col);
      }
      if (sum_rows) kernels.narrow(sums, rows, row_sums + first_row);
    }
  }
}

// Row sums of A into S: summed in Acc<S>, rounded once.
template <typename S>
void row_sums_of(const Kernels<S>& kernels, ConstMatrixView<S> a, S* row_sums) {
  if constexpr (is_half_v<S>) {
    std::vector<float> sums(static_cast<size_t>(a.rows));
    sum_rows(a, sums.data());
    kernels.narrow(sums.data(), a.rows, row_sums);
  } else {
    sum_rows(a, row_sums);
  }
}

template <typename S>
void part_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
               OutputMatrix<S> c, const Acc<S>* bias, S* row_sums) {
  if constexpr (is_half_v<S>) {
    half_gemm_on_this_thread(kernels, a, b, c, bias, row_sums);
  } else {
    gemm_on_this_thread(kernels, a, b, c, bias, row_sums);
  }
}

}  // namespace
}  // namespace blocked

template <typename S>
void blocked_gemm(ConstMatrixView<S> a, ConstMatrixView<S> b, OutputMatrix<S> c,
                  const Epilogue<S>& epilogue, const Threading& threading) {
  using namespace blocked;
  using T = Acc<S>;
  check_gemm_shapes("blocked_gemm", a, b, c);
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0) return;
  if (k == 0) {
    fill_with_bias(c, epilogue.bias);
    if (epilogue.a_row_sums != nullptr) {
      std::fill(epilogue.a_row_sums, epilogue.a_row_sums + m, S{});
    }
    return;
  }
  const Kernels<S>& kernels = active_kernels<S>();
  if (n == 0) {
    if (epilogue.a_row_sums != nullptr) row_sums_of(kernels, a, epilogue.a_row_sums);
    return;
  }
  // 16-bit: the bias is added in float, before the one rounding.
  std::vector<float> widened_bias;
  const T* bias = nullptr;
  if constexpr (is_half_v<S>) {
    if (epilogue.bias != nullptr) {
      widened_bias.resize(static_cast<size_t>(n));
      kernels.widen(epilogue.bias, n, widened_bias.data());
      bias = widened_bias.data();
    }
  } else {
    bias = epilogue.bias;
  }
  using Blocks = BlockSizes<T>;
  const Grid grid = choose_grid(m, n, k, threading.parallel_for ? threading.num_threads : 1,
                                Blocks::mr, Blocks::nr, tuning().min_parallel_flops);
  if (grid.parts() == 1) {
    part_gemm(kernels, a, b, c, bias, epilogue.a_row_sums);
    return;
  }
  threading.run(0, grid.parts(), [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      const Range rows = split_range(m, grid.row_parts, part / grid.col_parts, Blocks::mr);
      const Range cols = split_range(n, grid.col_parts, part % grid.col_parts, Blocks::nr);
      const ConstMatrixView<S> part_a{a.data + rows.begin * a.row_stride, rows.end - rows.begin, k,
                                      a.row_stride, a.col_stride};
      const ConstMatrixView<S> part_b{b.data + cols.begin * b.col_stride, k, cols.end - cols.begin,
                                      b.row_stride, b.col_stride};
      const OutputMatrix<S> part_c{c.data + rows.begin * c.ld + cols.begin, rows.end - rows.begin,
                                   cols.end - cols.begin, c.ld};
      // Only the parts at column 0 sum A's rows, so each row is summed exactly once.
      S* part_row_sums = (epilogue.a_row_sums != nullptr && part % grid.col_parts == 0)
                             ? epilogue.a_row_sums + rows.begin
                             : nullptr;
      if (part_c.rows == 0 || part_c.cols == 0) {  // not with choose_grid's grids; still safe
        if (part_row_sums != nullptr) row_sums_of(kernels, part_a, part_row_sums);
        continue;
      }
      part_gemm(kernels, part_a, part_b, part_c, bias != nullptr ? bias + cols.begin : nullptr,
                part_row_sums);
    }
  });
}

#define EML_INSTANTIATE_BLOCKED_GEMM(S)                                                     \
  template void blocked_gemm<S>(ConstMatrixView<S>, ConstMatrixView<S>, OutputMatrix<S>, \
                                const Epilogue<S>&, const Threading&);
EML_INSTANTIATE_BLOCKED_GEMM(float)
EML_INSTANTIATE_BLOCKED_GEMM(double)
EML_INSTANTIATE_BLOCKED_GEMM(bfloat16_t)
EML_INSTANTIATE_BLOCKED_GEMM(float16_t)
#undef EML_INSTANTIATE_BLOCKED_GEMM

}  // namespace eml::gemm
