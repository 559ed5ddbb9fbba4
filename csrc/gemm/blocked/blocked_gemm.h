// The fast CPU GEMM of eml_ops: BLIS-style packing and cache blocking around AVX-512,
// AVX2 or portable register kernels (the best the CPU runs: isa.h), packing-free paths
// for small and skinny shapes, and threads over disjoint blocks of C. Torch-free, like
// gemm.h.
#pragma once

#include "../gemm.h"

namespace eml::gemm {

// C = A·B (+ epilogue.bias); epilogue.a_row_sums, when set, receives A's row sums.
// beta = 0: C is overwritten. k == 0 gives C = bias (or zeros); m == 0 does nothing;
// n == 0 still fills a_row_sums. A and B may have any strides (0, transposed,
// sliced); C is row-major with ld >= n and must not overlap A, B or the epilogue.
// Kernels follow active_isa() (isa.h). Throws std::invalid_argument on mismatched
// shapes (check_gemm_shapes, gemm.h). Defined for T = float, double, bfloat16_t and
// float16_t (half.h).
//
// 16-bit T: operands are widened to float (while packing, or in registers on the
// packing-free paths), products and the bias accumulate in float, and each result
// and row sum is rounded once to T (round-to-nearest-even; NaN and Inf kept). Float
// results wait in a per-thread buffer of at most 8 MiB: C is computed in blocks of rows
// and columns that fit it.
template <typename T>
void blocked_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                  const Epilogue<T>& epilogue, const Threading& threading);

extern template void blocked_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>,
                                         OutputMatrix<float>, const Epilogue<float>&,
                                         const Threading&);
extern template void blocked_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                                          OutputMatrix<double>, const Epilogue<double>&,
                                          const Threading&);
extern template void blocked_gemm<bfloat16_t>(ConstMatrixView<bfloat16_t>,
                                              ConstMatrixView<bfloat16_t>,
                                              OutputMatrix<bfloat16_t>,
                                              const Epilogue<bfloat16_t>&, const Threading&);
extern template void blocked_gemm<float16_t>(ConstMatrixView<float16_t>,
                                             ConstMatrixView<float16_t>, OutputMatrix<float16_t>,
                                             const Epilogue<float16_t>&, const Threading&);

}  // namespace eml::gemm
