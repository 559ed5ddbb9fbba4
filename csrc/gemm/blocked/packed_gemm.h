// The packed path: the three cache-blocking loops (NC, KC, MC) around the macro-kernel.
#pragma once

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// The row stride of the buffer that packed_gemm computes C's column blocks in, then copies
// into C: where C's rows are a multiple of tuning().aliasing_row_bytes apart (they would
// share one or two L1 sets, and a tile's rows and the packed panels evict each other), k
// spans more than one KC block and the m x NC buffer fits this thread's L3 share. 0 (compute
// in C) otherwise. T: float or double.
template <typename T>
int64_t staged_c_ld(int64_t m, int64_t n, int64_t k, int64_t ldc);

// C = A·B (+ bias) on the calling thread. If row_sums is set it receives A's row
// sums, accumulated while packing A for the first NC column block only. 16-bit S:
// A and B are widened while packed; C, bias and row sums are float (Acc<S>).
template <typename S>
void packed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums);

}  // namespace eml::gemm::blocked
