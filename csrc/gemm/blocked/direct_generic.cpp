// Packing-free tiles in portable C++ (see kernels.h); independent per-lane partial
// sums let the compiler vectorise without reassociating a reduction.
#include <utility>

#include "direct_tiles.h"
#include "kernels.h"
#include "weight_kernels.h"

namespace eml::gemm::blocked {
namespace {

constexpr int kLanes = 8;

template <typename S, typename SB, int R, int C>
void dot_tile(int64_t k, const S* a, int64_t lda, const SB* b, int64_t ldb, Acc<S>* c,
              int64_t ldc, const Acc<S>* bias, bool accumulate) {
  using T = Acc<S>;
  T acc[R][C][kLanes] = {};
  int64_t p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < C; ++j) {
        for (int l = 0; l < kLanes; ++l) {
          acc[r][j][l] += widen(a[r * lda + p + l]) * widen(b[j * ldb + p + l]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      T sum = 0;
      for (int l = 0; l < kLanes; ++l) sum += acc[r][j][l];
      for (int64_t q = p; q < k; ++q) sum += widen(a[r * lda + q]) * widen(b[j * ldb + q]);
      direct_tiles::write_dot_sum(c[r * ldc + j], sum, bias, j, accumulate);
    }
  }
}

template <typename S, int R, int W>
void broadcast_tile(int64_t k, const S* a, int64_t a_row_stride, int64_t a_col_stride,
                    const S* b, int64_t ldb, Acc<S>* c, int64_t ldc, int64_t cols,
                    const Acc<S>* bias, bool accumulate) {
  using T = Acc<S>;
  T acc[R][W] = {};
  for (int64_t p = 0; p < k; ++p) {
    const S* b_row = b + p * ldb;
    for (int r = 0; r < R; ++r) {
      const T a_value = widen(a[r * a_row_stride + p * a_col_stride]);
      if (cols == W) {
        for (int j = 0; j < W; ++j) acc[r][j] += a_value * widen(b_row[j]);
      } else {
        for (int64_t j = 0; j < cols; ++j) acc[r][j] += a_value * widen(b_row[j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    T* c_row = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) {
      c_row[j] = accumulate ? c_row[j] + acc[r][j]
                            : (bias != nullptr ? acc[r][j] + bias[j] : acc[r][j]);
    }
  }
}

template <typename S, int R>
void stream_tile(int64_t k, const S* a, int64_t a_row_stride, int64_t a_col_stride, const S* b,
                 int64_t ldb, Acc<S>* c, int64_t ldc, int64_t cols) {
  using T = Acc<S>;
  for (int64_t p = 0; p < k; ++p) {
    const S* b_row = b + p * ldb;
    for (int r = 0; r < R; ++r) {
      const T a_value = widen(a[r * a_row_stride + p * a_col_stride]);
      T* __restrict c_row = c + r * ldc;
      for (int64_t j = 0; j < cols; ++j) c_row[j] += a_value * widen(b_row[j]);
    }
  }
}

// This file's tiles, for set_direct_tiles (direct_tiles.h).
struct GenericTiles {
  template <typename S, typename SB, int R, int C>
  static DotTile<S, SB> dot() { return &dot_tile<S, SB, R, C>; }
  template <typename S, int R, int W>
  static BroadcastTile<S> broadcast() { return &broadcast_tile<S, R, W>; }
  template <typename S, int R>
  static StreamTile<S> stream() { return &stream_tile<S, R>; }
};

}  // namespace

template <typename T>
void set_generic_direct_tiles(Kernels<T>& kernels) {
  set_direct_tiles<GenericTiles>(kernels);
}

template void set_generic_direct_tiles<float>(Kernels<float>&);
template void set_generic_direct_tiles<double>(Kernels<double>&);
template void set_generic_direct_tiles<bfloat16_t>(Kernels<bfloat16_t>&);
template void set_generic_direct_tiles<float16_t>(Kernels<float16_t>&);

template <typename W>
void set_generic_weight_tiles(WeightKernels<W>& kernels) {
  set_dot_tiles<GenericTiles>(kernels.dot);
}

template void set_generic_weight_tiles<int8_t>(WeightKernels<int8_t>&);
template void set_generic_weight_tiles<bfloat16_t>(WeightKernels<bfloat16_t>&);
template void set_generic_weight_tiles<float16_t>(WeightKernels<float16_t>&);

}  // namespace eml::gemm::blocked
