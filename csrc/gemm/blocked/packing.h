// Packing: copies a block of A (or B) into the contiguous micro-panel order the
// micro-kernel streams through, reading the strided view directly (transposed,
// sliced and expanded views cost nothing extra) and zero-padding the edges.
#pragma once

#include <cstdint>

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// a: an mc x kc block of A. Writes ceil(mc/MR) panels of kc x MR values (panel i
// holds rows i*MR.., step p at [p*MR, p*MR + MR)). If row_sums is set, adds each
// row's sum over the block to row_sums[0:mc]. pack_rows (nullable) packs full
// panels whose rows are contiguous along k.
template <typename T>
void pack_a(ConstMatrixView<T> a, T* packed, T* row_sums, PackRowsKernel<T> pack_rows);

// b: a kc x nc block of B. Writes ceil(nc/NR) panels of kc x NR values.
template <typename T>
void pack_b(ConstMatrixView<T> b, T* packed, PackRowsKernel<T> pack_rows);

// Elements the packed buffers need for an mc x kc block of A / a kc x nc block of B.
template <typename T>
int64_t packed_a_size(int64_t mc, int64_t kc);
template <typename T>
int64_t packed_b_size(int64_t kc, int64_t nc);

}  // namespace eml::gemm::blocked
