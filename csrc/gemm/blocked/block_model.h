// The packed GEMM's cache blocks and the cache-dependent thresholds, derived from the
// CPU's caches and the active micro-kernel's register tile by the analytical model of
// Low, Igual, Smith and Quintana-Orti, "Analytical Modeling Is Enough for High-Performance
// BLIS" (ACM TOMS 43(2), 2016). Pure functions of their arguments: tests feed them the
// caches of any CPU.
//
// The loops (packed_gemm.cpp, macro_kernel.cpp) are BLIS's: a KC x NC panel of B is packed
// (meant to stay in L3), then MC x KC blocks of A (in L2); the micro-kernel reuses one
// KC x NR micro-panel of B (in L1) against every MR x KC micro-panel of A streaming from L2.
//   KC (L1): the A and B micro-panels each occupy whole ways of an L1 set (their sizes
//     rounded up to ways of N_L1 * line bytes); together they leave one way free for
//     the next A micro-panel and C: ceil(A ways) + ceil(B ways) <= W_L1 - 1. The largest
//     such KC, a multiple of kKcStep. (The paper's closed form, KC = C_Ar N_L1 C_L1 /
//     (MR S) with C_Ar = floor((W_L1 - 1) / (1 + NR/MR)), solves the same condition with
//     A's micro-panel filling whole ways; for double 6x8 on 8-way 32 KiB both give 256,
//     for float 6x16 the closed form leaves three ways unused: 170 instead of 320.)
//   MC (L2): the MC x KC block of A takes the ways left after one for C and those the
//     B micro-panel needs: C_Ac = W_L2 - 1 - ceil(KC NR S / (N_L2 C_L2));
//     MC = C_Ac N_L2 C_L2 / (KC S), rounded down to a multiple of MR. In an L2 of
//     kMinHalfABlockL2Bytes or more, half of those ways (floor(C_Ac / 2)).
//   NC (L3): likewise the KC x NC panel of B takes the ways left after one and those of
//     the A block, in this thread's share of L3 (size / logical CPUs sharing it: each
//     thread works through its part's columns, partition.h); NC rounded down to a
//     multiple of NR.
//   One pass (L1): a k of at most ONE_PASS_KC steps, the depth whose B micro-panel fills
//     the L1d (S_L1 / (NR S), a multiple of kKcStep, at least KC), runs as one block of
//     depth with MC scaled down to keep the A block's bytes: a second pass over C (and its
//     staging, packed_gemm.h) costs more than the micro-panel's overflow of the model's
//     ways (Zen 3, float 6x16, KC 320, ONE_PASS_KC 512: k = 384 to 512 runs 1-3% faster
//     on one thread, 1.5-4% on two; for deeper k the model's KC stays faster: at k = 4096,
//     KC 512 is 1.5% slower).
// A level the CPU does not report is assumed to be the kAssumed* one (cache_info.h).
#pragma once

#include <cstdint>

#include "../cache_info.h"
#include "../isa.h"

namespace eml::gemm::blocked {

// The micro-kernel's register tile, MR x NR elements of element_bytes each.
struct RegisterTile {
  int64_t mr = 0, nr = 0, element_bytes = 0;
};

struct CacheBlocks {
  int64_t mc = 0, kc = 0, nc = 0;
  int64_t one_pass_kc = 0;  // the deepest k done in one block of depth
};

// KC is a multiple of this (the micro-kernel's unrolling, 4, twice over).
inline constexpr int64_t kKcStep = 8;

// The model above, for one element type's tile.
CacheBlocks model_blocks(const CacheInfo& caches, RegisterTile tile);

// The register tile of the packed path's micro-kernel (MR x NR floats or doubles) for `isa`:
// 6 x 16 / 6 x 8 (12 ymm accumulators; the generic kernel has the same tile), AVX-512's
// tile pairs 6 x 32 / 6 x 16.
RegisterTile register_tile(Isa isa, int64_t element_bytes);

// Everything of the blocked GEMM that depends on the cache and the core.
struct Tuning {
  CacheBlocks f32;  // float, and the 16-bit types (packed as float)
  CacheBlocks f64;
  // A packed or broadcast block of B of at most this many bytes is walked row by row
  // (kShallowBlock*: write-bound products): the L1d size.
  int64_t shallow_block_bytes = 0;
  // Very few rows and a B beyond this (L2) stream B once; the transposed path's copy of A^T
  // stays within it (path.cpp).
  int64_t stream_b_bytes = 0;
  // A block of B at most this many steps deep and within stream_b_bytes is bound by the writes
  // of C and walked rows outer too (writes_rows_outer, tuning.h: dL/dW of few rows of G): 64
  // with AVX-512's whole-FMA pair blocks, else 32 (block_model.cpp).
  int64_t write_bound_depth = 0;
  // Few rows and a B (or a narrow B and an A) within this thread's L3 share are read in
  // place (path.cpp); a B that the threads' shares hold is packed once for all of them
  // (blocked_gemm.cpp).
  int64_t l3_share_bytes = 0;
  // One row block of A (m <= MC): its column blocks of C and B take at most this many bytes
  // of L2 together (packed_gemm.h). Half of an L2 of kMinColumnBlockL2Bytes or more; 0 (NC
  // from L3 always) below.
  int64_t column_block_l2_bytes = 0;
  // A C that asks for it (Epilogue::stream_c: dL/dW) and is written in one block of depth is
  // written past the caches where it holds more than this many bytes per thread
  // (packed_gemm.h): the L2 size where the ISA has streamed kernels (AVX-512 with whole 512-bit
  // FMAs: its pair blocks), else 0 (off).
  int64_t stream_c_bytes = 0;
  // Every thread's part has at least this many flops (partition.h).
  int64_t min_parallel_flops = 0;
  // The dot path (no packing) takes up to this many rows when k is deep (path.cpp).
  int64_t dot_max_rows = 0;
  // C's rows a multiple of this many bytes apart share one or two L1 sets: the packed path
  // then computes C in a buffer of another stride (packed_gemm.h). Half an L1 way.
  int64_t aliasing_row_bytes = 0;
  // 1 where AVX2-width tiles (direct_avx2.cpp) compute at this ISA's FMA rate: with AVX2,
  // and with AVX-512 on a core that splits it into 256-bit halves (Zen 4). Then few rows take
  // the transposed path (its half-width tiles; path.cpp), and the broadcast tiles read B in
  // place for up to 32 rows (8 without); 0: not, and the AVX-512 packed kernel computes two
  // row tiles per call (macro_kernel.cpp).
  int64_t narrow_tiles = 0;
  // 1 where AVX-512's few-rows tiles (kernels.h: 12 rows x 2 vectors, float and double) read a
  // B with contiguous rows in place for up to 64 rows of A, and from 3 rows on instead of
  // streaming it (path.cpp): AVX-512 with whole 512-bit FMAs. 0: not (8 rows in place).
  int64_t few_rows_tiles = 0;
  // A packed product's blocks of at least this many rows prefetch the next column step's
  // panels of B into L2 from their first two row tiles (RegisterKernels::tile_next and
  // pair_next; macro_kernel.cpp), for a B streamed from memory (a prepacked weight): fewer
  // rows compute so fast that the hardware prefetcher keeps up alone, where it does (measured
  // per ISA and core: block_model.cpp).
  int64_t prefetch_next_min_rows = 0;
  // The most rows of float that take the transposed path (whole broadcast tiles; double: one
  // tile, 8 rows), measured against the dot and packed paths, forward, 1 thread: Zen 3 AVX2,
  // 16 to 64 rows x 1024x1024 to 4096x4096 1.1x-1.9x; Zen 4 AVX-512, 16 and 32 rows
  // 1.2x-1.7x, 48 and 64 rows 1.13x-1.23x packed (64 x 1024 x 4096: 0.91x), 96 rows 0.89x;
  // Zen 4 AVX2, 48 and 64 rows 0.95x-1.11x. 0 without narrow tiles.
  int64_t transposed_max_rows = 0;
  // The most rows of float or double X that take the interleaved path (X · W^T with W read in
  // place; path.cpp, which takes fewer at shallow k): with AVX-512, 128 (kInterleavedMaxRows,
  // in groups of rows: direct_gemm.cpp) where its FMAs are split into halves (Zen 4), 40 where
  // they run whole (Xeon, Zen 5: the packed tiles tie or win from 48 rows on; block_model.cpp);
  // 0 without the tiles.
  int64_t interleaved_max_rows = 0;
  // Rows of W per half-width broadcast tile where W's rows are a multiple of an L1 way apart
  // (all in one L1 set, beside two lines of X^T): 8 where the L1 has ways for all ten (12-way:
  // Zen 5, Intel from Ice Lake), else 6 (8-way: Zen 2-4, Skylake; direct_gemm.cpp).
  int64_t aliased_tile_rows = 0;
  // The widest B (columns of W: inputs of the layer) that the strip path takes for G·W of
  // kStripMinRows to kStripMaxRows rows of float or double (path.cpp; any width up to
  // kStripWideMaxRows rows): 768 where AVX-512's FMAs run whole (its 8 x 3-vector tiles;
  // measured on the Xeon, Zen 5 by the same argument), else 0 (off).
  int64_t strip_max_cols = 0;

  template <typename T>
  const CacheBlocks& blocks() const {
    if constexpr (sizeof(T) == 8) {
      return f64;
    } else {
      return f32;
    }
  }
};

// The least L2 whose half keeps one row block's C and B blocks (column_block_l2_bytes): the
// Xeon's 2 MiB, where it was measured (the forward and dL/dX products of 256 rows of BERT and
// the FFN 1.05x-1.14x). Zen 4's 1 MiB tied (64 to 384 rows, forward and training, 1 / 2
// threads: 0.97x-1.04x, also where only blocks beyond all of L2 took it); Zen 3's 512 KiB is
// unmeasured.
inline constexpr int64_t kMinColumnBlockL2Bytes = int64_t{2} << 20;

// The least L2 in which A's block takes half the ways the model leaves it (MC above): the
// Xeon's 2 MiB. There the model's 14 of 16 ways (1590 float rows of KC 288) leave too little
// room for the column steps of C that stream through L2 beside A (the register kernel alone,
// 1020 rows of A against 504, C from L3: 172 against 189 GFLOP/s). Half (792 rows) against
// 1590, one thread, forward, dL/dX and dL/dW: 1024^3 and 4096x1024x1024 1.02x-1.08x, 2048^3
// 1.00x-1.04x, 1000x999x1001 0.99x-1.02x, 1024x4096x4096 forward 0.98x-0.99x (its B block
// read once per row block from L3); two threads 1.01x-1.04x, double 1.00x-1.03x,
// EML_OPS_ISA=avx2 up to 1.09x. The AMD cores' 0.5-1 MiB keep the model's ways, with which
// their suites were measured.
inline constexpr int64_t kMinHalfABlockL2Bytes = int64_t{2} << 20;

// A fork/join of the thread pool costs about this many cycles (1 us at 2 GHz; measured
// with torch's OpenMP pool on Zen 5): a part must be worth more, so the threading floor is
// this many cycles of the ISA's peak flops (kFlopsPerCycle).
inline constexpr double kForkJoinCycles = 2048;

// Float flops per cycle of one core: 2 FMA pipes x lanes x 2 (AVX2 8 lanes, AVX-512 16;
// the portable kernel about SSE2's 4 lanes, multiply and add apart).
double flops_per_cycle(Isa isa);

// The model's tuning for these caches and the ISA's tile, on a core that splits AVX-512 into
// 256-bit halves or not (cpu_splits_avx512()).
Tuning model_tuning(const CacheInfo& caches, Isa isa, bool splits_avx512);

}  // namespace eml::gemm::blocked
