// Thin AVX2/FMA vector wrappers shared by the AVX2 kernels, so that one template
// serves float (8 lanes) and double (4 lanes).
//
// Include only from the *_avx2.cpp files: every function here carries the
// avx2,fma target attribute, and callers must carry it too.
#pragma once

#include "../isa.h"

#if EML_GEMM_X86

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "../half.h"

namespace eml::gemm::blocked::avx2 {

// Lane i of mask_table + (kLanes - count) is "on" for i < count: masks for edges.
alignas(64) inline constexpr int32_t kMask32[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                    0,  0,  0,  0,  0,  0,  0,  0};
alignas(64) inline constexpr int64_t kMask64[8] = {-1, -1, -1, -1, 0, 0, 0, 0};

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  using Scalar = float;
  using V = __m256;
  using Mask = __m256i;
  static constexpr int lanes = 8;
  static EML_AVX2_INLINE V zero() { return _mm256_setzero_ps(); }
  static EML_AVX2_INLINE V load(const float* p) { return _mm256_load_ps(p); }
  static EML_AVX2_INLINE V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static EML_AVX2_INLINE V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static EML_AVX2_INLINE V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static EML_AVX2_INLINE V add(V a, V b) { return _mm256_add_ps(a, b); }
  static EML_AVX2_INLINE void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  // First `count` lanes on (0 < count <= lanes).
  static EML_AVX2_INLINE Mask mask(int count) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask32 + 8 - count));
  }
  static EML_AVX2_INLINE V maskload(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static EML_AVX2_INLINE void maskstore(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  // out[0..3] = horizontal sums of v0..v3.
  static EML_AVX2_INLINE void sum4(V v0, V v1, V v2, V v3, float* out) {
    const V t0 = _mm256_hadd_ps(v0, v1);
    const V t1 = _mm256_hadd_ps(v2, v3);
    const V t2 = _mm256_hadd_ps(t0, t1);  // [s0 s1 s2 s3] of low and of high halves
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1)));
  }
};

template <>
struct Vec<double> {
  using Scalar = double;
  using V = __m256d;
  using Mask = __m256i;
  static constexpr int lanes = 4;
  static EML_AVX2_INLINE V zero() { return _mm256_setzero_pd(); }
  static EML_AVX2_INLINE V load(const double* p) { return _mm256_load_pd(p); }
  static EML_AVX2_INLINE V loadu(const double* p) { return _mm256_loadu_pd(p); }
  static EML_AVX2_INLINE V broadcast(const double* p) { return _mm256_broadcast_sd(p); }
  static EML_AVX2_INLINE V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static EML_AVX2_INLINE V add(V a, V b) { return _mm256_add_pd(a, b); }
  static EML_AVX2_INLINE void storeu(double* p, V v) { _mm256_storeu_pd(p, v); }
  static EML_AVX2_INLINE Mask mask(int count) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask64 + 4 - count));
  }
  static EML_AVX2_INLINE V maskload(const double* p, Mask m) { return _mm256_maskload_pd(p, m); }
  static EML_AVX2_INLINE void maskstore(double* p, Mask m, V v) { _mm256_maskstore_pd(p, m, v); }
  static EML_AVX2_INLINE void sum4(V v0, V v1, V v2, V v3, double* out) {
    const V t0 = _mm256_hadd_pd(v0, v1);  // [s0a s1a s0b s1b]
    const V t1 = _mm256_hadd_pd(v2, v3);  // [s2a s3a s2b s3b]
    const V low = _mm256_permute2f128_pd(t0, t1, 0x20);
    const V high = _mm256_permute2f128_pd(t0, t1, 0x31);
    _mm256_storeu_pd(out, _mm256_add_pd(low, high));
  }
};

// Loads of operand elements S into vectors of their accumulator type Acc<S>: the
// identity for float and double, a widening for the 16-bit types (8 lanes of float).
// Mask: which lanes a partial load reads (from mask(count), 0 <= count <= lanes).
template <typename S>
struct Load : Vec<S> {};

// Widens 8 bfloat16 (one xmm) to 8 floats: bfloat16 is the upper half of a float.
EML_AVX2_INLINE __m256 widen_bf16(__m128i halves) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

// Partial loads of 16-bit elements: AVX2 has no 16-bit masked load, so the first
// `count` elements are copied into a zeroed 8-element buffer.
template <typename S>
EML_AVX2_INLINE __m128i load_first_halves(const S* p, int count) {
  alignas(16) uint16_t buffer[8] = {};
  if (count > 0) std::memcpy(buffer, p, sizeof(S) * static_cast<size_t>(count));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buffer));
}

template <>
struct Load<bfloat16_t> {
  using V = __m256;
  using Mask = int;
  static constexpr int lanes = 8;
  static EML_AVX2_INLINE V loadu(const bfloat16_t* p) {
    return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static EML_AVX2_INLINE V broadcast(const bfloat16_t* p) {
    return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(uint32_t{p->bits} << 16)));
  }
  static EML_AVX2_INLINE Mask mask(int count) { return count; }
  static EML_AVX2_INLINE V maskload(const bfloat16_t* p, Mask count) {
    return widen_bf16(load_first_halves(p, count));
  }
  // 16 values, widened half at a time without a shuffle: each 32-bit word holds two
  // bfloat16, the even-indexed in its low half (shifted up: a float) and the odd-indexed in
  // its high half (masked: a float). Only for sums over all lanes, where the order does not
  // matter as long as both operands share it (the dot tiles).
  template <bool EVEN>
  static EML_AVX2_INLINE V load_interleaved(const bfloat16_t* p) {
    const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_castsi256_ps(EVEN ? _mm256_slli_epi32(words, 16)
                                    : _mm256_and_si256(words, _mm256_set1_epi32(-65536)));
  }
};

template <>
struct Load<float16_t> {
  using V = __m256;
  using Mask = int;
  static constexpr int lanes = 8;
  static EML_AVX2_INLINE V loadu(const float16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static EML_AVX2_INLINE V broadcast(const float16_t* p) {
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(p->bits)));
  }
  static EML_AVX2_INLINE Mask mask(int count) { return count; }
  static EML_AVX2_INLINE V maskload(const float16_t* p, Mask count) {
    return _mm256_cvtph_ps(load_first_halves(p, count));
  }
};

// int8 weights (compressed_gemm.h): 8 values sign-extended to int32, then made floats
// (exact: |q| <= 128).
EML_AVX2_INLINE __m256 widen_int8(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

template <>
struct Load<int8_t> {
  using V = __m256;
  using Mask = int;
  static constexpr int lanes = 8;
  static EML_AVX2_INLINE V loadu(const int8_t* p) {
    return widen_int8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static EML_AVX2_INLINE V broadcast(const int8_t* p) { return _mm256_set1_ps(*p); }
  static EML_AVX2_INLINE Mask mask(int count) { return count; }
  static EML_AVX2_INLINE V maskload(const int8_t* p, Mask count) {
    int64_t bytes = 0;  // the first `count` values, the rest 0
    if (count > 0) std::memcpy(&bytes, p, static_cast<size_t>(count));
    return widen_int8(_mm_cvtsi64_si128(bytes));
  }
};

}  // namespace eml::gemm::blocked::avx2

#endif
