// The transposing pack of float B panels (NR = 16: one 512-bit vector per panel step) with
// AVX-512F: 16 source rows x 16 steps per in-register 16x16 transpose, each row's 64 bytes
// loaded and each panel step stored whole. It replaces two AVX2 8x8 transposes per half of
// that (packing_avx2.cpp); at 256 rows this pack was 13% of a forward GEMM on Zen 5.
//
// GCC 12's AVX-512 headers warn that their own shuffles read an uninitialized vector (the
// undefined source they start from), as in direct_avx512.cpp: not this file's values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels.h"

#if EML_GEMM_X86

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace eml::gemm::blocked {
namespace {

constexpr int kLanes = 16;

// rows[c] <- lane c of every input row, for 16 rows of 16 floats.
EML_AVX512_INLINE void transpose(__m512 rows[kLanes]) {
  __m512 pairs[kLanes], quads[kLanes];
#pragma GCC unroll 8
  for (int i = 0; i < kLanes / 2; ++i) {  // per 128-bit lane: r0 r1 interleaved
    pairs[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    pairs[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int g = 0; g < kLanes / 4; ++g) {  // quads[4g + q], lane l: rows 4g..4g+3 at 4l + q
    const __m512 lo = pairs[4 * g], hi = pairs[4 * g + 1];
    const __m512 lo2 = pairs[4 * g + 2], hi2 = pairs[4 * g + 3];
    quads[4 * g + 0] = _mm512_shuffle_ps(lo, lo2, _MM_SHUFFLE(1, 0, 1, 0));
    quads[4 * g + 1] = _mm512_shuffle_ps(lo, lo2, _MM_SHUFFLE(3, 2, 3, 2));
    quads[4 * g + 2] = _mm512_shuffle_ps(hi, hi2, _MM_SHUFFLE(1, 0, 1, 0));
    quads[4 * g + 3] = _mm512_shuffle_ps(hi, hi2, _MM_SHUFFLE(3, 2, 3, 2));
  }
  constexpr int kEven = 0x88, kOdd = 0xDD;  // 128-bit lanes 0, 2 (1, 3) of each source
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512 even_low = _mm512_shuffle_f32x4(quads[q], quads[4 + q], kEven);
    const __m512 even_high = _mm512_shuffle_f32x4(quads[8 + q], quads[12 + q], kEven);
    const __m512 odd_low = _mm512_shuffle_f32x4(quads[q], quads[4 + q], kOdd);
    const __m512 odd_high = _mm512_shuffle_f32x4(quads[8 + q], quads[12 + q], kOdd);
    rows[q] = _mm512_shuffle_f32x4(even_low, even_high, kEven);
    rows[q + 8] = _mm512_shuffle_f32x4(even_low, even_high, kOdd);
    rows[q + 4] = _mm512_shuffle_f32x4(odd_low, odd_high, kEven);
    rows[q + 12] = _mm512_shuffle_f32x4(odd_low, odd_high, kOdd);
  }
}

// Transposes the 16 rows at `line + w*ld`, of which only the values in `lanes` are read
// (others are zero), and stores result steps first .. first + steps - 1 as panel steps 0 ..
// steps - 1.
EML_AVX512_INLINE void pack_masked_block(const float* line, int64_t ld, __mmask16 lanes,
                                         int first, int steps, float* panel) {
  __m512 block[kLanes];
#pragma GCC unroll 16
  for (int w = 0; w < kLanes; ++w) block[w] = _mm512_maskz_loadu_ps(lanes, line + w * ld);
  transpose(block);
  for (int step = 0; step < steps; ++step) {
    _mm512_storeu_ps(panel + step * kLanes, block[first + step]);
  }
}

// The mask of `count` lanes from lane `first`.
inline __mmask16 lane_range(int first, int count) {
  return static_cast<__mmask16>(((1u << count) - 1) << first);
}

// panel[p*16 + w] = src[w*ld + p] for p < depth: 16 steps per transpose, the last ones
// loaded masked (nothing past depth is read) and stored step by step.
//
// Rows a multiple of 64 bytes apart share L1 sets: 16 of them do not fit its 8 ways, so a
// load that straddles two lines finds its second line evicted when the next block reads it
// (rows 4 KiB apart: the pack took 2x as long). There, a first block from src's line start,
// masked, makes every later load one whole line.
EML_TARGET_AVX512 void pack_rows_16(const float* src, int64_t ld, int64_t depth,
                                    float* panel) {
  int64_t p = 0;
  const auto lead = static_cast<int>(reinterpret_cast<uintptr_t>(src) % 64 / sizeof(float));
  if (ld % kLanes == 0 && lead != 0 && depth > 0) {
    const int steps = static_cast<int>(std::min<int64_t>(kLanes - lead, depth));
    pack_masked_block(src - lead, ld, lane_range(lead, steps), lead, steps, panel);
    p = steps;
  }
  __m512 block[kLanes];
  for (; p + kLanes <= depth; p += kLanes) {
#pragma GCC unroll 16
    for (int w = 0; w < kLanes; ++w) block[w] = _mm512_loadu_ps(src + w * ld + p);
    transpose(block);
#pragma GCC unroll 16
    for (int step = 0; step < kLanes; ++step) {
      _mm512_storeu_ps(panel + (p + step) * kLanes, block[step]);
    }
  }
  if (p < depth) {
    const int steps = static_cast<int>(depth - p);
    pack_masked_block(src + p, ld, lane_range(0, steps), 0, steps, panel + p * kLanes);
  }
}

}  // namespace

void set_avx512_packing(Kernels<float>& kernels) {
  static_assert(BlockSizes<float>::nr == kLanes, "one vector per panel step");
  kernels.pack_b_rows = &pack_rows_16;
}

}  // namespace eml::gemm::blocked

#endif
