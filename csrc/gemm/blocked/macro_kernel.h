// The two loops around the micro-kernel: one packed MC x KC block of A times one
// packed KC x NC panel of B into C, with edge tiles computed into a scratch tile.
#pragma once

#include <cstdint>

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// c: the mc x nc block of C. First KC block (accumulate = false): C = A·B (+ bias,
// bias[0:nc], when set). Later blocks: C += A·B. `kernels`: the active ISA's register
// kernels (Kernels::registers). stream_c (first block only): whole pair blocks are written
// past the caches (RegisterKernels::pair_block_stream), C's rows 64-byte aligned.
template <typename T>
void macro_kernel(const RegisterKernels<T>& kernels, int64_t kc, const T* packed_a,
                  const T* packed_b, OutputMatrix<T> c, const T* bias, bool accumulate,
                  bool stream_c = false);

}  // namespace eml::gemm::blocked
