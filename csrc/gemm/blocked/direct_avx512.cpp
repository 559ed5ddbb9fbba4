// Packing-free dot tiles of 2 and 3 rows with AVX-512F, for float and double: the dot tile
// of direct_avx2.cpp at twice the width. A product of a few rows (Y = X·W^T at a small
// batch) streams W once and does rows-many FMAs per element of it; with AVX2 vectors a core
// ran out of FMAs before W's bandwidth did (Zen 5, 8x4096x4096 from memory: 79 against 56
// GFLOP/s). Also, for float and double, the whole-width broadcast tiles (one 512-bit vector
// of columns; broadcast_tile_impl.h, as the AVX2 file's), the few-rows ones (12 rows x 2
// vectors), the strip tiles (8 rows x 3 vectors, and the first row tile that packs its
// strip) and the interleaved tiles of 1 to 8 rows (kernels.h). The half-width broadcast
// and the stream tiles, one-row dot tiles, and 16-bit or compressed operands stay with the
// AVX2 file (but bfloat16's dot tiles on CPUs with AVX512_BF16: direct_avx512_bf16.cpp).
//
// GCC 12's AVX-512 headers warn that their own reductions read an uninitialized vector (an
// undefined 256-bit half they then ignore), once per tile shape: not this file's values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "direct_tiles.h"
#include "kernels.h"

#if EML_GEMM_X86

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "simd_avx512.h"

#define EML_BROADCAST_TILE_TARGET EML_TARGET_AVX512
#define EML_BROADCAST_TILE_INLINE EML_AVX512_INLINE
#include "broadcast_tile_impl.h"

namespace eml::gemm::blocked {
namespace {

using direct_tiles::prefetch_ahead;
using direct_tiles::prefetch_line;

// acc[r][j] += A row r times B row j over the L steps from p, or over the first `count`
// of them when MASKED (lanes past those load as 0 and add nothing). Unmasked steps
// prefetch B's rows ahead.
template <typename T, int R, int C, bool MASKED>
EML_AVX512_INLINE void dot_steps(const T* a, int64_t lda, const T* b, int64_t ldb, int64_t p,
                                 int count, typename avx512::Vec<T>::V (&acc)[R][C]) {
  using VT = avx512::Vec<T>;
  typename VT::V av[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const T* a_row = a + r * lda + p;
    av[r] = MASKED ? VT::maskload(a_row, VT::mask(count)) : VT::loadu(a_row);
  }
#pragma GCC unroll 4
  for (int j = 0; j < C; ++j) {
    const T* b_row = b + j * ldb + p;
    if constexpr (!MASKED) prefetch_ahead(b_row);
    const auto bv = MASKED ? VT::maskload(b_row, VT::mask(count)) : VT::loadu(b_row);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][j] = VT::fma(av[r], bv, acc[r][j]);
  }
}

// C[r, j] (+)= the dot product of A row r and B row j along k, for an R x C tile: vector
// accumulators, reduced at the end. Small tiles keep U = 2 sets of accumulators (even and
// odd steps), so that at least 8 FMA chains are in flight.
template <typename T, int R, int C>
EML_TARGET_AVX512 void dot_tile(int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                                T* c, int64_t ldc, const T* bias, bool accumulate) {
  using VT = avx512::Vec<T>;
  using V = typename VT::V;
  constexpr int L = VT::lanes;
  constexpr int U = R * C < 8 ? 2 : 1;
  V acc[U][R][C];
#pragma GCC unroll 2
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) acc[u][r][j] = VT::zero();
    }
  }
  // A first, masked step up to B's next 64-byte boundary, when that is one for all of B's
  // rows: a 64-byte load across two cache lines costs two, and B is the operand streamed
  // from memory.
  int64_t p = 0;
  const int head = ldb % L == 0 ? direct_tiles::lanes_to_line(b) : 0;
  if (head > 0 && head < k) {
    dot_steps<T, R, C, true>(a, lda, b, ldb, 0, head, acc[0]);
    p = head;
  }
  for (; p + U * L <= k; p += U * L) {
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) dot_steps<T, R, C, false>(a, lda, b, ldb, p + u * L, L, acc[u]);
  }
  for (; p < k; p += L) {
    dot_steps<T, R, C, true>(a, lda, b, ldb, p, static_cast<int>(std::min<int64_t>(L, k - p)),
                             acc[0]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    T* c_row = c + r * ldc;
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      const T sum = VT::sum(U == 2 ? VT::add(acc[0][r][j], acc[U - 1][r][j]) : acc[0][r][j]);
      direct_tiles::write_dot_sum(c_row[j], sum, bias, j, accumulate);
    }
  }
}

// acc[r][i] += A row i's values of one step (a_step: M vectors) times bv[r], B row r's.
template <typename T, int R, int M>
EML_AVX512_INLINE void interleaved_step(const T* a_step,
                                        const typename avx512::Vec<T>::V (&bv)[R],
                                        typename avx512::Vec<T>::V (&acc)[R][M]) {
  using VT = avx512::Vec<T>;
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    const auto av = VT::loadu(a_step + i * VT::lanes);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][i] = VT::fma(av, bv[r], acc[r][i]);
  }
}

// The sums of four float vectors' lanes, [sum(a0), sum(a1), sum(a2), sum(a3)]: the lanes of
// all four added in one tree (12 instructions, against about 8 for each vector alone).
EML_AVX512_INLINE __m128 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  // Per 128-bit block: [a0 0+2, a1 0+2, a0 1+3, a1 1+3], and the same of a2, a3.
  const __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Per block: each vector's four lanes' sum, [a0, a1, a2, a3].
  const __m512 blocks = _mm512_add_ps(_mm512_shuffle_ps(t01, t23, _MM_SHUFFLE(1, 0, 1, 0)),
                                      _mm512_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 halves = _mm256_add_ps(
      _mm512_castps512_ps256(blocks),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(blocks), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1));
}

// C[i, j] = A row i · B row j (+ bias[j]) for the M rows of A, interleaved (kernels.h), and R
// rows of B, over all k steps: M x R vector accumulators, and per step M loads of A (from
// L1 or L2) and R of B for M x R FMAs. Each step asks for the same line of the next tile's
// rows of B (R rows further on): read in place from memory, B's rows are R streams, of which
// the hardware prefetcher alone kept too few lines in flight (Zen 4, 8 x 1024 x 4096: 13
// against 20 GB/s).
template <typename T, int R, int M>
EML_TARGET_AVX512 void interleaved_tile(int64_t k, const T* a_steps, const T* b, int64_t ldb,
                                        T* c, int64_t ldc, const T* bias) {
  using VT = avx512::Vec<T>;
  using V = typename VT::V;
  constexpr int L = VT::lanes;
  static_assert(L == kInterleavedLanes<T>, "a step of A is one vector per row");
  const std::uintptr_t next_tile_bytes = static_cast<std::uintptr_t>(R * ldb) * sizeof(T);
  V acc[R][M];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[r][i] = VT::zero();
  }
  int64_t p = 0;
  for (; p + L <= k; p += L) {
    V bv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const T* b_row = b + r * ldb + p;
      prefetch_line<_MM_HINT_T1>(reinterpret_cast<std::uintptr_t>(b_row) + next_tile_bytes);
      bv[r] = VT::loadu(b_row);
    }
    interleaved_step<T, R, M>(a_steps + p * M, bv, acc);
  }
  if (p < k) {  // the last, partial step: B's lanes past k load as 0, A's are 0
    V bv[R];
    const auto mask = VT::mask(static_cast<int>(k - p));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) bv[r] = VT::maskload(b + r * ldb + p, mask);
    interleaved_step<T, R, M>(a_steps + p * M, bv, acc);
  }
  if constexpr (std::is_same_v<T, float> && R == 4) {
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m128 sums = sum4(acc[0][i], acc[1][i], acc[2][i], acc[3][i]);
      _mm_storeu_ps(c + i * ldc, bias != nullptr ? _mm_add_ps(sums, _mm_loadu_ps(bias)) : sums);
    }
    return;
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const T sum = VT::sum(acc[r][i]);
      c[i * ldc + r] = bias != nullptr ? sum + bias[r] : sum;
    }
  }
}

// interleaved_tile<T, R, M> for direct_tiles::fill_table: R columns, M rows.
template <typename T>
struct MakeInterleaved {
  template <typename R, typename M>
  InterleavedTile<T> operator()(R, M) const {
    return &interleaved_tile<T, R::value, M::value>;
  }
};

// This file's dot and broadcast tiles, for direct_tiles.h: A and B of one type.
struct Avx512Tiles {
  template <typename S, typename SB, int R, int C>
  static DotTile<S, SB> dot() {
    static_assert(std::is_same_v<S, SB>, "AVX-512 dot tiles read A and B of one type");
    return &dot_tile<S, R, C>;
  }
  template <typename S, int R, int W, bool kPrefetchNext = false>
  static BroadcastTile<S> broadcast() {
    return &broadcast_tile<S, avx512::Vec<S>, avx512::Load<S>, R, W, kPrefetchNext>;
  }
};

}  // namespace

template <typename T>
void set_avx512_dot_tiles(Kernels<T>& kernels) {
  // Tiles of one row (a matrix-vector product) keep the AVX2 ones, which streamed B from
  // memory faster there (Zen 5, 1x4096x4096: 15.4 against 14.0 GFLOP/s).
  static_assert(kDotRows == 3, "the rows set here");
  const direct_tiles::MakeDot<Avx512Tiles, T, T> make;
  direct_tiles::fill_row<2>(kernels.dot, make);
  direct_tiles::fill_row<3>(kernels.dot, make);
}

template void set_avx512_dot_tiles<float>(Kernels<float>&);
template void set_avx512_dot_tiles<double>(Kernels<double>&);

template <typename T>
void set_avx512_interleaved_tiles(Kernels<T>& kernels) {
  direct_tiles::fill_table(kernels.interleaved, MakeInterleaved<T>{});
}

template <typename T>
void set_avx512_broadcast_tiles(Kernels<T>& kernels) {
  direct_tiles::set_broadcast<Avx512Tiles, T, static_cast<int>(kBroadcastCols<T>)>(
      kernels.broadcast, std::make_integer_sequence<int, kBroadcastRows>{});
  direct_tiles::set_broadcast<Avx512Tiles, T, static_cast<int>(kFewRowsTileCols<T>)>(
      kernels.few_rows_broadcast, std::make_integer_sequence<int, kFewRowsTileRows>{});
  direct_tiles::set_broadcast<Avx512Tiles, T, static_cast<int>(kBroadcastCols<T>), true>(
      kernels.broadcast_next, std::make_integer_sequence<int, kBroadcastRows>{});
  direct_tiles::set_broadcast<Avx512Tiles, T, static_cast<int>(kFewRowsTileCols<T>), true>(
      kernels.few_rows_broadcast_next, std::make_integer_sequence<int, kFewRowsTileRows>{});
  constexpr int kStripCols = static_cast<int>(kStripTileCols<T>);
  direct_tiles::set_broadcast<Avx512Tiles, T, kStripCols>(
      kernels.strip, std::make_integer_sequence<int, kStripTileRows>{});
  kernels.strip_pack = &strip_pack_tile<T, avx512::Vec<T>, kStripTileRows, kStripCols>;
}

template void set_avx512_broadcast_tiles<float>(Kernels<float>&);
template void set_avx512_broadcast_tiles<double>(Kernels<double>&);

template void set_avx512_interleaved_tiles<float>(Kernels<float>&);
template void set_avx512_interleaved_tiles<double>(Kernels<double>&);

}  // namespace eml::gemm::blocked

#endif
