// Y = X · (s ⊙ Q)^T + b for weights stored compressed: float activations X, weights Q
// in int8 (with one float scale per output channel) or in a 16-bit type, float results.
// Torch-free, like gemm.h.
#pragma once

#include <cstdint>

#include "../gemm.h"

namespace eml::gemm {

// C[i, j] = scales[j] * sum_p A(i, p) * W(j, p) + bias[j]: A is m x k (any strides),
// W is n x k with W.col_stride == 1 (each output channel's weights contiguous), C is
// m x n row-major (ld >= n). scales (length n) may be null (then 1); so may bias.
// W = int8_t, bfloat16_t or float16_t; its values are widened to float exactly and the
// products summed in float, the scale applied once to the sum (an epilogue), then bias.
//
// Few rows of A (m <= kCompressedDirectRows, serving and decoding): W is read in place,
// once, widened in registers by the dot tiles of the packing-free path. More rows: blocks
// of W's rows are widened into a float buffer and multiplied by the blocked GEMM, whose
// packing and cache blocking then pay off. Throws std::invalid_argument on mismatched
// shapes or a W not contiguous along k.
template <typename W>
void compressed_gemm(ConstMatrixView<float> a, ConstMatrixView<W> weight, const float* scales,
                     OutputMatrix<float> c, const float* bias, const Threading& threading);

// At most this many rows of A take the packing-free path.
inline constexpr int64_t kCompressedDirectRows = 32;

extern template void compressed_gemm<int8_t>(ConstMatrixView<float>, ConstMatrixView<int8_t>,
                                             const float*, OutputMatrix<float>, const float*,
                                             const Threading&);
extern template void compressed_gemm<bfloat16_t>(ConstMatrixView<float>,
                                                 ConstMatrixView<bfloat16_t>, const float*,
                                                 OutputMatrix<float>, const float*,
                                                 const Threading&);
extern template void compressed_gemm<float16_t>(ConstMatrixView<float>,
                                                ConstMatrixView<float16_t>, const float*,
                                                OutputMatrix<float>, const float*,
                                                const Threading&);

}  // namespace eml::gemm
