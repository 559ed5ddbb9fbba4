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
// panels whose rows are contiguous along k, pack_steps (nullable) full panels whose
// steps are contiguous. 16-bit elements are widened to float (Acc<S>) on the way.
template <typename S>
void pack_a(ConstMatrixView<S> a, Acc<S>* packed, Acc<S>* row_sums, PackRowsKernel<S> pack_rows,
            PackStepsKernel<S> pack_steps);

// b: a kc x nc block of B. Writes ceil(nc/NR) panels of kc x NR values.
template <typename S>
void pack_b(ConstMatrixView<S> b, Acc<S>* packed, PackRowsKernel<S> pack_rows,
            PackStepsKernel<S> pack_steps);

// Elements the packed buffers need for an mc x kc block of A / a kc x nc block of B.
template <typename T>
int64_t packed_a_size(int64_t mc, int64_t kc);
template <typename T>
int64_t packed_b_size(int64_t kc, int64_t nc);

}  // namespace eml::gemm::blocked
