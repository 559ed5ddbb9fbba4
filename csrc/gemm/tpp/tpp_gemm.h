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

extern template bool tpp_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>,
                                     OutputMatrix<float>, const Epilogue<float>&,
                                     const Threading&);
extern template bool tpp_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                                      OutputMatrix<double>, const Epilogue<double>&,
                                      const Threading&);

}  // namespace eml::gemm
