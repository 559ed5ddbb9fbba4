#include "packing.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "../int_math.h"
#include "block_sizes.h"

namespace eml::gemm::blocked {
namespace {

// One W-wide panel: panel[p*W + w] = source(w, p) for w < width, 0 beyond, where
// source(w, p) = data[w*w_stride + p*p_stride], widened to Acc<S>. Fast paths for
// unit strides.
template <typename S, int W>
void pack_panel(const S* data, int64_t width, int64_t depth, int64_t w_stride,
                int64_t p_stride, Acc<S>* __restrict panel, PackRowsKernel<S> pack_rows,
                PackStepsKernel<S> pack_steps) {
  using T = Acc<S>;
  if (width == W && w_stride == 1) {  // each step is W contiguous values
    if constexpr (std::is_same_v<S, T>) {
      for (int64_t p = 0; p < depth; ++p) {
        std::memcpy(panel + p * W, data + p * p_stride, sizeof(T) * W);
      }
      return;
    } else {
      if (pack_steps != nullptr) return pack_steps(data, p_stride, depth, panel);
      for (int64_t p = 0; p < depth; ++p) {
        for (int w = 0; w < W; ++w) panel[p * W + w] = widen(data[p * p_stride + w]);
      }
      return;
    }
  }
  if (width == W && p_stride == 1) {  // W contiguous rows: a transpose
    if (pack_rows != nullptr) return pack_rows(data, w_stride, depth, panel);
    const S* rows[W];
    for (int w = 0; w < W; ++w) rows[w] = data + w * w_stride;
    for (int64_t p = 0; p < depth; ++p) {
      for (int w = 0; w < W; ++w) panel[p * W + w] = widen(rows[w][p]);
    }
    return;
  }
  for (int64_t p = 0; p < depth; ++p) {  // any strides, including 0, and edges
    const S* step = data + p * p_stride;
    int64_t w = 0;
    for (; w < width; ++w) panel[p * W + w] = widen(step[w * w_stride]);
    for (; w < W; ++w) panel[p * W + w] = T(0);
  }
}

// Sums each of the `width` lanes of a packed panel over its depth.
template <typename T, int W>
void add_panel_lane_sums(const T* panel, int64_t width, int64_t depth, T* sums) {
  T lane_sums[W] = {};
  for (int64_t p = 0; p < depth; ++p) {
    for (int w = 0; w < W; ++w) lane_sums[w] += panel[p * W + w];
  }
  for (int64_t w = 0; w < width; ++w) sums[w] += lane_sums[w];
}

// Steps packed from every panel of a block before the next steps (pack_panels).
constexpr int64_t kStepBlock = 8;

// Panels of W lanes across `width`, panel j at packed + j * depth; if lane_sums is set, adds
// each lane's sum over the depth to it.
//
// Where a step's W values are contiguous (B = W or X in the backward products, A = G^T in
// dL/dW), each step is a row of the source, often 4 KiB or more from the next: panel by
// panel, every step is a new page, which no hardware prefetcher follows, and an A panel
// reads 6 floats of a line that the next panel needs again after kc rows have pushed it out
// of cache. So kStepBlock steps of every panel go first: each source row is read in order,
// line after line (Zen 3, one thread, 1024^3: dL/dW 87.7 -> 90.9 GFLOP/s, dL/dX 88.9 -> 91.7;
// 256x1024x4096: 83.4 -> 88.8 and 84.3 -> 90.8).
template <typename S, int W>
void pack_panels(const S* data, int64_t width, int64_t depth, int64_t w_stride,
                 int64_t p_stride, Acc<S>* packed, Acc<S>* lane_sums,
                 PackRowsKernel<S> pack_rows, PackStepsKernel<S> pack_steps) {
  // Steps per pass over the panels: all of them (panel by panel), or kStepBlock.
  const int64_t step_block = w_stride == 1 && width > W ? kStepBlock : depth;
  for (int64_t p = 0; p < depth; p += step_block) {
    const int64_t steps = std::min(step_block, depth - p);
    const bool last_steps = p + steps == depth;
    for (int64_t j = 0; j < width; j += W) {
      const int64_t lanes = std::min<int64_t>(W, width - j);
      Acc<S>* panel = packed + j * depth;
      pack_panel<S, W>(data + p * p_stride + j * w_stride, lanes, steps, w_stride, p_stride,
                       panel + p * W, pack_rows, pack_steps);
      // Each panel is summed once its last steps are written (panel by panel: from L1).
      if (lane_sums != nullptr && last_steps) {
        add_panel_lane_sums<Acc<S>, W>(panel, lanes, depth, lane_sums + j);
      }
    }
  }
}

}  // namespace

template <typename S>
void pack_a(ConstMatrixView<S> a, Acc<S>* packed, Acc<S>* row_sums, PackRowsKernel<S> pack_rows,
            PackStepsKernel<S> pack_steps) {
  constexpr int MR = static_cast<int>(BlockSizes<Acc<S>>::mr);
  pack_panels<S, MR>(a.data, a.rows, a.cols, a.row_stride, a.col_stride, packed, row_sums,
                     pack_rows, pack_steps);
}

template <typename S>
void pack_b(ConstMatrixView<S> b, Acc<S>* packed, PackRowsKernel<S> pack_rows,
            PackStepsKernel<S> pack_steps) {
  constexpr int NR = static_cast<int>(BlockSizes<Acc<S>>::nr);
  pack_panels<S, NR>(b.data, b.cols, b.rows, b.col_stride, b.row_stride, packed, nullptr,
                     pack_rows, pack_steps);
}

template <typename T>
int64_t packed_a_size(int64_t mc, int64_t kc) {
  return round_up(mc, BlockSizes<T>::mr) * kc;
}

template <typename T>
int64_t packed_b_size(int64_t kc, int64_t nc) {
  return round_up(nc, BlockSizes<T>::nr) * kc;
}

#define EML_INSTANTIATE_PACKING(S)                                                      \
  template void pack_a<S>(ConstMatrixView<S>, Acc<S>*, Acc<S>*, PackRowsKernel<S>,      \
                          PackStepsKernel<S>);                                         \
  template void pack_b<S>(ConstMatrixView<S>, Acc<S>*, PackRowsKernel<S>, PackStepsKernel<S>);
EML_INSTANTIATE_PACKING(float)
EML_INSTANTIATE_PACKING(double)
EML_INSTANTIATE_PACKING(bfloat16_t)
EML_INSTANTIATE_PACKING(float16_t)
#undef EML_INSTANTIATE_PACKING
template int64_t packed_a_size<float>(int64_t, int64_t);
template int64_t packed_a_size<double>(int64_t, int64_t);
template int64_t packed_b_size<float>(int64_t, int64_t);
template int64_t packed_b_size<double>(int64_t, int64_t);

}  // namespace eml::gemm::blocked
