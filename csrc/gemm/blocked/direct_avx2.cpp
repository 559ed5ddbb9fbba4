// Packing-free tiles with AVX2 + FMA, for problems too small (or too skinny) for
// packing to pay off. See kernels.h for what each tile computes.
#include "direct_tiles.h"
#include "kernels.h"
#include "weight_kernels.h"

#if EML_GEMM_X86

#include <type_traits>
#include <utility>

#include "simd_avx2.h"

#define EML_BROADCAST_TILE_TARGET EML_TARGET_AVX2
#define EML_BROADCAST_TILE_INLINE EML_AVX2_INLINE
#include "broadcast_tile_impl.h"

namespace eml::gemm::blocked {
namespace {

using avx2::Load;
using avx2::Vec;

// acc[r][j] += the EVEN (or odd) ones of 16 bfloat16 steps of A row r times those of B row j
// (Load<bfloat16_t>::load_interleaved).
template <int R, int C, bool EVEN>
EML_AVX2_INLINE void dot_half_pass(const bfloat16_t* a, int64_t lda, const bfloat16_t* b,
                                   int64_t ldb, __m256 (&acc)[R][C]) {
  using LS = Load<bfloat16_t>;
  __m256 av[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) av[r] = LS::load_interleaved<EVEN>(a + r * lda);
#pragma GCC unroll 4
  for (int j = 0; j < C; ++j) {
    const __m256 bv = LS::load_interleaved<EVEN>(b + j * ldb);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(av[r], bv, acc[r][j]);
  }
}

// R x C dot products along k: vector accumulators reduced horizontally at the end.
// Small tiles keep U = 2 sets of accumulators (even and odd steps) so that at least
// 8 FMA chains are in flight. B's elements SB are S, or compressed weights (int8,
// 16-bit) under float A, widened in registers by Load<SB>.
template <typename S, typename SB, int R, int C>
EML_TARGET_AVX2 void dot_tile(int64_t k, const S* a, int64_t lda, const SB* b, int64_t ldb,
                              Acc<S>* c, int64_t ldc, const Acc<S>* bias, bool accumulate) {
  using T = Acc<S>;
  using VT = Vec<T>;
  using LS = Load<S>;
  using LB = Load<SB>;
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
  int64_t p = 0;
  if constexpr (std::is_same_v<S, bfloat16_t> && std::is_same_v<SB, bfloat16_t> && R * C <= 4) {
    // Small (matrix-vector) tiles: 16 steps per pass, widened as even and odd steps (see
    // Load): a shift or a mask per 8 values instead of a shuffle and a shift, which the
    // memory-bound loop cannot hide. (Larger tiles run out of registers this way.)
    for (; p + 16 <= k; p += 16) {
      dot_half_pass<R, C, true>(a + p, lda, b + p, ldb, acc[0]);
      dot_half_pass<R, C, false>(a + p, lda, b + p, ldb, acc[U - 1]);
    }
  }
  for (; p + U * L <= k; p += U * L) {
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      V av[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) av[r] = LS::loadu(a + r * lda + p + u * L);
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) {
        const V bv = LB::loadu(b + j * ldb + p + u * L);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[u][r][j] = VT::fma(av[r], bv, acc[u][r][j]);
      }
    }
  }
  for (; p < k; p += L) {  // the rest, masked: lanes past k load as 0 and add nothing
    const int lanes = static_cast<int>(k - p < L ? k - p : L);
    const auto mask = LS::mask(lanes);
    const auto b_mask = LB::mask(lanes);
    V av[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) av[r] = LS::maskload(a + r * lda + p, mask);
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      const V bv = LB::maskload(b + j * ldb + p, b_mask);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[0][r][j] = VT::fma(av[r], bv, acc[0][r][j]);
    }
  }
  if constexpr (U == 2) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) acc[0][r][j] = VT::add(acc[0][r][j], acc[1][r][j]);
    }
  }
  const V zero = VT::zero();
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    T sums[4];
    const V(&row)[C] = acc[0][r];
    VT::sum4(row[0], C > 1 ? row[C > 1 ? 1 : 0] : zero, C > 2 ? row[C > 2 ? 2 : 0] : zero,
             C > 3 ? row[C > 3 ? 3 : 0] : zero, sums);
    T* c_row = c + r * ldc;
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) direct_tiles::write_dot_sum(c_row[j], sums[j], bias, j, accumulate);
  }
}

// C rows += A(r, p) * row p of B, U steps of p per pass over C so that each load
// and store of C carries U FMAs.
template <typename S, int R, int U, bool kMasked>
EML_AVX2_INLINE void stream_vector(const typename Vec<Acc<S>>::V (&a_values)[U][R], const S* b,
                                   int64_t ldb, Acc<S>* c, int64_t ldc,
                                   typename Vec<Acc<S>>::Mask mask,
                                   typename Load<S>::Mask b_mask) {
  using T = Acc<S>;
  using VT = Vec<T>;
  typename VT::V bv[U];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    bv[u] = kMasked ? Load<S>::maskload(b + u * ldb, b_mask) : Load<S>::loadu(b + u * ldb);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    T* c_r = c + r * ldc;
    typename VT::V cv = kMasked ? VT::maskload(c_r, mask) : VT::loadu(c_r);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) cv = VT::fma(a_values[u][r], bv[u], cv);
    if constexpr (kMasked) {
      VT::maskstore(c_r, mask, cv);
    } else {
      VT::storeu(c_r, cv);
    }
  }
}

template <typename S, int R, int U>
EML_AVX2_INLINE void stream_steps(const S* a, int64_t a_row_stride, int64_t a_col_stride,
                                  const S* b, int64_t ldb, Acc<S>* c, int64_t ldc, int64_t cols) {
  using VT = Vec<Acc<S>>;
  constexpr int L = VT::lanes;
  typename VT::V a_values[U][R];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a_values[u][r] = Load<S>::broadcast(a + u * a_col_stride + r * a_row_stride);
    }
  }
  int64_t j = 0;
  for (; j + L <= cols; j += L) {
    stream_vector<S, R, U, false>(a_values, b + j, ldb, c + j, ldc, typename VT::Mask{},
                                  typename Load<S>::Mask{});
  }
  if (j < cols) {
    const int count = static_cast<int>(cols - j);
    stream_vector<S, R, U, true>(a_values, b + j, ldb, c + j, ldc, VT::mask(count),
                                 Load<S>::mask(count));
  }
}

template <typename S, int R>
EML_TARGET_AVX2 void stream_tile(int64_t k, const S* a, int64_t a_row_stride,
                                 int64_t a_col_stride, const S* b, int64_t ldb, Acc<S>* c,
                                 int64_t ldc, int64_t cols) {
  constexpr int U = R <= 2 ? 4 : 2;  // as many steps as registers allow
  int64_t p = 0;
  for (; p + U <= k; p += U) {
    stream_steps<S, R, U>(a + p * a_col_stride, a_row_stride, a_col_stride, b + p * ldb, ldb, c,
                          ldc, cols);
  }
  for (; p < k; ++p) {
    stream_steps<S, R, 1>(a + p * a_col_stride, a_row_stride, a_col_stride, b + p * ldb, ldb, c,
                          ldc, cols);
  }
}

// This file's tiles, for set_direct_tiles (direct_tiles.h).
struct Avx2Tiles {
  template <typename S, typename SB, int R, int C>
  static DotTile<S, SB> dot() { return &dot_tile<S, SB, R, C>; }
  template <typename S, int R, int W, bool kPrefetchNext = false>
  static BroadcastTile<S> broadcast() {
    return &broadcast_tile<S, Vec<Acc<S>>, Load<S>, R, W, kPrefetchNext>;
  }
  template <typename S, int R>
  static StreamTile<S> stream() { return &stream_tile<S, R>; }
};

}  // namespace

template <typename T>
void set_avx2_direct_tiles(Kernels<T>& kernels) {
  set_direct_tiles<Avx2Tiles>(kernels);
  direct_tiles::set_broadcast<Avx2Tiles, T, static_cast<int>(kBroadcastCols<T>), true>(
      kernels.broadcast_next, std::make_integer_sequence<int, kBroadcastRows>{});
}

template void set_avx2_direct_tiles<float>(Kernels<float>&);
template void set_avx2_direct_tiles<double>(Kernels<double>&);
template void set_avx2_direct_tiles<bfloat16_t>(Kernels<bfloat16_t>&);
template void set_avx2_direct_tiles<float16_t>(Kernels<float16_t>&);

template <typename W>
void set_avx2_weight_tiles(WeightKernels<W>& kernels) {
  set_dot_tiles<Avx2Tiles>(kernels.dot);
}

template void set_avx2_weight_tiles<int8_t>(WeightKernels<int8_t>&);
template void set_avx2_weight_tiles<bfloat16_t>(WeightKernels<bfloat16_t>&);
template void set_avx2_weight_tiles<float16_t>(WeightKernels<float16_t>&);

}  // namespace eml::gemm::blocked

#endif
