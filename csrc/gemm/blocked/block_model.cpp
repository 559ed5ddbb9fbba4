#include "block_model.h"

#include <algorithm>

#include "kernels.h"  // kBroadcastRows, kHalfBroadcastRows, kInterleaved*

namespace eml::gemm::blocked {
namespace {

// Bytes of one way of `level` (its sets x line): the unit in which blocks occupy it.
int64_t way_bytes(const CacheLevel& level) { return level.sets() * level.line_bytes; }

int64_t ways_for(int64_t bytes, int64_t way) { return (bytes + way - 1) / way; }

int64_t round_down(int64_t value, int64_t unit) { return std::max(unit, value / unit * unit); }

// The most rows of X on the interleaved path where AVX-512's FMAs run whole: there the
// packed tiles (two row tiles per call) tie or win from 48 rows on. Xeon, groups of up to 6
// rows (kInterleavedGroupRows), forward, over the packed path, 1 / 2 threads: 36 and 40 rows
// x 512 to 1024 steps 1.09x-1.13x / 1.04x-1.11x; 48 rows 0.99x-1.08x / 0.93x-1.03x. Before,
// with groups of up to 8 rows (32 accumulators, some on the stack), against the path without
// it (dot up to 32 rows, packed beyond), W in L3, 1 thread: 16 to 32 rows 1.1x-1.4x, 40 rows
// 0.96x-1.06x, 48 rows 0.93x-0.99x, 64 rows 0.85x-0.92x, 128 rows 0.54x-0.81x (its groups
// re-read each tile of W from L2 or L3); 2 threads alike; double alike (32 rows
// 1.07x-1.10x, 48 rows 0.92x-1.02x). Zen 4 (split FMAs) keeps all of kInterleavedMaxRows.
constexpr int64_t kInterleavedWholeFmaMaxRows = 40;

// The deepest block of B, within L2, walked rows outer as bound by the writes of C
// (writes_rows_outer, tuning.h). Xeon, dL/dW 1 thread, against columns outer: 8 x 4096 x 1024
// 1.5x, 16 x 2048 x 2048 1.4x, 32 x 1024 x 1024 1.05x, 4 x 4096 x 4096 (broadcast tiles) 3.4x;
// every depth within L2 rows outer ran the forward of 2048^3 at 0.86x. With the AVX2 kernels
// (EML_OPS_ISA=avx2) 33 to 64 steps rows outer lost (dL/dW of 33 to 64 rows 0.91x-0.99x).
constexpr int64_t kWriteBoundDepth = 32;
// With AVX-512's whole-FMA pair blocks (two row tiles per call, written without fetching C):
// Xeon, 33 to 64 steps rows outer against columns outer (the streamed C of dL/dW), in one
// process: dL/dW of 33 to 64 rows x 256..4096 x 768..4096 float 0.96x-1.20x (geomean 1.05x)
// on 1 thread, 1.02x-1.17x on 2, double 1.11x-1.25x; forwards of k = 48 and 64 1.09x-1.22x.
// Deeper, 96 and 128 steps, 0.96x-1.17x: not taken.
constexpr int64_t kPairBlockWriteBoundDepth = 64;

// The widest W (its columns, G·W's output) on the strip path where AVX-512's FMAs run whole.
// Xeon, dL/dX, 1 thread, against the path before (the few-rows tiles up to 64 rows, packed
// beyond), in one process: 768 columns, 40 to 256 rows 1.02x-1.20x (2 threads 1.01x-1.22x),
// 256 to 640 columns 1.03x-1.15x; 1024 to 4096 columns 0.83x-1.12x, where MKL's rows share
// L1 sets as ours do (not taken).
constexpr int64_t kStripMaxCols = 768;

// The fewest rows of a packed product's block that prefetch the next column step's panels
// of B (Tuning::prefetch_next_min_rows), measured with a prepacked float weight from memory,
// one thread. AVX2, Zen 5: 3 rows 5% slower with the prefetches, 4 rows 1.3x faster.
constexpr int64_t kPrefetchNextMinRows = 4;
// AVX-512 with whole FMAs, Zen 5: 3 and 4 rows as fast or 5% slower, 5 rows 1.15x faster,
// 6 rows 1.25x.
constexpr int64_t kWholeAvx512PrefetchNextMinRows = 5;
// AVX-512 split into halves, Zen 4: from 1 row on. eml frozen over eager (which reads W in
// place), 1 to 4 rows x 768x3072 to 4096x4096, geomean, 1 / 2 threads: 0.78x / 0.82x with 5,
// 1.03x / 1.02x with 1 (the weight read at 16-20 / 24-32 GB/s, was 10-16 / 19-25); with
// EML_OPS_ISA=avx2, 4 and 1 tied.
constexpr int64_t kSplitAvx512PrefetchNextMinRows = 1;

// Lines of X^T that share an L1 set with the transposed path's rows of W (its k block, 8 KiB
// of float, spans two ways of 4 KiB).
constexpr int64_t kXtLinesPerSet = 2;

// Rows of W per half-width tile where they share one L1 set: all 8 where the set holds them
// and X^T's lines, else the whole-width tiles' 6.
int64_t model_aliased_tile_rows(const CacheLevel& l1) {
  return l1.ways >= kHalfBroadcastRows + kXtLinesPerSet ? kHalfBroadcastRows : kBroadcastRows;
}

// This thread's share of L3 as a cache of its own: the same ways, fewer sets.
CacheLevel thread_share(const CacheLevel& level) {
  CacheLevel share = level;
  share.size_bytes = level.share_bytes();
  share.sharing = 1;
  return share;
}

// The largest KC (a multiple of kKcStep) whose A and B micro-panels, each in whole ways,
// leave one way of L1 free.
int64_t model_kc(const CacheLevel& l1, RegisterTile tile) {
  const int64_t way = way_bytes(l1);
  const auto fits = [&](int64_t kc) {
    return ways_for(kc * tile.mr * tile.element_bytes, way) +
               ways_for(kc * tile.nr * tile.element_bytes, way) <=
           l1.ways - 1;
  };
  int64_t kc = kKcStep;
  while (fits(kc + kKcStep)) kc += kKcStep;
  return kc;
}

// The rows (or columns) of a block `depth` deep that fit in the ways of `level` left after
// one way and `reserved_bytes` (the operand that shares it), or in 1/`divisor` of them,
// rounded down to `unit`.
int64_t fill_ways(const CacheLevel& level, int64_t reserved_bytes, int64_t depth,
                  int64_t element_bytes, int64_t unit, int64_t divisor = 1) {
  const int64_t way = way_bytes(level);
  const int64_t left = level.ways - 1 - ways_for(reserved_bytes, way);
  const int64_t free_ways = std::max<int64_t>(1, left / divisor);
  return round_down(free_ways * way / (depth * element_bytes), unit);
}

}  // namespace

CacheBlocks model_blocks(const CacheInfo& reported, RegisterTile tile) {
  const CacheInfo caches = or_assumed(reported);
  const CacheLevel& l1 = caches.l1d;
  const CacheLevel& l2 = caches.l2;
  const CacheLevel l3 = thread_share(caches.l3);
  const int64_t s = tile.element_bytes;
  CacheBlocks blocks;
  blocks.kc = model_kc(l1, tile);
  const int64_t a_block_divisor = l2.size_bytes >= kMinHalfABlockL2Bytes ? 2 : 1;
  blocks.mc = fill_ways(l2, blocks.kc * tile.nr * s, blocks.kc, s, tile.mr, a_block_divisor);
  blocks.nc = fill_ways(l3, blocks.mc * blocks.kc * s, blocks.kc, s, tile.nr);
  blocks.one_pass_kc =
      std::max(blocks.kc, round_down(l1.size_bytes / (tile.nr * s), kKcStep));
  return blocks;
}

RegisterTile register_tile(Isa isa, int64_t element_bytes) {
  const int64_t tiles = isa == Isa::avx512 ? 2 : 1;  // the AVX-512 kernel runs tile pairs
  const int64_t nr = element_bytes == 8 ? 8 : 16;
  return {6, tiles * nr, element_bytes};
}

double flops_per_cycle(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return 2 * 16 * 2;
    case Isa::avx2:
      return 2 * 8 * 2;
    case Isa::generic:
      break;
  }
  return 2 * 4;
}

Tuning model_tuning(const CacheInfo& reported, Isa isa, bool splits_avx512) {
  const CacheInfo caches = or_assumed(reported);
  Tuning tuning;
  tuning.f32 = model_blocks(caches, register_tile(isa, 4));
  tuning.f64 = model_blocks(caches, register_tile(isa, 8));
  tuning.shallow_block_bytes = caches.l1d.size_bytes;
  tuning.stream_b_bytes = caches.l2.size_bytes;
  tuning.l3_share_bytes = caches.l3.share_bytes();
  tuning.column_block_l2_bytes =
      caches.l2.size_bytes >= kMinColumnBlockL2Bytes ? caches.l2.size_bytes / 2 : 0;
  tuning.aliasing_row_bytes = std::max<int64_t>(1, way_bytes(caches.l1d) / 2);
  const bool whole_avx512 = isa == Isa::avx512 && !splits_avx512;
  tuning.stream_c_bytes = whole_avx512 ? caches.l2.size_bytes : 0;
  tuning.write_bound_depth = whole_avx512 ? kPairBlockWriteBoundDepth : kWriteBoundDepth;
  tuning.min_parallel_flops = static_cast<int64_t>(kForkJoinCycles * flops_per_cycle(isa));
  // Measured crossover (Zen 3 with AVX2, Zen 5 with AVX-512): the packed tiles beat the dot
  // tiles of the same ISA from 33 rows on (Zen 5, 16-32 rows x 4096 x 4096: dot 1.3-1.4x).
  tuning.dot_max_rows = 32;
  const bool narrow_tiles = isa == Isa::avx2 || (isa == Isa::avx512 && splits_avx512);
  tuning.narrow_tiles = narrow_tiles ? 1 : 0;
  tuning.few_rows_tiles = whole_avx512 ? 1 : 0;
  tuning.prefetch_next_min_rows = isa != Isa::avx512 ? kPrefetchNextMinRows
                                  : splits_avx512       ? kSplitAvx512PrefetchNextMinRows
                                                        : kWholeAvx512PrefetchNextMinRows;
  tuning.transposed_max_rows = narrow_tiles ? 64 : 0;
  tuning.interleaved_max_rows = isa != Isa::avx512 ? 0
                                 : splits_avx512   ? kInterleavedMaxRows
                                                   : kInterleavedWholeFmaMaxRows;
  tuning.aliased_tile_rows = model_aliased_tile_rows(caches.l1d);
  tuning.strip_max_cols = whole_avx512 ? kStripMaxCols : 0;
  return tuning;
}

}  // namespace eml::gemm::blocked
