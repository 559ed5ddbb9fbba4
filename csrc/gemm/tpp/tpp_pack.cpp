// Packing strided views into the blocked layouts the kernels read, and the other
// plain memory passes of the backend (row sums, bias fill, copying Z tiles out).
#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "tpp_internal.h"

namespace eml::gemm::tpp {

namespace {

// dst[j*ld_dst + i] = src[i*ld_src + j] (+ add[i]) for i < rows, j < cols: a transpose,
// in registers (4x4 floats or 2x2 doubles, SSE2 = baseline x86-64) where possible.
template <typename T>
void transpose(T* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows, int64_t cols,
               const T* add) {
  int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 4 <= rows; i += 4) {
      const float* s = src + i * ld_src;
      const __m128 a = add ? _mm_loadu_ps(add + i) : _mm_setzero_ps();
      int64_t j = 0;
      for (; j + 4 <= cols; j += 4) {
        __m128 r0 = _mm_loadu_ps(s + j), r1 = _mm_loadu_ps(s + ld_src + j);
        __m128 r2 = _mm_loadu_ps(s + 2 * ld_src + j), r3 = _mm_loadu_ps(s + 3 * ld_src + j);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        float* d = dst + j * ld_dst + i;
        _mm_storeu_ps(d, _mm_add_ps(r0, a));
        _mm_storeu_ps(d + ld_dst, _mm_add_ps(r1, a));
        _mm_storeu_ps(d + 2 * ld_dst, _mm_add_ps(r2, a));
        _mm_storeu_ps(d + 3 * ld_dst, _mm_add_ps(r3, a));
      }
      for (; j < cols; ++j)
        for (int64_t t = 0; t < 4; ++t)
          dst[j * ld_dst + i + t] = s[t * ld_src + j] + (add ? add[i + t] : 0.0f);
    }
  } else {
    for (; i + 2 <= rows; i += 2) {
      const double* s = src + i * ld_src;
      const __m128d a = add ? _mm_loadu_pd(add + i) : _mm_setzero_pd();
      int64_t j = 0;
      for (; j + 2 <= cols; j += 2) {
        const __m128d r0 = _mm_loadu_pd(s + j), r1 = _mm_loadu_pd(s + ld_src + j);
        double* d = dst + j * ld_dst + i;
        _mm_storeu_pd(d, _mm_add_pd(_mm_unpacklo_pd(r0, r1), a));
        _mm_storeu_pd(d + ld_dst, _mm_add_pd(_mm_unpackhi_pd(r0, r1), a));
      }
      for (; j < cols; ++j)
        for (int64_t t = 0; t < 2; ++t)
          dst[j * ld_dst + i + t] = s[t * ld_src + j] + (add ? add[i + t] : 0.0);
    }
  }
#endif
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      dst[j * ld_dst + i] = src[i * ld_src + j] + (add ? add[i] : T(0));
}

}  // namespace

template <typename T>
void copy_2d(T* dst, int64_t ld_dst, const T* src, int64_t s_outer, int64_t s_inner,
             int64_t n_outer, int64_t n_inner) {
  if (n_outer <= 0 || n_inner <= 0) return;
  if (s_inner == 1) {  // rows are contiguous on both sides
    for (int64_t o = 0; o < n_outer; ++o)
      std::memcpy(dst + o * ld_dst, src + o * s_outer, size_t(n_inner) * sizeof(T));
    return;
  }
  if (s_outer == 1) {  // a transpose: tile by tile so both sides stay in L1
    constexpr int64_t kTile = 64;
    for (int64_t i0 = 0; i0 < n_inner; i0 += kTile)
      for (int64_t o0 = 0; o0 < n_outer; o0 += kTile)
        transpose<T>(dst + o0 * ld_dst + i0, ld_dst, src + o0 + i0 * s_inner, s_inner,
                     std::min(kTile, n_inner - i0), std::min(kTile, n_outer - o0), nullptr);
    return;
  }
  for (int64_t o = 0; o < n_outer; ++o) {  // anything else, stride 0 included
    const T* s = src + o * s_outer;
    T* d = dst + o * ld_dst;
    for (int64_t i = 0; i < n_inner; ++i) d[i] = s[i * s_inner];
  }
}

template <typename T>
void pack_p_block(ConstMatrixView<T> p, int64_t r0, int64_t rows, int64_t pad_rows, int64_t bm,
                  T* dst) {
  // column-major rows x K with lda = bm: outer kk, inner r
  copy_2d(dst, bm, p.data + r0 * p.row_stride, p.col_stride, p.row_stride, p.cols, rows);
  // The padding rows only feed Z rows that are thrown away; zeros keep them cheap
  // (no NaN or denormal arithmetic on stale memory).
  if (pad_rows > rows) {
    for (int64_t kk = 0; kk < p.cols; ++kk)
      std::fill(dst + kk * bm + rows, dst + kk * bm + pad_rows, T(0));
  }
}

template <typename T>
void pack_q_block(ConstMatrixView<T> q, int64_t c0, int64_t cols, int64_t bn, int64_t bk,
                  T* dst) {
  const int64_t k = q.rows;
  for (int64_t kb = 0, k0 = 0; k0 < k; ++kb, k0 += bk) {
    const int64_t depth = std::min(bk, k - k0);
    // column-major depth x cols with ldb = bk: outer col, inner kk
    copy_2d(dst + kb * bn * bk, bk, q.data + k0 * q.row_stride + c0 * q.col_stride,
            q.col_stride, q.row_stride, cols, depth);
  }
}

template <typename T>
void store_columns(const T* z, int64_t ldz, int64_t rows, int64_t cols, OutputMatrix<T> c,
                   int64_t i0, int64_t j0, const T* bias) {
  for (int64_t col = 0; col < cols; ++col) {
    T* out = c.data + (i0 + col) * c.ld + j0;
    const T* in = z + col * ldz;
    if (bias) {
      for (int64_t r = 0; r < rows; ++r) out[r] = in[r] + bias[j0 + r];
    } else {
      std::memcpy(out, in, size_t(rows) * sizeof(T));
    }
  }
}

template <typename T>
void store_transposed(const T* z, int64_t ldz, int64_t rows, int64_t cols, OutputMatrix<T> c,
                      int64_t i0, int64_t j0, const T* bias) {
  // C(i0 + r, j0 + col) = z[col*ldz + r]: z holds `cols` columns of `rows` elements
  transpose<T>(c.data + i0 * c.ld + j0, c.ld, z, ldz, cols, rows, bias ? bias + j0 : nullptr);
}

#define EML_TPP_INSTANTIATE(T)                                                                \
  template void copy_2d<T>(T*, int64_t, const T*, int64_t, int64_t, int64_t, int64_t);       \
  template void pack_p_block<T>(ConstMatrixView<T>, int64_t, int64_t, int64_t, int64_t, T*); \
  template void store_columns<T>(const T*, int64_t, int64_t, int64_t, OutputMatrix<T>,       \
                                 int64_t, int64_t, const T*);                                \
  template void pack_q_block<T>(ConstMatrixView<T>, int64_t, int64_t, int64_t, int64_t, T*); \
  template void store_transposed<T>(const T*, int64_t, int64_t, int64_t, OutputMatrix<T>,    \
                                    int64_t, int64_t, const T*);
EML_TPP_INSTANTIATE(float)
EML_TPP_INSTANTIATE(double)
#undef EML_TPP_INSTANTIATE

}  // namespace eml::gemm::tpp
