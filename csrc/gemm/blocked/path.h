// Which loop nest computes a (sub-)problem: packed, or one of the packing-free paths.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../gemm.h"
#include "block_model.h"

namespace eml::gemm::blocked {

enum class Path { automatic, packed, dot, broadcast, stream, transposed, interleaved, strip };

// At most this many steps of k count as shallow: the product is bound by the writes of C.
inline constexpr int64_t kShallowK = 4;

// The most rows of A (whole broadcast tiles) for which the transposed path is chosen:
// Tuning::transposed_max_rows for float; for double one tile (Zen 3: 8 rows 1.5x, 16 to 32
// rows 0.95x-1.2x, 64 rows 0.8x). Rows that are not whole tiles (12, 20 of float) ran
// 0.65x-0.93x there; 8 of float (4 of double) fill one half-width tile (kernels.h).
template <typename T>
int64_t transposed_max_rows(const Tuning& tuning) {
  return sizeof(T) == 8 ? std::min<int64_t>(tuning.transposed_max_rows, 8)
                        : tuning.transposed_max_rows;
}

// Where A's columns and B's rows are both contiguous (G^T·X, the weight gradient) and k is
// deep, the broadcast path gives the narrower side of C, if whole tile widths and at most 64
// long, to its tiles' columns, the other side's rows of memory (B's, or A^T's) each shorter
// than a page: `rows` computes C^T = B^T·A^T, `cols` C as usual. Float and double.
enum class NarrowSide { none, rows, cols };
template <typename T>
NarrowSide narrow_side(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n,
                       int64_t k);

// The most rows of A times a B with contiguous columns (G·W) that AVX-512's few-rows tiles
// (kernels.h) read B in place for, where they apply (path.cpp's few_rows_in_place).
inline constexpr int64_t kFewRowsTilesMaxRows = 64;

// The rows of A times a narrow B with contiguous rows (G·W, at most Tuning::strip_max_cols
// columns) that take the strip path (direct_gemm.h), float and double. Fewer rows keep the
// few-rows tiles; more, the packed path (Xeon, dL/dX of 384 rows 0.99x-1.02x, 512 rows 0.91x).
// And at least kStripMinStrips whole strips of columns: the columns past the last whole strip
// are read in place by every row tile (Xeon, 128 columns of float, 48 and 128 rows: 0.9x of
// the path before; 192 and 256 columns 1.05x-1.25x).
inline constexpr int64_t kStripMinRows = 33;
inline constexpr int64_t kStripMaxRows = 256;
inline constexpr int64_t kStripMinStrips = 4;
// Up to this many rows the strip path takes a W of any width where it applies at all
// (Tuning::strip_max_cols above 0): W's rows a page or more apart share L1 sets, so the few-rows
// tiles read each strip of W from L2 once per row tile, and packing it costs more than the
// strips' copy (Xeon, dL/dX, 1 thread, over the path before: 1024 to 4096 columns, 40 to 128
// rows 1.03x-1.30x in GFLOP/s, 4096 x 4096 even; 192 and 256 rows 0.87x-0.96x: C, revisited
// once per block of depth, outgrows L2).
inline constexpr int64_t kStripWideMaxRows = 128;

// Whether AVX-512's few-rows broadcast tiles compute T's in-place products of up to
// kFewRowsTilesMaxRows rows: float or double, where Tuning::few_rows_tiles is set.
template <typename T>
bool few_rows_tiles_apply(const Tuning& tuning) {
  return (std::is_same_v<T, float> || std::is_same_v<T, double>) && tuning.few_rows_tiles > 0;
}

// The most rows of A for which the dot path is chosen at depth k, where it applies (A and B
// contiguous along k): 8, and Tuning::dot_max_rows from kDeepK on.
int64_t dot_max_rows_at(int64_t k);

// The fastest path for this shape and layout (thresholds measured on Zen 3 with AVX2, and
// on Zen 5, scaled by the caches: tuning()).
template <typename T>
Path choose_path(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n, int64_t k);

// For tests and tuning: use `path` whenever the layout allows it (automatic: the
// default choice). Applies to all threads.
void force_path(Path path);

}  // namespace eml::gemm::blocked
