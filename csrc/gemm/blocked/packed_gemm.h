// The packed path: the three cache-blocking loops (NC, KC, MC) around the macro-kernel.
#pragma once

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// C = A·B (+ bias) on the calling thread. If row_sums is set it receives A's row
// sums, accumulated while packing A for the first NC column block only.
template <typename T>
void packed_gemm(const Kernels<T>& kernels, ConstMatrixView<T> a, ConstMatrixView<T> b,
                 OutputMatrix<T> c, const T* bias, T* row_sums);

}  // namespace eml::gemm::blocked
