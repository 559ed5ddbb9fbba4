// The fast CPU GEMM of eml_ops: BLIS-style packing and cache blocking around AVX-512,
// AVX2 or portable register kernels (the best the CPU runs: isa.h), packing-free paths
// for small and skinny shapes, and threads over disjoint blocks of C (or over shares of k,
// summed after, for a G·W with a small C). Torch-free, like gemm.h.
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

// B packed once for many products (a frozen weight): prepack_b writes all of B in the packed
// path's panels, and the blocked_gemm overload below multiplies by it without packing B
// again. Float and double. The layout: for each block of kc steps (the last may be shorter,
// kc_here), the panels of NR columns (BlockSizes<T>::nr, zero-padded to padded_cols =
// round_up(n, NR)), kc_here x NR values each, the block from step p at data[p * padded_cols].
template <typename T>
struct PrepackedB {
  const T* data;  // prepacked_b_size<T>(k, n) values written by prepack_b, 64-byte aligned
  int64_t k;
  int64_t n;
  int64_t kc;  // the depth of its blocks of steps (prepack_b's `kc`)
};

// The depth prepack_b should use for k steps: the packed path's, from the active ISA's tuning.
template <typename T>
int64_t prepack_depth(int64_t k);

// Values of T that prepack_b writes for a k x n B.
template <typename T>
int64_t prepacked_b_size(int64_t k, int64_t n);

// Packs b (any strides) into `packed` (prepacked_b_size<T>(b.rows, b.cols) values) in blocks
// of kc steps. Throws std::invalid_argument for a negative size, kc < 1, or `packed` not
// aligned to kPrepackedAlignment bytes (the kernels' aligned loads of B).
inline constexpr int64_t kPrepackedAlignment = 64;
template <typename T>
void prepack_b(ConstMatrixView<T> b, int64_t kc, T* packed);

// C = A·B (+ epilogue) with B packed by prepack_b: blocked_gemm's contract, but every part
// of C runs the packed path, reading B's panels in place. Throws std::invalid_argument as
// check_gemm_shapes does, and for B's data missing or not aligned, or its kc below 1.
template <typename T>
void blocked_gemm(ConstMatrixView<T> a, const PrepackedB<T>& b, OutputMatrix<T> c,
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
extern template void blocked_gemm<float>(ConstMatrixView<float>, const PrepackedB<float>&,
                                         OutputMatrix<float>, const Epilogue<float>&,
                                         const Threading&);
extern template void blocked_gemm<double>(ConstMatrixView<double>, const PrepackedB<double>&,
                                          OutputMatrix<double>, const Epilogue<double>&,
                                          const Threading&);

}  // namespace eml::gemm
