// The packed path: the three cache-blocking loops (NC, KC, MC) around the macro-kernel.
#pragma once

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// C = A·B (+ bias) on the calling thread. If row_sums is set it receives A's row
// sums, accumulated while packing A for the first NC column block only. 16-bit S:
// A and B are widened while packed; C, bias and row sums are float (Acc<S>).
template <typename S>
void packed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums);

}  // namespace eml::gemm::blocked
