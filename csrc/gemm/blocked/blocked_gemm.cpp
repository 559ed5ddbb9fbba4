// The entry point: argument checks, the degenerate shapes, the split of C among
// threads, and per part the choice between the packed and packing-free paths.
#include "blocked_gemm.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "../bias_fill.h"
#include "../int_math.h"
#include "../isa.h"
#include "../row_sums.h"
#include "block_sizes.h"
#include "direct_gemm.h"
#include "kernels.h"
#include "packed_gemm.h"
#include "packing.h"
#include "partition.h"
#include "path.h"
#include "tuning.h"
#include "workspace.h"

namespace eml::gemm {
namespace blocked {
namespace {

// One thread's share: the whole product for a block of C, in the accumulator type.
// stream_c: Epilogue::stream_c (the packed path's).
template <typename S>
void gemm_on_this_thread(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                         OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums,
                         bool stream_c) {
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
    case Path::transposed:
      transposed_gemm(kernels, a, b, c, bias);
      break;
    case Path::strip:
      if (has_strip_tiles(kernels)) {
        strip_gemm(kernels, a, b, c, bias);
        break;
      }
      packed_gemm(kernels, a, b, c, bias, row_sums, nullptr, stream_c);  // an ISA without them
      return;
    case Path::interleaved:
      if (has_interleaved_tiles(kernels)) {
        interleaved_gemm(kernels, a, b, c, bias);
        break;
      }
      [[fallthrough]];  // an ISA without them (a forced path, an override): packed
    case Path::automatic:
    case Path::packed:
      packed_gemm(kernels, a, b, c, bias, row_sums, nullptr, stream_c);
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

struct StagingBlock {
  int64_t rows = 0, cols = 0;
};

// The block of C that a 16-bit product computes in float before rounding it. Where writing C
// bounds the product (k <= kShallowK, e.g. dL/dW of 1 row), a block within half of L2, so
// that its float results are rounded while they are there and only S goes to memory (dL/dW
// of 1 x 4096 x 4096 in bfloat16, Zen 4: 7.1 against 9.6 ms). Else the large blocks above:
// the packed path packs B again per block of rows, the packing-free paths read it again.
StagingBlock staging_block(int64_t m, int64_t n, int64_t k) {
  if (k <= kShallowK) {
    const int64_t elements = std::max<int64_t>(1, tuning().stream_b_bytes / 2 / sizeof(float));
    return {std::clamp<int64_t>(elements / n, 1, m), std::min(n, elements)};
  }
  const CacheBlocks& blocks = tuning().blocks<float>();
  const int64_t cols = std::min(n, max_block_cols(blocks));
  return {std::min(m, std::max(blocks.mc, kAccumulatorElements / cols)), cols};
}

// A 16-bit GEMM's share on one thread: float results (and float row sums) in the thread's
// accumulator buffer, rounded once to S.
template <typename S>
void half_gemm_on_this_thread(const Kernels<S>& kernels, ConstMatrixView<S> a,
                              ConstMatrixView<S> b, OutputMatrix<S> c, const float* bias,
                              S* row_sums) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const auto [block_rows, block_cols] = staging_block(m, n, k);
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
                          bias != nullptr ? bias + first_col : nullptr, sum_rows ? sums : nullptr,
                          /*stream_c=*/false);  // the buffer is read right away
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
               OutputMatrix<S> c, const Acc<S>* bias, S* row_sums, bool stream_c) {
  if constexpr (is_half_v<S>) {
    half_gemm_on_this_thread(kernels, a, b, c, bias, row_sums);
  } else {
    gemm_on_this_thread(kernels, a, b, c, bias, row_sums, stream_c);
  }
}

// The grid of parts of an m x n x k product in T (the accumulator type) for `threading`.
template <typename T>
Grid choose_part_grid(int64_t m, int64_t n, int64_t k, const Threading& threading) {
  return choose_grid(m, n, k, threading.parallel_for ? threading.num_threads : 1,
                     BlockSizes<T>::mr, BlockSizes<T>::nr, tuning().min_parallel_flops);
}

// Calls body(rows, cols, part_row_sums) for each part of C's grid on `threading`, with
// part_row_sums the rows' entries of row_sums (nullable) for the parts at column 0 and null
// for the others, so that each row of A is summed exactly once.
template <typename T, typename S, typename Body>
void for_each_part(int64_t m, int64_t n, const Grid& grid, const Threading& threading,
                   S* row_sums, const Body& body) {
  threading.run(0, grid.parts(), [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      const Range rows = split_range(m, grid.row_parts, part / grid.col_parts, BlockSizes<T>::mr);
      const Range cols = split_range(n, grid.col_parts, part % grid.col_parts, BlockSizes<T>::nr);
      const bool sums_rows = row_sums != nullptr && part % grid.col_parts == 0;
      body(rows, cols, sums_rows ? row_sums + rows.begin : nullptr);
    }
  });
}

template <typename S>
ConstMatrixView<S> rows_of(ConstMatrixView<S> a, Range rows) {
  return {a.data + rows.begin * a.row_stride, rows.end - rows.begin, a.cols, a.row_stride,
          a.col_stride};
}

template <typename S>
ConstMatrixView<S> cols_of(ConstMatrixView<S> b, Range cols) {
  return {b.data + cols.begin * b.col_stride, b.rows, cols.end - cols.begin, b.row_stride,
          b.col_stride};
}

// Columns `cols` of b (from a multiple of NR) in prepack_b's layout (blocked_gemm.h), written
// into `packed`, which holds all of b's columns.
template <typename T>
void prepack_columns(const Kernels<T>& kernels, ConstMatrixView<T> b, int64_t kc, Range cols,
                     T* packed) {
  const int64_t padded_cols = round_up(b.cols, BlockSizes<T>::nr);
  for (int64_t pc = 0; pc < b.rows; pc += kc) {
    const int64_t kc_here = std::min(kc, b.rows - pc);
    const ConstMatrixView<T> block{b.data + pc * b.row_stride, kc_here, b.cols, b.row_stride,
                                   b.col_stride};
    pack_b<T>(cols_of(block, cols), packed + pc * padded_cols + cols.begin * kc_here,
              kernels.pack_b_rows, kernels.pack_b_steps);
  }
}

// Whether the threads pack B once between them instead of each packing its part's columns:
// where several rows of parts would pack the same columns (BLIS shares its packed panel
// likewise), the packed B fits the threads' shares of L3, and the parts would run the packed
// path anyway (which the product with prepacked B always runs).
template <typename T>
bool shares_packed_b(ConstMatrixView<T> a, ConstMatrixView<T> b, const Grid& grid) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  const int64_t packed_bytes = prepacked_b_size<T>(k, n) * static_cast<int64_t>(sizeof(T));
  if (grid.row_parts < 2 || packed_bytes > tuning().l3_share_bytes * grid.parts()) return false;
  const Range rows = split_range(m, grid.row_parts, 0, BlockSizes<T>::mr);
  const Range cols = split_range(n, grid.col_parts, 0, BlockSizes<T>::nr);
  const Path path = choose_path(rows_of(a, rows), cols_of(b, cols), rows.end - rows.begin,
                                cols.end - cols.begin, k);
  return path == Path::packed || path == Path::automatic;
}

// B packed as prepack_b packs it, into the calling thread's shared buffer, by `shares` parts
// of its columns on `threading`.
template <typename T>
PrepackedB<T> pack_shared_b(const Kernels<T>& kernels, ConstMatrixView<T> b, int64_t shares,
                            const Threading& threading) {
  const int64_t kc = prepack_depth<T>(b.rows);
  T* packed = shared_b_buffer<T>(static_cast<size_t>(prepacked_b_size<T>(b.rows, b.cols)));
  threading.run(0, shares, [&](int64_t first_share, int64_t end_share) {
    for (int64_t share = first_share; share < end_share; ++share) {
      prepack_columns(kernels, b, kc, split_range(b.cols, shares, share, BlockSizes<T>::nr),
                      packed);
    }
  });
  return {packed, b.rows, b.cols, kc};
}

template <typename S>
OutputMatrix<S> block_of(OutputMatrix<S> c, Range rows, Range cols) {
  return {c.data + rows.begin * c.ld + cols.begin, rows.end - rows.begin, cols.end - cols.begin,
          c.ld};
}

// The fewest steps of k in one thread's share where the threads split k (depth_shares).
constexpr int64_t kMinShareDepth = 256;
// Shares of k start at multiples of this many steps (a 64-byte line of float).
constexpr int64_t kShareDepthUnit = 16;
// The widest C whose threads split k (with at most kStripMaxRows rows): the widest measured,
// and a bound on the partial products buffer (768 KiB of float per thread beyond the first).
constexpr int64_t kDepthSplitMaxCols = 768;

// Into how many shares of k the threads split a float or double product instead of splitting
// C (1: they split C). For dL/dX = G·W (A contiguous along k, B's rows contiguous) with a small
// C (at most kStripMaxRows x kDepthSplitMaxCols) whose grid's parts would not take the strip
// path (fewer than 33 rows, fewer than four strips of columns, or no strip path at all:
// strip_max_cols 0, as with AVX2), each thread computes all of C over its share of k, on the
// path one thread takes, and the shares are summed after. C's parts would each re-read all of
// W's rows for a part of their columns, or all of W for a part of the rows. Xeon, 2 threads,
// dL/dX over MKL, split C against split k: 64 x 256 x 4096 0.64x-0.73x against 1.0x-1.07x
// (parts of 128 columns left the strip path), 8 x 256 x 4096 0.83x-0.89x against
// 1.23x-1.26x; our AVX2 kernels 1.0x-1.45x faster. G^T·X (dL/dW) ran 0.86x-1.04x of split
// C, and parts that stay on the strip path (256 x 512 x 2048) no faster: they split C.
template <typename T>
int64_t depth_shares(ConstMatrixView<T> a, ConstMatrixView<T> b, const Grid& grid) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (a.col_stride != 1 || b.col_stride != 1 || m > kStripMaxRows || n > kDepthSplitMaxCols) {
    return 1;
  }
  const int64_t shares = std::min(grid.parts(), k / kMinShareDepth);
  if (shares < 2) return 1;
  const Range rows = split_range(m, grid.row_parts, 0, BlockSizes<T>::mr);
  const Range cols = split_range(n, grid.col_parts, 0, BlockSizes<T>::nr);
  const Path part_path = choose_path(rows_of(a, rows), cols_of(b, cols), rows.end - rows.begin,
                                     cols.end - cols.begin, k);
  return part_path == Path::strip ? 1 : shares;
}

// dst[0:n] += the same row of each of `count` matrices of n columns, m x n apart.
template <typename T>
void add_partial_rows(T* dst, const T* partials, int64_t count, int64_t m, int64_t n) {
  for (int64_t share = 0; share < count; ++share) {
    const T* row = partials + share * m * n;
    for (int64_t j = 0; j < n; ++j) dst[j] += row[j];
  }
}

// C = A·B (+ bias) in `shares` shares of k on `threading`: the first share written into C
// with the bias, the others into the calling thread's partial products buffer; then the
// threads add those into C, each a block of its rows.
template <typename T>
void depth_split_gemm(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
                      OutputMatrix<T> c, const T* bias, int64_t shares,
                      const Threading& threading) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  T* partials = partial_products_buffer<T>(static_cast<std::size_t>(m * n * (shares - 1)));
  threading.run(0, shares, [&](int64_t first_share, int64_t end_share) {
    for (int64_t share = first_share; share < end_share; ++share) {
      const Range steps = split_range(k, shares, share, kShareDepthUnit);
      const int64_t depth = steps.end - steps.begin;
      const ConstMatrixView<T> share_a{a.data + steps.begin * a.col_stride, m, depth,
                                       a.row_stride, a.col_stride};
      const ConstMatrixView<T> share_b{b.data + steps.begin * b.row_stride, depth, n,
                                       b.row_stride, b.col_stride};
      const OutputMatrix<T> share_c =
          share == 0 ? c : OutputMatrix<T>{partials + (share - 1) * m * n, m, n, n};
      gemm_on_this_thread(kernels, share_a, share_b, share_c, share == 0 ? bias : nullptr,
                          nullptr, /*stream_c=*/false);
    }
  });
  threading.run(0, shares, [&](int64_t first_share, int64_t end_share) {
    const Range rows = {split_range(m, shares, first_share, 1).begin,
                        split_range(m, shares, end_share - 1, 1).end};
    for (int64_t i = rows.begin; i < rows.end; ++i) {
      add_partial_rows(c.data + i * c.ld, partials + i * n, shares - 1, m, n);
    }
  });
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
  const Grid grid = choose_part_grid<T>(m, n, k, threading);
  if (grid.parts() == 1) {
    part_gemm(kernels, a, b, c, bias, epilogue.a_row_sums, epilogue.stream_c);
    return;
  }
  if constexpr (!is_half_v<S>) {
    if (const int64_t shares = depth_shares(a, b, grid);
        shares > 1 && epilogue.a_row_sums == nullptr) {
      depth_split_gemm(kernels, a, b, c, bias, shares, threading);
      return;
    }
    if (shares_packed_b(a, b, grid)) {
      blocked_gemm(a, pack_shared_b(kernels, b, grid.parts(), threading), c, epilogue, threading);
      return;
    }
  }
  for_each_part<T>(m, n, grid, threading, epilogue.a_row_sums,
                   [&](Range rows, Range cols, S* part_row_sums) {
    const ConstMatrixView<S> part_a = rows_of(a, rows);
    const ConstMatrixView<S> part_b = cols_of(b, cols);
    if (rows.end == rows.begin || cols.end == cols.begin) {  // not with choose_grid's grids
      if (part_row_sums != nullptr) row_sums_of(kernels, part_a, part_row_sums);
      return;
    }
    part_gemm(kernels, part_a, part_b, block_of(c, rows, cols),
              bias != nullptr ? bias + cols.begin : nullptr, part_row_sums, epilogue.stream_c);
  });
}

namespace {
bool prepack_aligned(const void* data) {
  return data != nullptr && reinterpret_cast<uintptr_t>(data) % kPrepackedAlignment == 0;
}
}  // namespace

template <typename T>
int64_t prepack_depth(int64_t k) {
  return blocked::packed_depth<T>(k);
}

template <typename T>
int64_t prepacked_b_size(int64_t k, int64_t n) {
  return k * round_up(n, blocked::BlockSizes<T>::nr);
}

template <typename T>
void prepack_b(ConstMatrixView<T> b, int64_t kc, T* packed) {
  using namespace blocked;
  if (b.rows < 0 || b.cols < 0) throw std::invalid_argument("prepack_b: negative matrix size");
  if (kc < 1) throw std::invalid_argument("prepack_b: the depth kc must be at least 1");
  if (b.rows > 0 && b.cols > 0 && !prepack_aligned(packed)) {
    throw std::invalid_argument("prepack_b: the packed buffer is not 64-byte aligned");
  }
  prepack_columns(active_kernels<T>(), b, kc, {0, b.cols}, packed);
}

template <typename T>
void blocked_gemm(ConstMatrixView<T> a, const PrepackedB<T>& b, OutputMatrix<T> c,
                  const Epilogue<T>& epilogue, const Threading& threading) {
  using namespace blocked;
  // B's sizes as a view without data: the shape checks read no element.
  const ConstMatrixView<T> b_sizes{nullptr, b.k, b.n, 0, 0};
  check_gemm_shapes("blocked_gemm (prepacked B)", a, b_sizes, c);
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (k > 0 && n > 0 && (b.kc < 1 || !prepack_aligned(b.data))) {
    throw std::invalid_argument(
        "blocked_gemm (prepacked B): B's data missing or not 64-byte aligned, or kc below 1");
  }
  if (m == 0) return;
  if (k == 0 || n == 0) {
    if (n > 0) fill_with_bias(c, epilogue.bias);
    if (epilogue.a_row_sums != nullptr) {
      if (k == 0) std::fill(epilogue.a_row_sums, epilogue.a_row_sums + m, T{});
      else sum_rows(a, epilogue.a_row_sums);
    }
    return;
  }
  const Kernels<T>& kernels = active_kernels<T>();
  const int64_t padded_cols = round_up(n, BlockSizes<T>::nr);
  const auto part = [&](Range rows, Range cols, T* part_row_sums) {
    const PackedPanels<T> panels{b.data, padded_cols, b.kc, cols.begin};
    packed_gemm(kernels, rows_of(a, rows), b_sizes, block_of(c, rows, cols),
                epilogue.bias != nullptr ? epilogue.bias + cols.begin : nullptr, part_row_sums,
                &panels, epilogue.stream_c);
  };
  const Grid grid = choose_part_grid<T>(m, n, k, threading);
  if (grid.parts() == 1) {
    part({0, m}, {0, n}, epilogue.a_row_sums);
    return;
  }
  for_each_part<T>(m, n, grid, threading, epilogue.a_row_sums,
                   [&](Range rows, Range cols, T* part_row_sums) {
    if (rows.end == rows.begin || cols.end == cols.begin) {  // not with choose_grid's grids
      if (part_row_sums != nullptr) sum_rows(rows_of(a, rows), part_row_sums);
      return;
    }
    part(rows, cols, part_row_sums);
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

#define EML_INSTANTIATE_PREPACKED(T)                                                       \
  template int64_t prepack_depth<T>(int64_t);                                               \
  template int64_t prepacked_b_size<T>(int64_t, int64_t);                                   \
  template void prepack_b<T>(ConstMatrixView<T>, int64_t, T*);                              \
  template void blocked_gemm<T>(ConstMatrixView<T>, const PrepackedB<T>&, OutputMatrix<T>, \
                                const Epilogue<T>&, const Threading&);
EML_INSTANTIATE_PREPACKED(float)
EML_INSTANTIATE_PREPACKED(double)
#undef EML_INSTANTIATE_PREPACKED

}  // namespace eml::gemm
