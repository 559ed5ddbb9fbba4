// Transposing packs with AVX2: source rows contiguous along k become panel steps
// via in-register 8x8 (float) / 4x4 (double) transposes, instead of one scalar
// load and store per element. This is the packing of B = W^T in the forward pass.
// 16-bit sources are widened to float as they are loaded; their contiguous steps
// (B = W in dL/dX, A = G^T in dL/dW) get a widening copy too.
#include "kernels.h"

#if EML_GEMM_X86

#include <cstring>
#include <type_traits>

#include "simd_avx2.h"

namespace eml::gemm::blocked {
namespace {

using avx2::Load;
using avx2::Vec;

// rows[q] <- lane q of every input row, for 8 rows of 8 floats.
EML_AVX2_INLINE void transpose(__m256 rows[8]) {
  __m256 pairs[8], quads[8];
  for (int i = 0; i < 4; ++i) {
    pairs[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    pairs[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    const __m256 lo = pairs[4 * i], hi = pairs[4 * i + 1];
    const __m256 lo2 = pairs[4 * i + 2], hi2 = pairs[4 * i + 3];
    quads[4 * i + 0] = _mm256_shuffle_ps(lo, lo2, _MM_SHUFFLE(1, 0, 1, 0));
    quads[4 * i + 1] = _mm256_shuffle_ps(lo, lo2, _MM_SHUFFLE(3, 2, 3, 2));
    quads[4 * i + 2] = _mm256_shuffle_ps(hi, hi2, _MM_SHUFFLE(1, 0, 1, 0));
    quads[4 * i + 3] = _mm256_shuffle_ps(hi, hi2, _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    rows[q] = _mm256_permute2f128_ps(quads[q], quads[q + 4], 0x20);
    rows[q + 4] = _mm256_permute2f128_ps(quads[q], quads[q + 4], 0x31);
  }
}

// The same for 4 rows of 4 doubles.
EML_AVX2_INLINE void transpose(__m256d rows[4]) {
  const __m256d t0 = _mm256_unpacklo_pd(rows[0], rows[1]);
  const __m256d t1 = _mm256_unpackhi_pd(rows[0], rows[1]);
  const __m256d t2 = _mm256_unpacklo_pd(rows[2], rows[3]);
  const __m256d t3 = _mm256_unpackhi_pd(rows[2], rows[3]);
  rows[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  rows[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  rows[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  rows[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

// Stores the first COUNT lanes of v (a panel step narrower than a vector, e.g. the
// 6 rows of a float A panel) with plain stores; masked stores are slow on AMD.
template <int COUNT>
EML_AVX2_INLINE void store_first(float* out, __m256 v) {
  static_assert(COUNT >= 1 && COUNT <= 7, "no store sequence for this count");
  const __m128 low = _mm256_castps256_ps128(v);
  if constexpr (COUNT == 1) _mm_store_ss(out, low);
  if constexpr (COUNT == 2 || COUNT == 3) _mm_storel_pi(reinterpret_cast<__m64*>(out), low);
  if constexpr (COUNT == 3) _mm_store_ss(out + 2, _mm_movehl_ps(low, low));
  if constexpr (COUNT >= 4) _mm_storeu_ps(out, low);
  if constexpr (COUNT >= 5) {
    const __m128 high = _mm256_extractf128_ps(v, 1);
    if constexpr (COUNT == 5) _mm_store_ss(out + 4, high);
    if constexpr (COUNT >= 6) _mm_storel_pi(reinterpret_cast<__m64*>(out + 4), high);
    if constexpr (COUNT == 7) _mm_store_ss(out + 6, _mm_movehl_ps(high, high));
  }
}

template <int COUNT>
EML_AVX2_INLINE void store_first(double* out, __m256d v) {
  static_assert(COUNT == 1 || COUNT == 2 || COUNT == 3, "no store sequence for this count");
  const __m128d low = _mm256_castpd256_pd128(v);
  if constexpr (COUNT == 1) _mm_store_sd(out, low);
  if constexpr (COUNT >= 2) _mm_storeu_pd(out, low);
  if constexpr (COUNT == 3) _mm_store_sd(out + 2, _mm256_extractf128_pd(v, 1));
}

// One group of up to L source rows [first_row, first_row + ROWS), L steps from p.
template <typename S, int W, int ROWS>
EML_AVX2_INLINE void pack_row_group(const S* src, int64_t ld, int64_t p, int first_row,
                                    Acc<S>* panel) {
  using T = Acc<S>;
  using VT = Vec<T>;
  using V = typename VT::V;
  constexpr int L = VT::lanes;
  V block[L];
#pragma GCC unroll 8
  for (int r = 0; r < L; ++r) {
    block[r] = r < ROWS ? Load<S>::loadu(src + (first_row + r) * ld + p) : VT::zero();
  }
  transpose(block);
  T* out = panel + p * W + first_row;
#pragma GCC unroll 8
  for (int q = 0; q < L; ++q) {
    if constexpr (ROWS == L) {
      VT::storeu(out + q * W, block[q]);
    } else {
      store_first<ROWS>(out + q * W, block[q]);
    }
  }
}

// panel[p*W + w] = src[w*ld + p]: groups of L source rows, 2L steps at a time so
// that each source row's cache line is used whole while it is in L1 (rows a
// power-of-two apart share a cache set and would evict each other otherwise).
template <typename S, int W>
EML_TARGET_AVX2 void pack_rows(const S* src, int64_t ld, int64_t depth, Acc<S>* panel) {
  constexpr int L = Vec<Acc<S>>::lanes;
  constexpr int kFullGroups = W / L;
  constexpr int kLastRows = W % L;
  int64_t p = 0;
  for (; p + 2 * L <= depth; p += 2 * L) {
#pragma GCC unroll 4
    for (int group = 0; group < kFullGroups; ++group) {
      pack_row_group<S, W, L>(src, ld, p, group * L, panel);
      pack_row_group<S, W, L>(src, ld, p + L, group * L, panel);
    }
    if constexpr (kLastRows != 0) {
      pack_row_group<S, W, kLastRows>(src, ld, p, kFullGroups * L, panel);
      pack_row_group<S, W, kLastRows>(src, ld, p + L, kFullGroups * L, panel);
    }
  }
  for (; p + L <= depth; p += L) {
#pragma GCC unroll 4
    for (int group = 0; group < kFullGroups; ++group) {
      pack_row_group<S, W, L>(src, ld, p, group * L, panel);
    }
    if constexpr (kLastRows != 0) {
      pack_row_group<S, W, kLastRows>(src, ld, p, kFullGroups * L, panel);
    }
  }
  for (; p < depth; ++p) {
    for (int w = 0; w < W; ++w) panel[p * W + w] = widen(src[w * ld + p]);
  }
}

// 8 16-bit values (one xmm) widened to 8 floats.
template <typename S>
EML_AVX2_INLINE __m256 widen_halves(__m128i halves) {
  if constexpr (std::is_same_v<S, bfloat16_t>) {
    return avx2::widen_bf16(halves);
  } else {
    return _mm256_cvtph_ps(halves);
  }
}

// The first COUNT (< 8) 16-bit values at p, the rest of the xmm zero.
template <typename S, int COUNT>
EML_AVX2_INLINE __m128i load_first(const S* p) {
  if constexpr (COUNT == 6) {  // the A panel step (MR = 6): 8 bytes and 4 bytes
    int32_t last_two;
    std::memcpy(&last_two, p + 4, sizeof(last_two));
    return _mm_insert_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), last_two, 2);
  } else {
    return avx2::load_first_halves(p, COUNT);
  }
}

// panel[p*W + w] = widen(src[p*ld + w]): W contiguous 16-bit values per step.
template <typename S, int W>
EML_TARGET_AVX2 void pack_steps(const S* src, int64_t ld, int64_t depth, float* panel) {
  constexpr int kVectors = W / 8;
  constexpr int kRest = W % 8;
  for (int64_t p = 0; p < depth; ++p) {
    const S* step = src + p * ld;
    float* out = panel + p * W;
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(out + 8 * v, Load<S>::loadu(step + 8 * v));
    if constexpr (kRest != 0) {
      const __m256 rest = widen_halves<S>(load_first<S, kRest>(step + 8 * kVectors));
      store_first<kRest>(out + 8 * kVectors, rest);
    }
  }
}

}  // namespace

template <typename S>
void set_avx2_packing(Kernels<S>& kernels) {
  constexpr int kMr = static_cast<int>(BlockSizes<Acc<S>>::mr);
  constexpr int kNr = static_cast<int>(BlockSizes<Acc<S>>::nr);
  kernels.pack_a_rows = &pack_rows<S, kMr>;
  kernels.pack_b_rows = &pack_rows<S, kNr>;
  if constexpr (is_half_v<S>) {
    kernels.pack_a_steps = &pack_steps<S, kMr>;
    kernels.pack_b_steps = &pack_steps<S, kNr>;
  }
}

template void set_avx2_packing<float>(Kernels<float>&);
template void set_avx2_packing<double>(Kernels<double>&);
template void set_avx2_packing<bfloat16_t>(Kernels<bfloat16_t>&);
template void set_avx2_packing<float16_t>(Kernels<float16_t>&);

}  // namespace eml::gemm::blocked

#endif
