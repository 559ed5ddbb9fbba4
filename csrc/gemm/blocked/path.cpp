#include "path.h"

#include <atomic>
#include <type_traits>

#include "../row_sums.h"
#include "kernels.h"
#include "tuning.h"

namespace eml::gemm::blocked {
namespace {

std::atomic<Path> g_forced_path{Path::automatic};

// A B with contiguous columns goes to the broadcast path from this many rows of A on (fewer
// run as fast or faster packed: Zen 3, 16 to 48 x 64 x 64; Zen 4, 64 to 192 x 64 x 64..128,
// packed 1.0x-1.25x with AVX-512, 0.9x-1.15x with AVX2, and at 256 rows 1.0x and 0.9x) and
// up to this many columns.
constexpr int64_t kCopiedBMinRows = 256;
constexpr int64_t kCopiedBMaxCols = 64;

// From this depth on, a few rows of A read B in place rather than packed: the transposed
// path (direct_gemm.h) with narrow tiles, for rows of A that fill whole broadcast tiles, up
// to transposed_max_rows (path.h), and the dot path up to Tuning::dot_max_rows.
constexpr int64_t kDeepK = 256;

// narrow_side: at most this many values on the narrow side of C, from this depth on, with the
// other side's rows each shorter than a page. G^T·X against the packed path, 1 thread, rows x
// columns x depth, Zen 4 AVX-512 float, the narrow side as the tiles' columns: C^T (narrow
// rows) 32x128 at k = 128 to 16384 1.18x-1.26x, 32x256 x 16384 1.6x, 16x128 to 16x512
// 1.3x-1.44x, 48x256 x 4096 1.08x, 64x64 x 4096 1.13x, 64x256 x 2048 1.03x-1.05x, 64x512 x
// 1024 1.0x, 32x512 and 32x768 1.06x-1.12x; C (narrow columns) 64x32 x 4096 1.28x, 128x32 x
// 8192 1.23x, 96x48 x 4096 1.13x, 512x32 x 2048 1.13x, 256x64 x 2048 1.05x. But rows of 1024
// or more floats (4 KiB) on the wide side 0.67x-0.96x, a page per step of k; k of 32 and 64
// 1.0x; a narrow side of 8 or 10 (part of a tile) 0.56x-0.76x. AVX2, 32 and 64 rows,
// 1.08x-1.27x; double 32x128, 64x64 and 32x256 1.03x-1.16x.
constexpr int64_t kNarrowSideMaxValues = 64;
constexpr int64_t kNarrowSideMinDepth = 128;
constexpr int64_t kPageBytes = 4096;

// The most rows of A the interleaved path takes at depth k, up to `max_rows`: groups of 8 rows
// beyond the first re-read each tile's rows of W from cache, which pays off the deeper k is.
// Zen 4 AVX-512, 1 thread, against the path before (transposed for whole tiles of 16 rows,
// else dot or packed): 10 to 16 rows 1.1x-2.3x at any depth (four 10 x 1024 x 4096 from
// memory 2.3x, 12 x 2048 x 2048 1.75x, 16 x 2048 x 2048 1.12x); 20 to 64 rows 1.0x-1.8x from
// k = 256 on (24 x 256 x 1024 1.5x, 40 x 768 x 3072 1.2x, 64 x 1024 x 4096 1.07x), 0.8x-1.0x
// shallower; 80 to 128 rows 1.05x-1.25x from k = 768 on, 0.7x-1.0x at k = 512 and below.
// Whether m rows of A times a B of b_bytes with contiguous columns (G·W) read B in place (the
// broadcast path) rather than pack it. The tiles read B's rows in order, 32 at a time
// (direct_gemm.cpp's kInPlaceKc), which the hardware prefetcher follows from memory too.
// - AVX-512's few-rows tiles: up to 64 rows. Xeon, dL/dX 1 thread, against packed: 12 to 32
//   rows of a 16 to 64 MiB W 1.15x-2.5x, 48 and 64 rows of a 16 MiB W 1.1x-1.35x, 96 and 128
//   rows 0.9x-1.05x.
// - Narrow tiles: up to 32 rows (Zen 3, Zen 4; Xeon with EML_OPS_ISA=avx2: 8 and 16 rows of a
//   W in L3 1.4x-1.7x, 24 and 32 rows 1.0x-1.1x, 48 and 64 rows 0.9x-1.0x).
// - Otherwise up to 8 rows: with AVX-512's 6 x 1-vector tiles packing B won from 16 rows on
//   (Xeon: 16 x 2048 x 2048 1.14x, 32 x 1024 x 1024 1.9x).
// Beyond this thread's L3 share, up to 16 of those rows. Xeon, W from memory, against packed:
// few-rows tiles, 8 and 16 rows of 256 MiB 1.5x and 1.2x, 32 rows 0.97x; AVX2 tiles, 8 and 16
// rows of 64 MiB 1.25x-1.5x, 32 rows 1.06x; float16's 6 x 1-vector tiles, 8 rows of 32 and 128
// MiB 1.2x-1.3x.
template <typename T>
bool few_rows_in_place(const Tuning& limits, int64_t m, int64_t b_bytes) {
  constexpr int64_t kRowsFromMemory = 16;
  const int64_t max_rows = few_rows_tiles_apply<T>(limits) ? kFewRowsTilesMaxRows
                           : limits.narrow_tiles > 0       ? 32
                                                           : 8;
  return m <= max_rows && (b_bytes <= limits.l3_share_bytes || m <= kRowsFromMemory);
}

constexpr int64_t kInterleavedAnyDepthRows = 2 * kInterleavedRows;
constexpr int64_t kInterleavedDeepRows = 8 * kInterleavedRows;
constexpr int64_t kInterleavedDeeperK = 3 * kDeepK;

int64_t interleaved_rows_at(int64_t k, int64_t max_rows) {
  if (k >= kInterleavedDeeperK) return max_rows;
  return std::min(max_rows, k >= kDeepK ? kInterleavedDeepRows : kInterleavedAnyDepthRows);
}

template <typename T>
bool dot_applies(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  return a.col_stride == 1 && b.row_stride == 1;
}

// Whether broadcast_gemm copies B into rows first: float or double B whose columns are
// contiguous (the forward's W^T) and that fits L1.
template <typename T>
bool copies_b_into_rows(ConstMatrixView<T> b) {
  return std::is_same_v<T, Acc<T>> && b.row_stride == 1 &&
         b.rows * b.cols * static_cast<int64_t>(sizeof(T)) <= tuning().shallow_block_bytes;
}

template <typename T>
bool transposed_applies(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  return std::is_same_v<T, Acc<T>> && dot_applies(a, b);
}

// The interleaved tiles' rows of A (any strides) and B (W^T) contiguous along k, float or
// double (an ISA without the tiles runs the packed path: blocked_gemm.cpp).
template <typename T>
bool interleaved_applies(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  return std::is_same_v<T, Acc<T>> && b.row_stride == 1 && a.rows <= kInterleavedMaxRows;
}

template <typename T>
bool broadcast_applies(ConstMatrixView<T> b) {
  return b.col_stride == 1 || copies_b_into_rows(b);
}

// The strip tiles' B (W) contiguous along n, float or double (an ISA without the tiles runs the
// packed path: blocked_gemm.cpp).
template <typename T>
bool strip_applies(ConstMatrixView<T> b) {
  return std::is_same_v<T, Acc<T>> && b.col_stride == 1;
}

// Whether G·W of m rows (contiguous along k) and a W of n columns and b_bytes takes the strip
// path: AVX-512's 8 x 48 tiles read G in place and W's strips copied as the first row tile
// reads them, where packing W and G cost more than the kernels gain (Xeon, dL/dX, 1 thread,
// against packed or the few-rows tiles: 768 columns, 40 to 256 rows 1.02x-1.20x; 256 to 640
// columns 1.03x-1.15x; wider, up to kStripWideMaxRows rows); double, 48 to 256 rows of 256 to
// 768 columns 1.0x-1.24x.
template <typename T>
bool strip_takes(const Tuning& limits, int64_t m, int64_t n, int64_t b_bytes) {
  const bool strip_wide = limits.strip_max_cols > 0 && m <= kStripWideMaxRows;
  return std::is_same_v<T, Acc<T>> && m >= kStripMinRows && m <= kStripMaxRows &&
         n >= kStripMinStrips * kStripTileCols<T> && (n <= limits.strip_max_cols || strip_wide) &&
         b_bytes <= limits.l3_share_bytes;
}

}  // namespace

void force_path(Path path) { g_forced_path.store(path, std::memory_order_relaxed); }

template <typename T>
NarrowSide narrow_side(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n,
                       int64_t k) {
  if (!std::is_same_v<T, Acc<T>> || a.row_stride != 1 || b.col_stride != 1 ||
      k < kNarrowSideMinDepth) {
    return NarrowSide::none;
  }
  const int64_t narrow = std::min(m, n), wide = std::max(m, n);
  if (narrow % kBroadcastCols<T> != 0 || narrow > kNarrowSideMaxValues ||
      wide * static_cast<int64_t>(sizeof(T)) >= kPageBytes) {
    return NarrowSide::none;
  }
  return m < n ? NarrowSide::rows : NarrowSide::cols;
}

int64_t dot_max_rows_at(int64_t k) {
  constexpr int64_t kDotFewRows = 8;
  return k >= kDeepK ? std::max(kDotFewRows, tuning().dot_max_rows) : kDotFewRows;
}

template <typename T>
Path choose_path(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n,
                 int64_t k) {
  const Path forced = g_forced_path.load(std::memory_order_relaxed);
  if (forced == Path::dot && dot_applies(a, b)) return Path::dot;
  if (forced == Path::broadcast && broadcast_applies(b)) return Path::broadcast;
  if (forced == Path::stream && b.col_stride == 1) return Path::stream;
  if (forced == Path::transposed && transposed_applies(a, b)) return Path::transposed;
  if (forced == Path::interleaved && interleaved_applies(a, b)) return Path::interleaved;
  if (forced == Path::strip && strip_applies(b)) return Path::strip;
  if (forced != Path::automatic) return Path::packed;

  // Packing B costs about as much as a few rows of compute, packing A as a few
  // columns: with few rows (or few columns) reading the operands in place wins.
  // Crossovers measured on Zen 3 (float; double behaves alike), in units of the caches.
  const Tuning& limits = tuning();
  const int64_t a_bytes = m * k * static_cast<int64_t>(sizeof(T));
  const int64_t b_bytes = k * n * static_cast<int64_t>(sizeof(T));
  // Rows of X times W, read in place by the interleaved tiles: W's rows in order, 4 at a time,
  // X interleaved in L2 (a lane's running sum stays within kSumBlock steps). Zen 4 AVX-512,
  // 1 thread, batch x in x out against the path before (8 rows transposed, fewer dot): 8 rows
  // 1.13x-1.32x (8 x 3072 x 768 111 GFLOP/s; four 8 x 4096 x 1024 from memory 1.32x), 4 and
  // 5 rows 2.2x, 2 rows 1.16x, and 1.1x-1.5x at k of 8 to 128; one row 1.17x with W from
  // memory, 0.8x-0.9x with W in cache, where the dot path's one-row tiles stay. More rows:
  // interleaved_rows_at.
  if (interleaved_applies(a, b) && m <= interleaved_rows_at(k, limits.interleaved_max_rows) &&
      (m > 1 || streams_from_memory(b_bytes)) &&
      k <= kSumBlock * kInterleavedLanes<T> && a_bytes <= limits.stream_b_bytes) {
    return Path::interleaved;
  }
  // Few rows of X (whole tiles of C^T, or one half-width tile) times a deep W: read W in
  // place (dot's tiles do too, but reduce across lanes and load both operands per step), with
  // X^T copied into L2: it is re-read for every tile of W's rows (64 rows x 4096 deep, 1 MiB,
  // ran 0.91x packed on Zen 4).
  constexpr int64_t tile = kBroadcastCols<T>;
  const bool whole_tiles = m % tile == 0 || m == kHalfBroadcastCols<T>;
  if (transposed_applies(a, b) && limits.narrow_tiles > 0 && whole_tiles &&
      m <= transposed_max_rows<T>(limits) && k >= kDeepK &&
      a_bytes <= limits.stream_b_bytes) {
    return Path::transposed;
  }
  if (dot_applies(a, b) && (m <= dot_max_rows_at(k) || n <= 8)) {
    return Path::dot;
  }
  // A narrow B with contiguous columns (the forward's W^T) in L1: copied into rows, it feeds
  // the broadcast tiles, and A is read in place instead of packed (4096 x 64 x 64 forward:
  // Zen 3 AVX2 1.19x, Zen 4 AVX-512 1.11x; Xeon with AVX-512's own broadcast tiles, 1 thread:
  // 4096 x 64 x 16 1.8x, 8192 x 64 x 32 1.15x, 8192 x 128 x 32 1.12x, 4096 x 64 x 64 0.95x,
  // 64 columns with k of 128 to 512 0.98x-1.05x).
  if (a.col_stride == 1 && m >= kCopiedBMinRows && n <= kCopiedBMaxCols && b.col_stride != 1 &&
      copies_b_into_rows(b)) {
    return Path::broadcast;
  }
  if (b.col_stride == 1) {
    // A shallow product (k of a few steps, e.g. the rank-1 dL/dW of batch 1) is bound by
    // the writes of C: read the operands in place and write C in memory order.
    if (k <= kShallowK) return Path::broadcast;
    // Very few rows and a B beyond L2: stream B once, in memory order. AVX-512's few-rows tiles
    // read it in place faster from 3 rows on (Xeon, dL/dX 1 thread, 4 x 1024 x 4096: 1.6x).
    const bool tiles_from_3_rows = few_rows_tiles_apply<T>(limits);
    if (m <= 2 || (m <= kStreamRows && b_bytes > limits.stream_b_bytes && !tiles_from_3_rows)) {
      return Path::stream;
    }
    // A's columns contiguous too (G^T·X) and a narrow side of C: the broadcast tiles' columns.
    if (narrow_side(a, b, m, n, k) != NarrowSide::none) return Path::broadcast;
    // A mid-size G·W against a narrow W: strips of W copied as the first row tile reads them.
    if (a.col_stride == 1 && strip_takes<T>(limits, m, n, b_bytes)) return Path::strip;
    // Few rows and a B that this thread's L3 share holds, or a narrow B whose strips stay
    // in L1 while A is re-read (from L3) once per strip: when A's rows are contiguous (when
    // they are not, as in G^T·X, packing A wins), or when the problem is tiny.
    const bool few_rows = few_rows_in_place<T>(limits, m, b_bytes);
    const bool narrow_b = n <= 128 && a_bytes <= limits.l3_share_bytes;
    const bool tiny = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <=
                      64.0 * 64 * 64;
    if (tiny || (a.col_stride == 1 && (few_rows || narrow_b))) return Path::broadcast;
  }
  return Path::packed;
}

#define EML_INSTANTIATE_CHOOSE_PATH(T)                                                      \
  template Path choose_path<T>(ConstMatrixView<T>, ConstMatrixView<T>, int64_t, int64_t,    \
                               int64_t);                                                    \
  template NarrowSide narrow_side<T>(ConstMatrixView<T>, ConstMatrixView<T>, int64_t,       \
                                     int64_t, int64_t);
EML_INSTANTIATE_CHOOSE_PATH(float)
EML_INSTANTIATE_CHOOSE_PATH(double)
EML_INSTANTIATE_CHOOSE_PATH(bfloat16_t)
EML_INSTANTIATE_CHOOSE_PATH(float16_t)
#undef EML_INSTANTIATE_CHOOSE_PATH

}  // namespace eml::gemm::blocked
