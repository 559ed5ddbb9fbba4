// The packing-free broadcast tile (BroadcastTile, kernels.h), one template for every SIMD ISA.
//
// Included by direct_<isa>.cpp only, each after defining EML_BROADCAST_TILE_TARGET and
// EML_BROADCAST_TILE_INLINE (its ISA's target attributes, as microkernel_impl.h takes them).
// VT is the ISA's vector of C's type (Vec<Acc<S>>) and LS its loads of S (Load<S>, which
// widens 16-bit operands to VT's lanes): each offers zero, loadu, broadcast, fma, add,
// storeu, mask(count), maskload and maskstore. The loops over rows unroll whole up to 16 rows
// (a loop left rolled keeps its accumulators in memory). No include guard: each including
// file gets its own copy, in its own anonymous namespace.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#ifndef EML_BROADCAST_TILE_TARGET
#error "define EML_BROADCAST_TILE_TARGET and EML_BROADCAST_TILE_INLINE before including this file"
#endif

namespace eml::gemm::blocked {
namespace {

// acc[r][v] += A(r, p) * B(p, v-th vector) for one step p. With a copy_row (S the vectors'
// type, unmasked), the step's values of B also go there.
template <typename S, typename VT, typename LS, int R, int NV, bool kMasked>
EML_BROADCAST_TILE_INLINE void broadcast_step(const S* a_step, int64_t a_row_stride,
                                              const S* b_row,
                                              const typename LS::Mask (&masks)[NV],
                                              typename VT::V (&acc)[R][NV],
                                              S* copy_row = nullptr) {
  typename VT::V bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const S* source = b_row + v * VT::lanes;
    bv[v] = kMasked ? LS::maskload(source, masks[v]) : LS::loadu(source);
  }
  if constexpr (std::is_same_v<S, typename VT::Scalar> && !kMasked) {
    if (copy_row != nullptr) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) VT::storeu(copy_row + v * VT::lanes, bv[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const typename VT::V av = LS::broadcast(a_step + r * a_row_stride);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = VT::fma(av, bv[v], acc[r][v]);
  }
}

// Asks for the next strip's values of step row `b_row` (the NV vectors right of the tile's) in
// L1: the call that the tile's caller makes next reads them (broadcast_blocks, rows outer).
template <typename S, typename VT, int NV>
EML_BROADCAST_TILE_INLINE void prefetch_next_strip(const S* b_row) {
  constexpr int kStripBytes = NV * VT::lanes * static_cast<int>(sizeof(S));
  const char* next = reinterpret_cast<const char*>(b_row + NV * VT::lanes);
#pragma GCC unroll 4
  for (int line = 0; line < kStripBytes; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
}

// Sets the R x NV accumulators of a tile to zero.
template <typename VT, int R, int NV>
EML_BROADCAST_TILE_INLINE void zero_tile(typename VT::V (&acc)[R][NV]) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = VT::zero();
  }
}

// Writes the R x NV accumulators into C: added to it (accumulate), or with the bias, or alone.
template <typename VT, int R, int NV, bool kMasked>
EML_BROADCAST_TILE_INLINE void store_tile(const typename VT::V (&acc)[R][NV],
                                          const typename VT::Mask (&masks)[NV],
                                          typename VT::Scalar* c, int64_t ldc,
                                          const typename VT::Scalar* bias, bool accumulate) {
  using T = typename VT::Scalar;
  using V = typename VT::V;
  constexpr int L = VT::lanes;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      T* dst = c + r * ldc + v * L;
      V result = acc[r][v];
      if (accumulate) {
        result = VT::add(result, kMasked ? VT::maskload(dst, masks[v]) : VT::loadu(dst));
      } else if (bias != nullptr) {
        result = VT::add(result, kMasked ? VT::maskload(bias + v * L, masks[v])
                                         : VT::loadu(bias + v * L));
      }
      if constexpr (kMasked) {
        VT::maskstore(dst, masks[v], result);
      } else {
        VT::storeu(dst, result);
      }
    }
  }
}

// R rows x up to NV vectors of C: broadcast A(r, p), multiply row p of B. Few rows get U sets
// of accumulators (consecutive steps) to keep 8 FMA chains in flight. kPrefetchNext: each
// step also prefetches the next strip's values of its row of B (prefetch_next_strip).
template <typename S, typename VT, typename LS, int R, int NV, bool kMasked,
          bool kPrefetchNext = false>
EML_BROADCAST_TILE_TARGET inline void broadcast_tile_impl(
    int64_t k, const S* a, int64_t a_row_stride, int64_t a_col_stride, const S* b, int64_t ldb,
    typename VT::Scalar* c, int64_t ldc, int64_t cols, const typename VT::Scalar* bias,
    bool accumulate) {
  using V = typename VT::V;
  constexpr int L = VT::lanes;
  constexpr int kChains = R * NV;
  constexpr int U = kChains >= 8 ? 1 : (kChains >= 4 ? 2 : 4);
  typename VT::Mask masks[NV] = {};    // C and bias
  typename LS::Mask b_masks[NV] = {};  // B (the same lanes)
  if constexpr (kMasked) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int64_t lanes = cols - v * L;
      const int count = lanes <= 0 ? 0 : static_cast<int>(lanes < L ? lanes : L);
      masks[v] = VT::mask(count);  // count 0: all lanes off
      b_masks[v] = LS::mask(count);
    }
  }
  V acc[U][R][NV];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) zero_tile<VT, R, NV>(acc[u]);
  int64_t p = 0;
  for (; p + U <= k; p += U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      if constexpr (kPrefetchNext) prefetch_next_strip<S, VT, NV>(b + (p + u) * ldb);
      broadcast_step<S, VT, LS, R, NV, kMasked>(a + (p + u) * a_col_stride, a_row_stride,
                                                b + (p + u) * ldb, b_masks, acc[u]);
    }
  }
  for (; p < k; ++p) {
    broadcast_step<S, VT, LS, R, NV, kMasked>(a + p * a_col_stride, a_row_stride, b + p * ldb,
                                              b_masks, acc[0]);
  }
#pragma GCC unroll 4
  for (int u = 1; u < U; ++u) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[0][r][v] = VT::add(acc[0][r][v], acc[u][r][v]);
    }
  }
  store_tile<VT, R, NV, kMasked>(acc[0], masks, c, ldc, bias, accumulate);
}

// The tile of R rows x W columns (W / VT::lanes vectors), `cols` (<= W) of them. Columns
// within one vector take a one-vector tile: the masked tile would run the FMAs of its vectors
// whose lanes are all off (Xeon, forward 4096x128x48 1 thread, 12 x 32 tiles: 0.67x-0.74x of
// F.linear with them). kPrefetchNext: a whole tile prefetches the next strip of B (a partial
// one is the last strip).
template <typename S, typename VT, typename LS, int R, int W, bool kPrefetchNext = false>
EML_BROADCAST_TILE_TARGET void broadcast_tile(int64_t k, const S* a, int64_t a_row_stride,
                                              int64_t a_col_stride, const S* b, int64_t ldb,
                                              typename VT::Scalar* c, int64_t ldc, int64_t cols,
                                              const typename VT::Scalar* bias, bool accumulate) {
  constexpr int NV = W / VT::lanes;
  static_assert(NV * VT::lanes == W, "whole vectors of columns");
  if (cols == W) {
    broadcast_tile_impl<S, VT, LS, R, NV, false, kPrefetchNext>(
        k, a, a_row_stride, a_col_stride, b, ldb, c, ldc, cols, bias, accumulate);
  } else if (NV > 1 && cols <= VT::lanes) {
    broadcast_tile_impl<S, VT, LS, R, 1, true>(k, a, a_row_stride, a_col_stride, b, ldb, c, ldc,
                                               cols, bias, accumulate);
  } else {
    broadcast_tile_impl<S, VT, LS, R, NV, true>(k, a, a_row_stride, a_col_stride, b, ldb, c,
                                                ldc, cols, bias, accumulate);
  }
}

// The strip path's first row tile (StripPackTile, kernels.h): R whole rows x W columns of
// float or double, B read in place, each step's W values also copied into strip (W apart)
// and the step kStripPrefetchSteps ahead (within the k steps) asked for in L2.
template <typename S, typename VT, int R, int W>
EML_BROADCAST_TILE_TARGET void strip_pack_tile(int64_t k, const S* a, int64_t a_row_stride,
                                               int64_t a_col_stride, const S* b, int64_t ldb,
                                               S* c, int64_t ldc, const S* bias, bool accumulate,
                                               S* strip) {
  static_assert(std::is_same_v<S, typename VT::Scalar>, "float or double: copied as loaded");
  constexpr int NV = W / VT::lanes;
  static_assert(NV * VT::lanes == W, "whole vectors of columns");
  constexpr int kStripBytes = W * static_cast<int>(sizeof(S));
  const typename VT::Mask masks[NV] = {};  // unmasked: unused
  typename VT::V acc[R][NV];
  zero_tile<VT, R, NV>(acc);
  for (int64_t p = 0; p < k; ++p) {
    const S* b_row = b + p * ldb;
    if (p + kStripPrefetchSteps < k) {
      const char* ahead = reinterpret_cast<const char*>(b_row + kStripPrefetchSteps * ldb);
#pragma GCC unroll 4
      for (int line = 0; line < kStripBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
    }
    broadcast_step<S, VT, VT, R, NV, false>(a + p * a_col_stride, a_row_stride, b_row, masks,
                                            acc, strip + p * W);
  }
  store_tile<VT, R, NV, false>(acc, masks, c, ldc, bias, accumulate);
}

}  // namespace
}  // namespace eml::gemm::blocked
