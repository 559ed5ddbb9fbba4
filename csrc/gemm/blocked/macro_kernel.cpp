#include "macro_kernel.h"

#include <algorithm>

#include "tuning.h"

namespace eml::gemm::blocked {
namespace {

// Writes the top-left rows x cols of a full MR x NR scratch tile into C.
template <typename T>
void store_edge_tile(const T* tile, int64_t rows, int64_t cols, T* c, int64_t ldc,
                     const T* bias, bool accumulate) {
  constexpr int64_t NR = BlockSizes<T>::nr;
  for (int64_t r = 0; r < rows; ++r) {
    T* c_row = c + r * ldc;
    const T* tile_row = tile + r * NR;
    for (int64_t j = 0; j < cols; ++j) {
      if (accumulate) {
        c_row[j] += tile_row[j];
      } else {
        c_row[j] = bias != nullptr ? tile_row[j] + bias[j] : tile_row[j];
      }
    }
  }
}

// One micro-tile of C: straight into C by `direct` (null for an edge tile no kernel writes
// whole), else by `micro` through `edge_tile`.
template <typename T>
inline void run_tile(MicroKernel<T> micro, MicroKernel<T> direct, int64_t kc, const T* a_sliver,
                     const T* b_sliver, T* c_tile, int64_t ldc, int64_t rows, int64_t cols,
                     const T* bias, bool accumulate, T* edge_tile) {
  constexpr int64_t NR = BlockSizes<T>::nr;
  if (direct != nullptr) {
    direct(kc, a_sliver, b_sliver, c_tile, ldc, bias, accumulate);
  } else {
    micro(kc, a_sliver, b_sliver, edge_tile, NR, nullptr, false);
    store_edge_tile(edge_tile, rows, cols, c_tile, ldc, bias, accumulate);
  }
}

// Streaming B from memory (a prepacked weight times a few rows), the first row tiles of a
// column step wait for its panels and the later ones leave memory idle: so the first two
// also prefetch the next column step's panels into L2, in blocks of at least
// Tuning::prefetch_next_min_rows rows (Zen 5, 5 to 64 rows times a prepacked 4096 x 4096
// float weight: 1.05-1.55x; from 256 rows on, and without prepacking, as fast as without).
constexpr int64_t kPrefetchNextTiles = 2;

// The least depth at which a shallow block (written rows outer) computes two row tiles per
// call: below it the calls are bound by the stores of C alone, and twelve rows of them at once
// ran slower (Xeon, dL/dW of batch 8: 0.95x-0.98x; 12: 1.02x; 16 to 32: 1.05x-1.10x).
constexpr int64_t kPairBlockMinDepth = 16;

}  // namespace

template <typename T>
void macro_kernel(const RegisterKernels<T>& kernels, int64_t kc, const T* packed_a,
                  const T* packed_b, OutputMatrix<T> c, const T* bias, bool accumulate,
                  bool stream_c) {
  constexpr int64_t MR = BlockSizes<T>::mr;
  constexpr int64_t NR = BlockSizes<T>::nr;
  alignas(64) T edge_tile[MR * NR];
  const bool streaming = c.rows >= tuning().prefetch_next_min_rows;
  // Two row tiles per call where 512-bit FMAs run whole (no narrow tiles): twice the FMAs per
  // load of B (Xeon with AVX-512, 2048^3: 0.86x -> 0.91x F.linear; Zen 4's split FMAs keep
  // the measured one-tile calls).
  const MicroKernel<T> pair_block = tuning().narrow_tiles == 0 ? kernels.pair_block : nullptr;
  // The pair blocks of a C written once, past the caches (their rows 64-byte aligned).
  const MicroKernel<T> streamed_c_block =
      pair_block != nullptr && stream_c && !accumulate ? kernels.pair_block_stream : nullptr;
  const auto prefetches_next = [&](int64_t i) {
    return streaming && i < kPrefetchNextTiles * MR;
  };
  // A kernel that writes its tile (or pair) at row i, column j straight into C.
  const auto run_into_c = [&](MicroKernel<T> kernel, int64_t i, int64_t j) {
    kernel(kc, packed_a + i * kc, packed_b + j * kc, c.data + i * c.ld + j, c.ld,
           bias != nullptr ? bias + j : nullptr, accumulate);
  };
  const auto tile = [&](int64_t i, int64_t j) {
    const int64_t rows = std::min(MR, c.rows - i);
    const int64_t cols = std::min(NR, c.cols - j);
    // A whole-width tile goes straight into C where a kernel for its rows exists.
    MicroKernel<T> direct = nullptr;
    if (cols == NR) {
      if (prefetches_next(i)) direct = kernels.tile_next[rows - 1];
      if (direct == nullptr) direct = rows == MR ? kernels.tile : kernels.tile_rows[rows - 1];
    }
    run_tile(kernels.tile, direct, kc, packed_a + i * kc, packed_b + j * kc,
             c.data + i * c.ld + j, c.ld, rows, cols, bias != nullptr ? bias + j : nullptr,
             accumulate, edge_tile);
  };
  // Tiles per column step: two where a pair kernel exists and both tiles are whole wide.
  const auto step_tiles = [&](int64_t j) -> int64_t {
    return kernels.pair != nullptr && j + 2 * NR <= c.cols ? 2 : 1;
  };
  const auto tiles = [&](int64_t i, int64_t j, int64_t count) {
    if (count == 2) {
      const int64_t rows = std::min(MR, c.rows - i);
      MicroKernel<T> pair = prefetches_next(i) ? kernels.pair_next[rows - 1] : nullptr;
      if (pair == nullptr) pair = rows == MR ? kernels.pair : kernels.pair_rows[rows - 1];
      if (pair != nullptr) {
        run_into_c(pair, i, j);
        return;
      }
    }
    for (int64_t t = 0; t < count; ++t) tile(i, j + t * NR);
  };
  const int64_t panel_bytes = kc * c.cols * static_cast<int64_t>(sizeof(T));
  if (writes_rows_outer(kc, panel_bytes)) {
    // A shallow block (e.g. the rank-1 dL/dW of batch 1) is bound by the writes of C:
    // rows outer writes C in memory order, each page whole while it is in cache (on a
    // fresh output the first touch of every page zeroes it: 20% faster at 4096x1x4096).
    const auto row_of_tiles = [&](int64_t i) {
      for (int64_t j = 0, count = 0; j < c.cols; j += count * NR) {
        count = step_tiles(j);
        tiles(i, j, count);
      }
    };
    int64_t i = 0;
    for (; i < c.rows && prefetches_next(i); i += MR) row_of_tiles(i);
    // Two row tiles per call where pair_block runs, from kPairBlockMinDepth: half the calls and
    // loads of B per store of C (Xeon, one thread: dL/dW of batch 16 to 32, 768 to 4096 wide,
    // 1.05x-1.10x; forwards 16 to 32 deep 1.07x-1.08x).
    // A call that only writes C does not fetch it first (pair_block_store; Xeon, dL/dW of
    // batch 16 to 32: 1 thread 0.96x-1.07x, 2 threads 1.02x-1.23x), nor writes it past the
    // caches where asked (stream_c): 32x1024x4096 ran 0.68x so, its C the memory of the last
    // call, still in cache.
    const MicroKernel<T> shallow_block =
        accumulate || kernels.pair_block_store == nullptr ? pair_block : kernels.pair_block_store;
    if (pair_block != nullptr && kc >= kPairBlockMinDepth) {
      for (; i + 2 * MR <= c.rows; i += 2 * MR) {
        int64_t j = 0;
        for (; j + 2 * NR <= c.cols; j += 2 * NR) run_into_c(shallow_block, i, j);
        for (; j < c.cols; j += NR) {
          tile(i, j);
          tile(i + MR, j);
        }
      }
    }
    for (; i < c.rows; i += MR) row_of_tiles(i);
    return;
  }
  // jr outer: one KC x NR sliver of B (or a pair) stays in L1 while the A slivers stream
  // from L2.
  for (int64_t j = 0, count = 0; j < c.cols; j += count * NR) {
    count = step_tiles(j);
    int64_t i = 0;
    for (; i < c.rows && prefetches_next(i); i += MR) tiles(i, j, count);
    // The whole tiles below those call one kernel with no choice per tile (on Zen 3 the
    // choice took 1.6% of 1024^3).
    if (j + count * NR <= c.cols) {
      if (count == 2 && pair_block != nullptr) {
        const MicroKernel<T> block = streamed_c_block != nullptr ? streamed_c_block : pair_block;
        for (; i + 2 * MR <= c.rows; i += 2 * MR) run_into_c(block, i, j);
      }
      const MicroKernel<T> whole = count == 2 ? kernels.pair : kernels.tile;
      for (; i + MR <= c.rows; i += MR) run_into_c(whole, i, j);
    }
    for (; i < c.rows; i += MR) tiles(i, j, count);
  }
}

template void macro_kernel<float>(const RegisterKernels<float>&, int64_t, const float*,
                                  const float*, OutputMatrix<float>, const float*, bool, bool);
template void macro_kernel<double>(const RegisterKernels<double>&, int64_t, const double*,
                                   const double*, OutputMatrix<double>, const double*, bool,
                                   bool);

}  // namespace eml::gemm::blocked
