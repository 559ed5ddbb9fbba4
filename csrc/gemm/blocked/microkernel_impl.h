// The packed path's register kernel, one template for every SIMD ISA.
//
// Included by microkernel_<isa>.cpp only, each after defining EML_MICRO_KERNEL_TARGET and
// EML_MICRO_KERNEL_INLINE (its ISA's target attributes: a template cannot take them as
// parameters), so every ISA compiles the same loops with its own vector type. No include
// guard: each including file gets its own copy, in its own anonymous namespace.
//
// C[0:MR, 0:TILES*NR] = sum_p A_panel[p] (MR values) x B_panels[p] (NR = NV vectors of L
// lanes from each of TILES adjacent packed B panels, kc*NR values apart): MR x TILES*NV
// accumulator vectors. Enough independent accumulators cover the FMA latency times the FMA
// pipes, and each broadcast of A feeds TILES*NV FMAs: AVX2 has 16 registers, so one 6 x 16
// tile (6 x 2 vectors); AVX-512 rows of a tile are one 512-bit vector (NR = 16 floats), so
// two adjacent tiles at once (6 x 2 vectors again, of twice the width).
#include <cstdint>

#ifndef EML_MICRO_KERNEL_TARGET
#error "define EML_MICRO_KERNEL_TARGET and EML_MICRO_KERNEL_INLINE before including this file"
#endif

namespace eml::gemm::blocked {
namespace {

// How far ahead of its loads a kernel with PREFETCH_B prefetches each panel of B (48 steps of
// 16 floats): a panel of a prepacked B (blocked_gemm.h) comes from memory, and the hardware
// prefetcher alone lets its first tile of rows wait for it.
constexpr int kPrefetchAheadBytes = 3072;

// PREFETCH_NEXT: each step also prefetches the same step of the next column step's panels
// (TILES panels further on) into L2, so that memory streams the next panels of B while the
// later row tiles compute on these (macro_kernel.cpp). Kernels of up to kTwoRequestsMaxRows
// rows ask for the line after it too (each line twice): their steps run so fast that one
// request per step left them waiting for B (Zen 4, a frozen weight from memory, 1 to 4 rows,
// frozen over eager, geomean of three rounds, 1 / 2 threads: 0.98x -> 1.16x / 1.02x ->
// 1.13x, each shape 1.01x-1.32x; one request 1 or 4 lines further on instead: no gain; two for
// the same line, or the second for the column step after the next: about as fast as this).
// More rows tie with one request; every kernel with two ran the shape suite's forward at
// 0.97x-0.98x.
constexpr int kTwoRequestsMaxRows = 4;
constexpr int kCacheLineBytes = 64;

// ROWS <= MR: an edge kernel for the first ROWS rows of a tile (A's panel still holds MR
// values per step), writing C directly instead of through a scratch tile.
//
// acc[r][u] += A_panel[p][r] * B_panels[p][u] for one step p: vector u = t*NV + v is
// vector v of tile t, whose panel starts tile_stride values after tile t-1's. PANELS = 2:
// rows ROWS/2 on come from the next panel of A, panel_stride values on (two row tiles).
template <typename VT, int ROWS, int NV, int TILES, bool PREFETCH_B, bool PREFETCH_NEXT,
          int PANELS = 1>
EML_MICRO_KERNEL_INLINE void kernel_step(typename VT::V (&acc)[ROWS][TILES * NV],
                                         const typename VT::Scalar* a,
                                         const typename VT::Scalar* b, int64_t tile_stride,
                                         int64_t panel_stride = 0) {
  using V = typename VT::V;
  V bv[TILES * NV];
#pragma GCC unroll 2
  for (int t = 0; t < TILES; ++t) {
    if constexpr (PREFETCH_B) {
      _mm_prefetch(reinterpret_cast<const char*>(b + t * tile_stride) + kPrefetchAheadBytes,
                   _MM_HINT_T0);
    }
    if constexpr (PREFETCH_NEXT) {
      const char* next = reinterpret_cast<const char*>(b + (TILES + t) * tile_stride);
      _mm_prefetch(next, _MM_HINT_T1);
      if constexpr (ROWS <= kTwoRequestsMaxRows) _mm_prefetch(next + kCacheLineBytes, _MM_HINT_T1);
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[t * NV + v] = VT::load(b + t * tile_stride + v * VT::lanes);
  }
  constexpr int kPanelRows = ROWS / PANELS;
  static_assert(kPanelRows * PANELS == ROWS);
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r) {
    const V av = VT::broadcast(a + (r / kPanelRows) * panel_stride + r % kPanelRows);
#pragma GCC unroll 4
    for (int u = 0; u < TILES * NV; ++u) acc[r][u] = VT::fma(av, bv[u], acc[r][u]);
  }
}

// Writes a vector of C: past the caches (STREAM: dst 64-byte aligned) or through them.
template <typename VT, bool STREAM>
EML_MICRO_KERNEL_INLINE void store_c(typename VT::Scalar* dst, typename VT::V value) {
  if constexpr (STREAM) {
    VT::stream(dst, value);
  } else {
    VT::storeu(dst, value);
  }
}

// PANELS = 2: two row tiles (ROWS = 2*MR, C[0:2*MR, ...]), the second's panel of A kc*MR
// values after the first's: twice the accumulators, and each load of B feeds twice the FMAs.
// PREFETCH_C = false: C is not fetched at the start (a shallow call that only writes C).
// STREAM_C: a call that only writes C (accumulate = false) writes it past the caches, each row
// of the tile 64-byte aligned (PREFETCH_C false with it).
template <typename VT, int MR, int NV, int TILES, int ROWS = MR, bool PREFETCH_B = false,
          bool PREFETCH_NEXT = false, int PANELS = 1, bool PREFETCH_C = true,
          bool STREAM_C = false>
EML_MICRO_KERNEL_TARGET void register_kernel(int64_t kc, const typename VT::Scalar* a,
                                             const typename VT::Scalar* b,
                                             typename VT::Scalar* c, int64_t ldc,
                                             const typename VT::Scalar* bias, bool accumulate) {
  using V = typename VT::V;
  constexpr int L = VT::lanes;
  constexpr int U = TILES * NV;  // vectors per row of the C tile
  const int64_t tile_stride = kc * NV * L;
  const int64_t panel_stride = kc * MR;
  static_assert(ROWS >= 1 && ROWS <= MR * PANELS);
  static_assert(PANELS == 1 || ROWS == MR * PANELS, "two panels: whole row tiles only");
  static_assert(!(STREAM_C && PREFETCH_C), "a streamed C is not fetched");
  // Fewer than 8 accumulators (an edge of 1 to 3 rows) cannot cover the FMA latency times
  // the pipes: then even and odd steps go to two sets, added at the end.
  constexpr int SETS = ROWS * U >= 8 ? 1 : 2;
  V sets[SETS][ROWS][U];
#pragma GCC unroll 2
  for (int set = 0; set < SETS; ++set) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) sets[set][r][u] = VT::zero();
    }
  }
  V (&acc)[ROWS][U] = sets[0];
  // C is needed only at the end: start fetching it now.
  if constexpr (PREFETCH_C) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + U * L - 1), _MM_HINT_T0);
    }
  }
  int64_t p = 0;
#pragma GCC unroll 2
  for (; p + SETS <= kc; p += SETS) {
#pragma GCC unroll 2
    for (int set = 0; set < SETS; ++set) {
      kernel_step<VT, ROWS, NV, TILES, PREFETCH_B, PREFETCH_NEXT, PANELS>(sets[set], a, b,
                                                                          tile_stride,
                                                                          panel_stride);
      a += MR;
      b += NV * L;
    }
  }
  if (p < kc) {
    kernel_step<VT, ROWS, NV, TILES, PREFETCH_B, PREFETCH_NEXT, PANELS>(acc, a, b, tile_stride,
                                                                        panel_stride);
  }
  if constexpr (SETS == 2) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) acc[r][u] = VT::add(acc[r][u], sets[1][r][u]);
    }
  }
  if (accumulate) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        auto* dst = c + r * ldc + u * L;
        VT::storeu(dst, VT::add(VT::loadu(dst), acc[r][u]));
      }
    }
  } else if (bias != nullptr) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const V bias_v = VT::loadu(bias + u * L);
#pragma GCC unroll 16
      for (int r = 0; r < ROWS; ++r) {
        store_c<VT, STREAM_C>(c + r * ldc + u * L, VT::add(acc[r][u], bias_v));
      }
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) store_c<VT, STREAM_C>(c + r * ldc + u * L, acc[r][u]);
    }
  }
}

// The register kernel of the first `rows` rows (1 to MR) of a tile (or of TILES adjacent
// ones): each ISA's tables pick their kernels through this one switch.
template <typename VT, int MR, int NV, int TILES, bool PREFETCH_B, bool PREFETCH_NEXT>
void (*row_kernel(int rows))(int64_t, const typename VT::Scalar*, const typename VT::Scalar*,
                             typename VT::Scalar*, int64_t, const typename VT::Scalar*, bool) {
  static_assert(MR == 6, "one case per row count below");
  switch (rows) {
    case 1:
      return &register_kernel<VT, MR, NV, TILES, 1, PREFETCH_B, PREFETCH_NEXT>;
    case 2:
      return &register_kernel<VT, MR, NV, TILES, 2, PREFETCH_B, PREFETCH_NEXT>;
    case 3:
      return &register_kernel<VT, MR, NV, TILES, 3, PREFETCH_B, PREFETCH_NEXT>;
    case 4:
      return &register_kernel<VT, MR, NV, TILES, 4, PREFETCH_B, PREFETCH_NEXT>;
    case 5:
      return &register_kernel<VT, MR, NV, TILES, 5, PREFETCH_B, PREFETCH_NEXT>;
    case 6:
      return &register_kernel<VT, MR, NV, TILES, 6, PREFETCH_B, PREFETCH_NEXT>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace eml::gemm::blocked
