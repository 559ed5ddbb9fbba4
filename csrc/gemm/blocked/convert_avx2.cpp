// Row conversions between the 16-bit element types and float with AVX2 (bfloat16:
// integer rounding; float16: F16C's vcvtps2ph / vcvtph2ps), 8 values at a time.
#include "kernels.h"
#include "weight_kernels.h"

#if EML_GEMM_X86

#include <type_traits>

#include "simd_avx2.h"

namespace eml::gemm::blocked {
namespace {

// 8 floats rounded to nearest even bfloat16; NaN becomes a quiet NaN, as to_bfloat16.
EML_AVX2_INLINE __m128i narrow_bf16(__m256 values) {
  const __m256i bits = _mm256_castps_si256(values);
  const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lowest_kept));
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet_nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256i high = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet_nan, is_nan), 16);
  // The upper halves are < 2^16, so the unsigned saturating pack keeps them exactly.
  return _mm_packus_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
}

template <typename S>
EML_AVX2_INLINE __m128i narrow8(__m256 values) {
  if constexpr (std::is_same_v<S, bfloat16_t>) {
    return narrow_bf16(values);
  } else {
    return _mm256_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}

template <typename S>
EML_TARGET_AVX2 void narrow_row(const float* src, int64_t count, S* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), narrow8<S>(_mm256_loadu_ps(src + i)));
  }
  for (; i < count; ++i) dst[i] = narrow<S>(src[i]);
}

template <typename S>
EML_TARGET_AVX2 void widen_row(const S* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, avx2::Load<S>::loadu(src + i));
  for (; i < count; ++i) dst[i] = widen(src[i]);
}

}  // namespace

template <typename S>
void set_avx2_conversions(Kernels<S>& kernels) {
  kernels.narrow = &narrow_row<S>;
  kernels.widen = &widen_row<S>;
}

template void set_avx2_conversions<bfloat16_t>(Kernels<bfloat16_t>&);
template void set_avx2_conversions<float16_t>(Kernels<float16_t>&);

template <typename W>
void set_avx2_weight_widen(WeightKernels<W>& kernels) {
  kernels.widen = &widen_row<W>;
}

template void set_avx2_weight_widen<int8_t>(WeightKernels<int8_t>&);
template void set_avx2_weight_widen<bfloat16_t>(WeightKernels<bfloat16_t>&);
template void set_avx2_weight_widen<float16_t>(WeightKernels<float16_t>&);

}  // namespace eml::gemm::blocked

#endif
