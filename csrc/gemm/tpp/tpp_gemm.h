// The "Tensor Processing Primitives" GEMM backend: LIBXSMM just-in-time batch-reduce
// GEMM kernels on blocked operands.
//
// Compiled only when LIBXSMM is found (the build defines EML_OPS_WITH_LIBXSMM); this
// header itself is free of LIBXSMM and torch.
#pragma once

#include "../gemm.h"

namespace eml::gemm {

// True when LIBXSMM is initialised and a probe kernel dispatches (JIT works here).
bool tpp_available();

// C = A·B (+ epilogue), beta = 0 semantics, for any strides of A and B (including 0,
// transposes and slices). m, n or k == 0 are fine (k == 0: C = bias or zeros and
// a_row_sums = 0). Bad shapes throw std::invalid_argument, as in every GEMM here
// (check_gemm_shapes, gemm.h). Returns false, with nothing written that matters, only
// when a needed kernel cannot be dispatched: the caller then runs another backend
// (gemm::run: blocked). Throws std::bad_alloc when its scratch memory cannot be had.
// Defined for T = float and T = double.
template <typename T>
bool tpp_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
              const Epilogue<T>& epilogue, const Threading& threading);

// Whether LIBXSMM's kernels are expected to beat the blocked GEMM on C = A·B here. On the
// forward product Y = X·W^T (A and B both contiguous along k) of at most
// kTppSmallForwardMaxFlops (2mnk), they do not with LIBXSMM 1.17's AVX2 kernels, nor with its
// AVX-512 ones on a CPU that splits 512-bit FMAs into halves (Zen 4). Measured on Zen 3 (1
// thread, best of repeated calls): the blocked GEMM ran 16x64x64 .. 128x512x512 forward
// 1.02-1.45x faster, 32x512x512 0.94x; on Zen 4 with AVX-512 (bench, 1 / 2 threads, over
// F.linear) 33x77x65 tpp 0.95x / 0.91x against blocked 1.05x / 1.11x, 64x128x128 1.00x /
// 1.02x against 1.07x / 1.12x. With full-width AVX-512 they win only with few rows and a
// deep k (kTppAvx512ForwardMaxRows, kTppAvx512ForwardMinDepth): on the Xeon (bench, tpp over
// blocked, 1 / 2 threads) 16 and 32 rows x 256 to 512 deep 1.11x-1.36x / 0.99x-1.24x; 64 and
// 128 rows 0.75x-1.05x / 0.76x-1.13x (64x256x256 0.85x, 128x256x512 0.78x), 16 and 32 rows 64
// deep 0.86x-0.89x; on Zen 5, 64x128x128 0.87x and 33x77x65 0.94x. The tpp backend hands the
// rest to the blocked GEMM; the gradients' layouts and larger products stay with LIBXSMM.
inline constexpr double kTppSmallForwardMaxFlops = 2.0 * 128 * 512 * 512;
inline constexpr int64_t kTppAvx512ForwardMaxRows = 32;
inline constexpr int64_t kTppAvx512ForwardMinDepth = 256;
template <typename T>
bool tpp_kernel_wins(ConstMatrixView<T> a, ConstMatrixView<T> b);

extern template bool tpp_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>,
                                     OutputMatrix<float>, const Epilogue<float>&,
                                     const Threading&);
extern template bool tpp_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                                      OutputMatrix<double>, const Epilogue<double>&,
                                      const Threading&);

}  // namespace eml::gemm
