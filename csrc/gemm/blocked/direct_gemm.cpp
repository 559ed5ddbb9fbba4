#include "direct_gemm.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "../bias_fill.h"
#include "../int_math.h"
#include "../row_sums.h"
#include "path.h"
#include "tuning.h"
#include "workspace.h"

namespace eml::gemm::blocked {
namespace {

// Depth of one k block of the dot path: the operand re-read by the inner loop
// stays in L1 (a dot tile's 4 rows of B: 4 x 512 floats = 8 KiB).
template <typename T>
constexpr int64_t kDotKc = 2048 / sizeof(T);

// Depth of one k block of the broadcast tiles over a B in cache (copied into rows; a narrow B
// read in place for many rows; the most for a narrow side) and of the transposed path's rows of
// W: few enough rows of B that the pages of a B strip stay in the TLB. A B read in place for few
// rows takes kInPlaceKc.
template <typename T>
constexpr int64_t kBroadcastKc = 1024 / sizeof(T);

// Steps of B per block of the strip path: its copied strip takes three quarters of L1 (the
// rest for the 8 rows of A and the tile of C it meets): 192 on a 48 KiB L1 (Xeon, dL/dX of
// 128 x 768 x 3072, 96 to 256 steps ran within 3% of one another).
template <typename S>
int64_t strip_depth() {
  constexpr int64_t strip_row_bytes = kStripTileCols<S> * static_cast<int64_t>(sizeof(S));
  return std::max<int64_t>(kStripPrefetchSteps,
                           tuning().shallow_block_bytes * 3 / 4 / strip_row_bytes);
}

// Columns of C (rows of W) per block of the transposed path: whole tiles of rows of C^T, of
// 6 or of 8 (no edge tile per block), whose block (240 x 64 floats at most as path.cpp
// chooses it: 60 KiB) stays in L1 or L2 until it is transposed into C.
constexpr int64_t kTransposedCols = 40 * kBroadcastRows;

// Rows of the next dot tile: kDotRows, but never leave a single row for last.
int64_t dot_tile_rows(int64_t remaining) {
  if (remaining == kDotRows + 1) return 2;
  return std::min<int64_t>(kDotRows, remaining);
}

// Rows of the half-width tiles over rows of W `ld` values apart. Rows a multiple of an L1 way
// apart (twice aliasing_row_bytes) all fall into one L1 set, which 8 of them overfill with
// the lines of X^T passing through in an 8-way L1 (Zen 3, Zen 4, Skylake): there the
// tuning's aliased_tile_rows (6; 8 with 10 ways or more). Zen 4, 1 thread, 8 rows of X, 6 rows
// against 8: k = 1024 or 4096 1.04x-1.36x; at other strides (k = 512, 768, 1536, 2560)
// 0.8x-0.96x, so there 8.
template <typename S>
int64_t half_tile_rows(int64_t ld) {
  const int64_t l1_way_bytes = 2 * tuning().aliasing_row_bytes;
  if ((ld * static_cast<int64_t>(sizeof(S))) % l1_way_bytes != 0) return kHalfBroadcastRows;
  return std::clamp<int64_t>(tuning().aliased_tile_rows, 1, kHalfBroadcastRows);
}

// Values that `rows` rows of A over k take interleaved: whole steps of kInterleavedLanes<S>.
template <typename S>
constexpr int64_t interleaved_values(int64_t rows, int64_t k) {
  return rows * round_up(k, kInterleavedLanes<S>);
}

// m rows of A in groups for the interleaved tiles: one group up to kInterleavedRows rows, else
// as few groups of at most kInterleavedGroupRows (kernels.h) as there can be, as evenly as
// they can be: the first `longer` groups have one row more than the rest.
struct RowGroups {
  int64_t count, rows_each, longer;
  explicit RowGroups(int64_t m)
      : count(m <= kInterleavedRows ? 1 : ceil_div(m, kInterleavedGroupRows)),
        rows_each(m / count),
        longer(m % count) {}
  int64_t first_row(int64_t g) const { return g * rows_each + std::min(g, longer); }
  int64_t rows(int64_t g) const { return rows_each + (g < longer ? 1 : 0); }
};

// A's rows by groups, each group interleaved as the interleaved tiles read it (kernels.h):
// per step of kInterleavedLanes<S> values of k, each row's values of it, zeros past k. The
// group at first_row starts at interleaved_values<S>(first_row, k) of this thread's buffer
// for A.
template <typename S>
const S* interleave_rows(ConstMatrixView<S> a, const RowGroups& groups) {
  constexpr int64_t lanes = kInterleavedLanes<S>;
  const int64_t steps = ceil_div(a.cols, lanes);
  S* interleaved =
      packed_a_buffer<S>(static_cast<std::size_t>(interleaved_values<S>(a.rows, a.cols)));
  for (int64_t g = 0; g < groups.count; ++g) {
    const int64_t first_row = groups.first_row(g), rows = groups.rows(g);
    S* group = interleaved + interleaved_values<S>(first_row, a.cols);
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t first = step * lanes;
      const int64_t count = std::min(lanes, a.cols - first);
      for (int64_t i = 0; i < rows; ++i) {
        S* dst = group + (step * rows + i) * lanes;
        const S* src = a.data + (first_row + i) * a.row_stride + first * a.col_stride;
        for (int64_t l = 0; l < count; ++l) dst[l] = src[l * a.col_stride];
        std::fill(dst + count, dst + lanes, S{0});
      }
    }
  }
  return interleaved;
}

// A small float or double matrix (a narrow B, or the transposed path's A^T: path.cpp) copied
// into this thread's buffer for B, row-major.
template <typename S>
ConstMatrixView<S> copy_into_rows(ConstMatrixView<S> b) {
  if constexpr (std::is_same_v<S, Acc<S>>) {
    S* rows = packed_b_buffer<S>(static_cast<std::size_t>(b.rows * b.cols));
    for (int64_t j = 0; j < b.cols; ++j) {
      for (int64_t p = 0; p < b.rows; ++p) {
        rows[p * b.cols + j] = b.data[p * b.row_stride + j * b.col_stride];
      }
    }
    return {rows, b.rows, b.cols, b.cols, 1};
  } else {
    throw std::logic_error("broadcast_gemm: a 16-bit B must have contiguous rows");
  }
}

// One width of broadcast tiles: tiles[rows - 1] computes rows x up to `width` columns.
// next_strip: the same tiles prefetching the next strip of B as they go (Kernels::
// broadcast_next), for a B read in place; null: none.
template <typename S>
struct BroadcastTiles {
  const BroadcastTile<S>* tiles;
  int64_t rows;
  int64_t width;
  const BroadcastTile<S>* next_strip = nullptr;
};

// The tile of `shape` at row i and column j of C, over the k block of block_k steps from pc
// (fewer at the end): it overwrites C (plus the bias) in the first block and adds to it in
// the others. prefetch_next: the shape's next_strip tile, where it has them.
template <typename S>
void broadcast_tile_at(BroadcastTiles<S> shape, ConstMatrixView<S> a, ConstMatrixView<S> b,
                       OutputMatrix<Acc<S>> c, const Acc<S>* bias, int64_t i, int64_t j,
                       int64_t pc, int64_t block_k, bool prefetch_next = false) {
  const int64_t rows = std::min(shape.rows, c.rows - i);
  const bool accumulate = pc > 0;
  const BroadcastTile<S>* tiles =
      prefetch_next && shape.next_strip != nullptr ? shape.next_strip : shape.tiles;
  tiles[rows - 1](std::min(block_k, a.cols - pc), a.data + i * a.row_stride + pc * a.col_stride,
                  a.row_stride, a.col_stride, b.data + pc * b.row_stride + j, b.row_stride,
                  c.data + i * c.ld + j, c.ld, std::min(shape.width, c.cols - j),
                  (!accumulate && bias != nullptr) ? bias + j : nullptr, accumulate);
}

// Asks for rows i .. i + rows of A (those that exist), columns pc .. pc + depth, in L2.
template <typename S>
void prefetch_rows(ConstMatrixView<S> a, int64_t i, int64_t rows, int64_t pc, int64_t depth) {
  constexpr int64_t kLineValues = 64 / sizeof(S);
  for (int64_t r = i; r < std::min(i + rows, a.rows); ++r) {
    const S* row = a.data + r * a.row_stride;
    for (int64_t p = pc; p < std::min(pc + depth, a.cols); p += kLineValues) {
      __builtin_prefetch(row + p * a.col_stride, /*read*/ 0, /*L2*/ 2);
    }
  }
}

// C = A·B by tiles of `shape`, each tile of A's rows walking all of k before the next (A's
// rows stream from memory in order; B, re-read per tile, stays in L2), B's rows contiguous.
// With `prefetch`, each k block of a tile asks for the same block of the next tile's rows
// (transposed_gemm: for an A that comes from memory, a stream per row of the tile).
template <typename S>
void broadcast_rows_deep(BroadcastTiles<S> shape, ConstMatrixView<S> a, ConstMatrixView<S> b,
                         OutputMatrix<Acc<S>> c, bool prefetch) {
  for (int64_t i = 0; i < c.rows; i += shape.rows) {
    for (int64_t pc = 0; pc < a.cols; pc += kBroadcastKc<S>) {
      if (prefetch) prefetch_rows(a, i + shape.rows, shape.rows, pc, kBroadcastKc<S>);
      for (int64_t j = 0; j < c.cols; j += shape.width) {
        broadcast_tile_at(shape, a, b, c, nullptr, i, j, pc, kBroadcastKc<S>);
      }
    }
  }
}

// C's columns j .. j + cols are the rows of a block of C^T (cols x m, in L1 or L2), written
// with the bias.
template <typename T>
void transpose_block_into_c(const T* block, int64_t cols, int64_t m, OutputMatrix<T> c,
                            int64_t j, const T* bias) {
  for (int64_t i = 0; i < m; ++i) {
    T* c_row = c.data + i * c.ld + j;
    if (bias == nullptr) {
      for (int64_t col = 0; col < cols; ++col) c_row[col] = block[col * m + i];
    } else {
      for (int64_t col = 0; col < cols; ++col) c_row[col] = block[col * m + i] + bias[j + col];
    }
  }
}

// The depth of the broadcast path's blocks of B for a narrow side (narrow_side, path.h) of
// `narrow` columns: the deepest within half of L1, up to kBroadcastKc, which the rows-outer
// loop then re-reads from L1 (Zen 4, 1 thread, G^T·X as C^T: 64x64 x 4096 92 -> 103
// GFLOP/s, 32x128 x 8192 103 -> 107 against kBroadcastKc).
template <typename S>
int64_t narrow_block_depth(int64_t narrow) {
  const int64_t half_l1 = tuning().shallow_block_bytes / 2;
  return std::clamp<int64_t>(half_l1 / (narrow * static_cast<int64_t>(sizeof(S))), 1,
                             kBroadcastKc<S>);
}

// The broadcast tiles, one vector of columns (AVX-512; two of AVX2) by up to 6 rows.
template <typename S>
BroadcastTiles<S> broadcast_tiles(const Kernels<S>& kernels) {
  return {kernels.broadcast, kBroadcastRows, kBroadcastCols<S>};
}

// AVX-512's few-rows tiles (12 rows by two vectors of columns), where Tuning::few_rows_tiles
// sets them for this type (path.h).
template <typename S>
bool few_rows_tiles_at_hand(const Kernels<S>& kernels) {
  return few_rows_tiles_apply<S>(tuning()) && kernels.few_rows_broadcast[0] != nullptr;
}

template <typename S>
BroadcastTiles<S> few_rows_tiles(const Kernels<S>& kernels) {
  return {kernels.few_rows_broadcast, kFewRowsTileRows, kFewRowsTileCols<S>};
}

// The tiles for a B in cache (copied into rows, a narrow side, or a narrow B read in place for
// many rows) `width` columns wide: the few-rows tiles where they are at hand and C is wider
// than one vector, since each of their broadcasts of A feeds two FMAs. Xeon, forward 1 thread
// over F.linear, against the 6 x 1 tiles: 8192x128x32 0.80x -> 0.96x, 4096x64x64 0.78x ->
// 1.05x, 4096x128x64 0.79x -> 1.0x.
template <typename S>
BroadcastTiles<S> in_cache_tiles(const Kernels<S>& kernels, int64_t width) {
  if (width > kBroadcastCols<S> && few_rows_tiles_at_hand(kernels)) return few_rows_tiles(kernels);
  return broadcast_tiles(kernels);
}

// Depth of one k block of the tiles that read B in place (G·W of few rows): a block of rows of
// B read strip by strip reads each row in order, so its 32 rows are 32 streams that the
// hardware prefetcher follows (kBroadcastKc's 256 rows a page apart, none; pack_panels reads 8
// at a time for the same reason). Xeon, dL/dX 1 thread, against kBroadcastKc: AVX-512's
// few-rows tiles, W from memory 1.5x-1.9x MKL against 0.67x-0.77x, W in cache 1.1x-1.2x
// against 0.8x-0.86x; AVX2's tiles (EML_OPS_ISA=avx2), 8 to 32 rows of a W in L3 1.35x-1.6x
// faster; float16's, 8 rows 1.1x-1.7x. Blocks of 16 rows of B ran as fast from memory and up
// to 10% slower from cache, of 8 up to 20% slower; of 64, 0.63x-0.77x from memory.
constexpr int64_t kInPlaceKc = 32;

// C = A·B by tiles of `shape`, B's rows contiguous, in blocks of block_k steps of k.
template <typename S>
void broadcast_blocks(BroadcastTiles<S> shape, ConstMatrixView<S> a, ConstMatrixView<S> b,
                      OutputMatrix<Acc<S>> c, const Acc<S>* bias, int64_t block_k) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  for (int64_t pc = 0; pc < k; pc += block_k) {
    const int64_t kc = std::min(block_k, k - pc);
    const auto tile = [&](int64_t i, int64_t j, bool prefetch_next = false) {
      broadcast_tile_at(shape, a, b, c, bias, i, j, pc, block_k, prefetch_next);
    };
    if (writes_rows_outer(kc, kc * n * static_cast<int64_t>(sizeof(S)))) {
      // The whole KC x n block of B stays in cache: rows outer writes C in memory order,
      // each page whole while it is in cache (see macro_kernel.cpp). Each tile but a row's
      // last fetches the strip right of its own for the next (shape.next_strip).
      for (int64_t i = 0; i < m; i += shape.rows) {
        for (int64_t j = 0; j < n; j += shape.width) tile(i, j, j + shape.width < n);
      }
      continue;
    }
    // A KC x width sliver of B stays in L1 across all row tiles.
    for (int64_t j = 0; j < n; j += shape.width) {
      for (int64_t i = 0; i < m; i += shape.rows) tile(i, j);
    }
  }
}

}  // namespace

template <typename S>
void dot_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
              OutputMatrix<Acc<S>> c, const Acc<S>* bias) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const int64_t lda = a.row_stride, ldb = b.col_stride;  // B's columns are rows of memory
  auto tile = [&](int64_t i, int64_t j, int64_t pc) {
    const int64_t rows = dot_tile_rows(m - i);
    const int64_t cols = std::min<int64_t>(kDotCols, n - j);
    const bool accumulate = pc > 0;
    kernels.dot[rows - 1][cols - 1](
        std::min(kDotKc<S>, k - pc), a.data + i * lda + pc, lda, b.data + j * ldb + pc, ldb,
        c.data + i * c.ld + j, c.ld, (!accumulate && bias != nullptr) ? bias + j : nullptr,
        accumulate);
  };
  // One tile of the larger operand walks k in order (its rows stream through memory
  // contiguously) while each k block of it, in L1, meets all tiles of the smaller one.
  if (n >= m) {
    for (int64_t j = 0; j < n; j += kDotCols) {
      for (int64_t pc = 0; pc < k; pc += kDotKc<S>) {
        for (int64_t i = 0; i < m; i += dot_tile_rows(m - i)) tile(i, j, pc);
      }
    }
  } else {
    for (int64_t i = 0; i < m; i += dot_tile_rows(m - i)) {
      for (int64_t pc = 0; pc < k; pc += kDotKc<S>) {
        for (int64_t j = 0; j < n; j += kDotCols) tile(i, j, pc);
      }
    }
  }
}

template <typename S>
void broadcast_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                    OutputMatrix<Acc<S>> c, const Acc<S>* bias) {
  // A B copied into rows (it fits L1) in blocks of kBroadcastKc rows; a narrow side's blocks stay
  // in L1; B in place in blocks of kInPlaceKc rows for few rows of C, else of kBroadcastKc.
  if (b.col_stride != 1) {
    broadcast_blocks(in_cache_tiles(kernels, c.cols), a, copy_into_rows(b), c, bias,
                     kBroadcastKc<S>);
    return;
  }
  if constexpr (std::is_same_v<S, Acc<S>>) {
    const int64_t m = c.rows, n = c.cols;
    switch (narrow_side(a, b, m, n, a.cols)) {
      case NarrowSide::rows: {
        // C^T (n x m) = B^T·A^T into a buffer, B^T's values broadcast and A^T's contiguous
        // rows loaded as vectors, then transposed into C.
        S* c_t = staged_c_buffer<S>(static_cast<std::size_t>(n * m));
        broadcast_blocks(in_cache_tiles(kernels, m), b.transposed(), a.transposed(),
                         OutputMatrix<S>{c_t, n, m, m}, nullptr, narrow_block_depth<S>(m));
        transpose_block_into_c(c_t, n, m, c, 0, bias);
        return;
      }
      case NarrowSide::cols:
        broadcast_blocks(in_cache_tiles(kernels, n), a, b, c, bias, narrow_block_depth<S>(n));
        return;
      case NarrowSide::none:
        break;
    }
  }
  // B in place (not copied into rows, nor a narrow side's). Few rows of C (path.cpp's
  // few_rows_in_place): AVX-512's few-rows tiles where they apply, else the broadcast tiles,
  // kInPlaceKc rows of B at a time.
  if (c.rows <= kFewRowsTilesMaxRows) {
    const bool few_rows = few_rows_tiles_at_hand(kernels);
    BroadcastTiles<S> shape = few_rows ? few_rows_tiles(kernels) : broadcast_tiles(kernels);
    // B's rows are W's, often 2 KiB or more apart: a stride that no hardware prefetcher
    // follows, so each tile fetches the next one's strip as it goes (Xeon, dL/dX of 8 to 64
    // rows, 1 thread: W 768 wide 1.08x-1.31x, 1024 to 4096 wide 1.0x-1.11x; 2 threads
    // 1.07x-1.28x; double 1.02x-1.05x; the AVX2 tiles, EML_OPS_ISA=avx2, 1.03x-1.35x).
    shape.next_strip = few_rows ? kernels.few_rows_broadcast_next : kernels.broadcast_next;
    if (shape.next_strip[0] == nullptr) shape.next_strip = nullptr;
    broadcast_blocks(shape, a, b, c, bias, kInPlaceKc);
    return;
  }
  // More rows (path.cpp's narrow B, in cache): each block is a pass over C, so kBroadcastKc
  // rows of B at a time (kInPlaceKc's: Xeon, dL/dX of 4096x128x64 1 thread, 0.75x -> 0.62x).
  broadcast_blocks(in_cache_tiles(kernels, c.cols), a, b, c, bias, kBroadcastKc<S>);
}

template <typename S>
void transposed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                     OutputMatrix<Acc<S>> c, const Acc<S>* bias) {
  if constexpr (std::is_same_v<S, Acc<S>>) {
    const int64_t m = c.rows, n = c.cols;
    const ConstMatrixView<S> a_t = copy_into_rows(a.transposed());  // k x m, rows contiguous
    const ConstMatrixView<S> w = b.transposed();                    // n x k, read in place
    // Few rows of A (at most half the tile width) fill the half-width tiles' columns.
    const BroadcastTiles<S> shape =
        m <= kHalfBroadcastCols<S>
            ? BroadcastTiles<S>{kernels.half_broadcast, half_tile_rows<S>(w.row_stride),
                                kHalfBroadcastCols<S>}
            : BroadcastTiles<S>{kernels.broadcast, kBroadcastRows, kBroadcastCols<S>};
    // A W beyond this thread's L3 share streams from memory, a stream per row of a tile, which
    // the tiles then prefetch (Zen 4, 1 thread, two layers of 8 x 1024 x 4096 and two of 8 x
    // 4096 x 1024, 64 MB of weights: 1.10x-1.20x; a W in L3, 8 x 3072 x 768, ran 0.92x).
    const bool w_from_memory =
        streams_from_memory(w.rows * w.cols * static_cast<int64_t>(sizeof(S)));
    S* block = staged_c_buffer<S>(static_cast<std::size_t>(kTransposedCols * m));
    for (int64_t j = 0; j < n; j += kTransposedCols) {
      const int64_t cols = std::min(kTransposedCols, n - j);
      const ConstMatrixView<S> w_rows{w.data + j * w.row_stride, cols, w.cols, w.row_stride,
                                      w.col_stride};
      broadcast_rows_deep(shape, w_rows, a_t, OutputMatrix<S>{block, cols, m, m}, w_from_memory);
      transpose_block_into_c(block, cols, m, c, j, bias);
    }
  } else {
    throw std::logic_error("transposed_gemm: float and double only");
  }
}

template <typename S>
void interleaved_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                      OutputMatrix<Acc<S>> c, const Acc<S>* bias) {
  if constexpr (std::is_same_v<S, Acc<S>>) {
    const int64_t m = c.rows, n = c.cols, k = a.cols;
    if (!has_interleaved_tiles(kernels) || m > kInterleavedMaxRows || b.row_stride != 1) {
      throw std::logic_error("interleaved_gemm: no tiles for this ISA, or A or B unfit");
    }
    const RowGroups groups(m);
    const S* a_steps = interleave_rows(a, groups);
    const int64_t ldb = b.col_stride;  // B's columns (W's rows) are rows of memory
    for (int64_t j = 0; j < n; j += kInterleavedCols) {
      const int64_t cols = std::min<int64_t>(kInterleavedCols, n - j);
      // Each group of rows in turn reads the same columns of B, the later ones from cache.
      for (int64_t g = 0; g < groups.count; ++g) {
        const int64_t first_row = groups.first_row(g);
        kernels.interleaved[cols - 1][groups.rows(g) - 1](
            k, a_steps + interleaved_values<S>(first_row, k), b.data + j * ldb, ldb,
            c.data + first_row * c.ld + j, c.ld, bias != nullptr ? bias + j : nullptr);
      }
    }
  } else {
    throw std::logic_error("interleaved_gemm: float and double only");
  }
}

template <typename S>
void strip_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                OutputMatrix<Acc<S>> c, const Acc<S>* bias) {
  if constexpr (std::is_same_v<S, Acc<S>>) {
    if (!has_strip_tiles(kernels) || b.col_stride != 1) {
      throw std::logic_error("strip_gemm: no tiles for this ISA, or B's rows not contiguous");
    }
    const int64_t m = c.rows, n = c.cols, k = a.cols;
    constexpr int64_t width = kStripTileCols<S>, rows = kStripTileRows;
    const int64_t depth = strip_depth<S>();
    S* strip = packed_b_buffer<S>(static_cast<std::size_t>(depth * width));
    for (int64_t pc = 0; pc < k; pc += depth) {
      const int64_t kc = std::min(depth, k - pc);
      const bool accumulate = pc > 0;
      // The tile at row i of the strip at column j over this block, B's rows from b_row ldb
      // apart.
      const auto tile = [&](int64_t i, int64_t j, const S* b_row, int64_t ldb) {
        kernels.strip[std::min(rows, m - i) - 1](
            kc, a.data + i * a.row_stride + pc * a.col_stride, a.row_stride, a.col_stride,
            b_row, ldb, c.data + i * c.ld + j, c.ld, std::min(width, n - j),
            (!accumulate && bias != nullptr) ? bias + j : nullptr, accumulate);
      };
      for (int64_t j = 0; j < n; j += width) {
        const S* b_row = b.data + pc * b.row_stride + j;
        if (j + width > n || m < rows) {  // a partial strip, or no whole first tile: in place
          for (int64_t i = 0; i < m; i += rows) tile(i, j, b_row, b.row_stride);
          continue;
        }
        kernels.strip_pack(kc, a.data + pc * a.col_stride, a.row_stride, a.col_stride, b_row,
                           b.row_stride, c.data + j, c.ld,
                           (!accumulate && bias != nullptr) ? bias + j : nullptr, accumulate,
                           strip);
        for (int64_t i = rows; i < m; i += rows) tile(i, j, strip, width);
      }
    }
  } else {
    throw std::logic_error("strip_gemm: float and double only");
  }
}

template <typename S>
void stream_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias) {
  using T = Acc<S>;
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  // kStreamRows rows x kStreamCols of C: 8 KiB, resident in L1 during the k loop.
  constexpr int64_t kStreamCols = 2048 / sizeof(T);
  for (int64_t j = 0; j < n; j += kStreamCols) {
    const int64_t cols = std::min(kStreamCols, n - j);
    fill_with_bias(OutputMatrix<T>{c.data + j, m, cols, c.ld},
                   bias != nullptr ? bias + j : nullptr);
    for (int64_t i = 0; i < m; i += kStreamRows) {
      const int64_t rows = std::min<int64_t>(kStreamRows, m - i);
      const S* a_tile = a.data + i * a.row_stride;
      T* c_tile = c.data + i * c.ld + j;
      if (k <= kSumBlock) {
        kernels.stream[rows - 1](k, a_tile, a.row_stride, a.col_stride, b.data + j, b.row_stride,
                                 c_tile, c.ld, cols);
        continue;
      }
      // A long k: each block of kSumBlock steps sums into a fresh partial tile, added to
      // C after it, so C never is one running sum over all k (see row_sums.h).
      alignas(64) T partial[kStreamRows * kStreamCols];
      for (int64_t pc = 0; pc < k; pc += kSumBlock) {
        std::fill(partial, partial + rows * kStreamCols, T(0));
        kernels.stream[rows - 1](std::min(kSumBlock, k - pc), a_tile + pc * a.col_stride,
                                 a.row_stride, a.col_stride, b.data + pc * b.row_stride + j,
                                 b.row_stride, partial, kStreamCols, cols);
        for (int64_t r = 0; r < rows; ++r) {
          const T* partial_row = partial + r * kStreamCols;
          for (int64_t col = 0; col < cols; ++col) c_tile[r * c.ld + col] += partial_row[col];
        }
      }
    }
  }
}

#define EML_INSTANTIATE_DIRECT(S)                                                          \
  template void dot_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>,        \
                            OutputMatrix<Acc<S>>, const Acc<S>*);                             \
  template void broadcast_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>,  \
                                  OutputMatrix<Acc<S>>, const Acc<S>*);                       \
  template void interleaved_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>, \
                                    OutputMatrix<Acc<S>>, const Acc<S>*);                      \
  template void stream_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>,     \
                               OutputMatrix<Acc<S>>, const Acc<S>*);                          \
  template void strip_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>,      \
                              OutputMatrix<Acc<S>>, const Acc<S>*);                           \
  template void transposed_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>, \
                                   OutputMatrix<Acc<S>>, const Acc<S>*);
EML_INSTANTIATE_DIRECT(float)
EML_INSTANTIATE_DIRECT(double)
EML_INSTANTIATE_DIRECT(bfloat16_t)
EML_INSTANTIATE_DIRECT(float16_t)
#undef EML_INSTANTIATE_DIRECT

}  // namespace eml::gemm::blocked
