// Thin AVX-512F vector wrappers for the AVX-512 micro-kernels (the same interface as the
// parts of simd_avx2.h that microkernel_impl.h and broadcast_tile_impl.h use) and the dot
// and interleaved tiles (direct_avx512.cpp): float (16 lanes), double (8).
//
// Include only from the *_avx512.cpp files: every function here carries the avx512f
// target attribute, and callers must carry it too.
#pragma once

#include "../isa.h"

#if EML_GEMM_X86

#include <immintrin.h>

namespace eml::gemm::blocked::avx512 {

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  using Scalar = float;
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int lanes = 16;
  static EML_AVX512_INLINE V zero() { return _mm512_setzero_ps(); }
  static EML_AVX512_INLINE V load(const float* p) { return _mm512_load_ps(p); }
  static EML_AVX512_INLINE V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static EML_AVX512_INLINE V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static EML_AVX512_INLINE V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static EML_AVX512_INLINE V add(V a, V b) { return _mm512_add_ps(a, b); }
  static EML_AVX512_INLINE void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  // A 64-byte aligned store past the caches (a non-temporal hint).
  static EML_AVX512_INLINE void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  // The first `count` lanes on (0 <= count <= lanes).
  static EML_AVX512_INLINE Mask mask(int count) {
    return static_cast<Mask>((1u << count) - 1);
  }
  // The masked lanes' values from p, zeros in the others (nothing past them is read).
  static EML_AVX512_INLINE V maskload(const float* p, Mask m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
  // Writes the masked lanes of v to p, nothing else.
  static EML_AVX512_INLINE void maskstore(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static EML_AVX512_INLINE float sum(V v) { return _mm512_reduce_add_ps(v); }
};

template <>
struct Vec<double> {
  using Scalar = double;
  using V = __m512d;
  using Mask = __mmask8;
  static constexpr int lanes = 8;
  static EML_AVX512_INLINE V zero() { return _mm512_setzero_pd(); }
  static EML_AVX512_INLINE V load(const double* p) { return _mm512_load_pd(p); }
  static EML_AVX512_INLINE V loadu(const double* p) { return _mm512_loadu_pd(p); }
  static EML_AVX512_INLINE V broadcast(const double* p) { return _mm512_set1_pd(*p); }
  static EML_AVX512_INLINE V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static EML_AVX512_INLINE V add(V a, V b) { return _mm512_add_pd(a, b); }
  static EML_AVX512_INLINE void storeu(double* p, V v) { _mm512_storeu_pd(p, v); }
  static EML_AVX512_INLINE void stream(double* p, V v) { _mm512_stream_pd(p, v); }
  static EML_AVX512_INLINE Mask mask(int count) {
    return static_cast<Mask>((1u << count) - 1);
  }
  static EML_AVX512_INLINE V maskload(const double* p, Mask m) {
    return _mm512_maskz_loadu_pd(m, p);
  }
  static EML_AVX512_INLINE void maskstore(double* p, Mask m, V v) {
    _mm512_mask_storeu_pd(p, m, v);
  }
  static EML_AVX512_INLINE double sum(V v) { return _mm512_reduce_add_pd(v); }
};

// Loads of an operand of type S as Vec<S>'s lanes (the interface of avx2::Load, for tiles
// shared across ISAs): float and double load as they are.
template <typename S>
struct Load : Vec<S> {};

}  // namespace eml::gemm::blocked::avx512

#endif
