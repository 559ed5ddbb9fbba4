// The two loops around the micro-kernel: one packed MC x KC block of A times one
// packed KC x NC panel of B into C, with edge tiles computed into a scratch tile.
#pragma once

#include <cstdint>

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// c: the mc x nc block of C. First KC block (accumulate = false): C = A·B (+ bias,
// bias[0:nc], when set). Later blocks: C += A·B. micro_pair (nullable) computes two
// adjacent whole tiles at once (Kernels::micro_pair); micro_rows (nullable, MR - 1 entries)
// the first rows of a whole-width tile (Kernels::micro_rows), micro_pair_rows (likewise)
// those of two (Kernels::micro_pair_rows).
template <typename T>
void macro_kernel(MicroKernel<T> micro, MicroKernel<T> micro_pair,
                  const MicroKernel<T>* micro_rows, const MicroKernel<T>* micro_pair_rows,
                  int64_t kc,
                  const T* packed_a, const T* packed_b, OutputMatrix<T> c, const T* bias,
                  bool accumulate);

}  // namespace eml::gemm::blocked
