// Packing-free dot tiles for bfloat16 with AVX512_BF16: vdpbf16ps multiplies 32 bfloat16
// pairs of A's and B's rows and adds each pair's two products into one of 16 float lanes, so
// a step takes 32 values of k without widening them first (the AVX2 tiles widen by shifts
// and then run float FMAs at half the rate). Y = X·W^T at a small batch then reads the
// bfloat16 W at memory speed for more rows than the widening tiles do (kernels.h).
//
// The instruction treats subnormal inputs as zero and flushes subnormal sums to zero, as
// ATen's oneDNN GEMM does on these CPUs (Zen 4: from 8x4096x4096 up, not on tiny shapes);
// everything else is the float32 sum of the exact products (a product of two bfloat16 values
// fits float32's mantissa).
//
// GCC 12's AVX-512 headers warn that their own reductions read an uninitialized vector (an
// undefined 256-bit half they then ignore), once per tile shape: not this file's values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "direct_tiles.h"
#include "kernels.h"

#if EML_GEMM_X86

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#define EML_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma")))
#define EML_AVX512_BF16_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma"), always_inline)) inline

namespace eml::gemm::blocked {
namespace {

constexpr int kLanes = 32;  // bfloat16 values per 512-bit vector

EML_AVX512_BF16_INLINE __m512bh load(const bfloat16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// The first `count` values from p, zeros past them (zero products add nothing).
EML_AVX512_BF16_INLINE __m512bh load_first(const bfloat16_t* p, int count) {
  const __mmask32 mask = count >= kLanes ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

// acc[r][j] += A row r times B row j over the kLanes steps from p, or over the first `count`
// of them when MASKED. Unmasked steps prefetch B's rows ahead.
template <int R, int C, bool MASKED>
EML_AVX512_BF16_INLINE void dot_steps(const bfloat16_t* a, int64_t lda, const bfloat16_t* b,
                                      int64_t ldb, int64_t p, int count, __m512 (&acc)[R][C]) {
  __m512bh av[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    av[r] = MASKED ? load_first(a + r * lda + p, count) : load(a + r * lda + p);
  }
#pragma GCC unroll 4
  for (int j = 0; j < C; ++j) {
    const bfloat16_t* b_row = b + j * ldb + p;
    if constexpr (!MASKED) direct_tiles::prefetch_ahead(b_row);
    const __m512bh bv = MASKED ? load_first(b_row, count) : load(b_row);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av[r], bv);
  }
}

// C[r, j] (+)= the dot product of A row r and B row j along k, for an R x C tile, in float:
// vector accumulators, reduced at the end. Small tiles keep U = 2 sets of accumulators (even
// and odd steps), so that at least 8 dot-product chains are in flight.
template <int R, int C>
EML_TARGET_AVX512_BF16 void bf16_dot_tile(int64_t k, const bfloat16_t* a, int64_t lda,
                                          const bfloat16_t* b, int64_t ldb, float* c,
                                          int64_t ldc, const float* bias, bool accumulate) {
  constexpr int U = R * C < 8 ? 2 : 1;
  __m512 acc[U][R][C];
#pragma GCC unroll 2
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) acc[u][r][j] = _mm512_setzero_ps();
    }
  }
  // A first, masked step up to B's next 64-byte boundary, when that is one for all of B's
  // rows: B is the operand streamed from memory, and a load across two lines costs two.
  int64_t p = 0;
  const int head = ldb % kLanes == 0 ? direct_tiles::lanes_to_line(b) : 0;
  if (head > 0 && head < k) {
    dot_steps<R, C, true>(a, lda, b, ldb, 0, head, acc[0]);
    p = head;
  }
  for (; p + U * kLanes <= k; p += U * kLanes) {
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      dot_steps<R, C, false>(a, lda, b, ldb, p + u * kLanes, kLanes, acc[u]);
    }
  }
  for (; p < k; p += kLanes) {
    dot_steps<R, C, true>(a, lda, b, ldb, p, static_cast<int>(std::min<int64_t>(kLanes, k - p)),
                          acc[0]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float* c_row = c + r * ldc;
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      const __m512 both = U == 2 ? _mm512_add_ps(acc[0][r][j], acc[U - 1][r][j]) : acc[0][r][j];
      direct_tiles::write_dot_sum(c_row[j], _mm512_reduce_add_ps(both), bias, j, accumulate);
    }
  }
}

struct Avx512Bf16Tiles {
  template <typename S, typename SB, int R, int C>
  static DotTile<S, SB> dot() {
    return &bf16_dot_tile<R, C>;
  }
};

}  // namespace

void set_avx512_bf16_dot_tiles(Kernels<bfloat16_t>& kernels) {
  set_dot_tiles<Avx512Bf16Tiles>(kernels.dot);
}

}  // namespace eml::gemm::blocked

#endif  // EML_GEMM_X86
