// Splitting C into disjoint rectangles, one per thread: each thread then runs the
// whole single-threaded GEMM on its rectangle with its own packed buffers, so no
// packed block is shared and no synchronisation is needed inside.
#pragma once

#include <cstdint>

namespace eml::gemm::blocked {

struct Grid {
  int64_t row_parts = 1;
  int64_t col_parts = 1;
  int64_t parts() const { return row_parts * col_parts; }
};

// Every part gets at least this many flops (2mnk, about 1.5 us on one core): on
// less, handing work to another thread costs more than it saves. Measured with torch's
// OpenMP pool on Zen 5 (2 threads): a fork/join costs about 1 us, so 16x128x128 and
// 64x128x128 (0.5 and 2 MFLOP) run 1.2-1.6x faster on two threads than on one, while
// 2 MFLOP per part (the old bound) left them on one thread at 0.75-0.9x of MKL's time.
inline constexpr double kMinParallelFlops = 128.0 * 1024;

// The grid for `threads` threads: few parts for small problems, the larger
// dimension cut first (squarish parts need the least packing per flop). Parts are
// at least row_unit rows and col_unit columns.
Grid choose_grid(int64_t m, int64_t n, int64_t k, int threads, int64_t row_unit,
                 int64_t col_unit);

struct Range {
  int64_t begin;
  int64_t end;
};

// Part `index` of `parts` near-equal ranges of [0, total), cut at multiples of unit.
Range split_range(int64_t total, int64_t parts, int64_t index, int64_t unit);

}  // namespace eml::gemm::blocked
