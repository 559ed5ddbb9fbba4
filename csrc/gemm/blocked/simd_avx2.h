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

#define EML_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define EML_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace eml::gemm::blocked::avx2 {

// Lane i of mask_table + (kLanes - count) is "on" for i < count: masks for edges.
alignas(64) inline constexpr int32_t kMask32[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                    0,  0,  0,  0,  0,  0,  0,  0};
alignas(64) inline constexpr int64_t kMask64[8] = {-1, -1, -1, -1, 0, 0, 0, 0};

template <typename T>
struct Vec;

template <>
struct Vec<float> {
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

}  // namespace eml::gemm::blocked::avx2

#endif
