// Splitting C into disjoint rectangles, one per thread: each thread then runs the
// whole single-threaded GEMM on its rectangle with its own packed buffers, so no
// synchronisation is needed inside. (Where several rows of parts would pack the same
// columns of B, the threads first pack B once between them; for a G·W with a small C whose
// parts would not take the strip path, they split k instead and sum the shares:
// blocked_gemm.cpp.)
#pragma once

#include <cstdint>

namespace eml::gemm::blocked {

struct Grid {
  int64_t row_parts = 1;
  int64_t col_parts = 1;
  int64_t parts() const { return row_parts * col_parts; }
};

// The grid for `threads` threads: few parts for small problems, the larger
// dimension cut first (squarish parts need the least packing per flop). Parts are
// at least row_unit rows and col_unit columns, and have at least min_part_flops flops
// (2mnk; on less, handing work to another thread costs more than it saves: the
// threading floor of tuning.h, a fork/join's worth of the core's peak).
Grid choose_grid(int64_t m, int64_t n, int64_t k, int threads, int64_t row_unit,
                 int64_t col_unit, int64_t min_part_flops);

struct Range {
  int64_t begin;
  int64_t end;
};

// Part `index` of `parts` near-equal ranges of [0, total), cut at multiples of unit.
Range split_range(int64_t total, int64_t parts, int64_t index, int64_t unit);

}  // namespace eml::gemm::blocked
