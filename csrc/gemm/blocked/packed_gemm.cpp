#include "packed_gemm.h"

#include <algorithm>

#include "../int_math.h"
#include "block_sizes.h"
#include "macro_kernel.h"
#include "packing.h"
#include "tuning.h"
#include "workspace.h"

namespace eml::gemm::blocked {
namespace {

// The block of `extent` the loops use: as many blocks as `limit` needs, of equal size (a
// multiple of `unit` where possible), so that no thin last block runs the kernels on a
// few rows or steps (k = 1024 with KC = 320: 4 blocks of 256, not 320, 320, 320 and 64).
int64_t balanced_block(int64_t extent, int64_t limit, int64_t unit) {
  const int64_t even = ceil_div(extent, ceil_div(extent, limit));
  return std::min(limit, round_up(even, unit));
}

}  // namespace

template <typename S>
void packed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums) {
  using T = Acc<S>;
  const CacheBlocks& limits = tuning().blocks<T>();
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const CacheBlocks blocks{balanced_block(m, limits.mc, BlockSizes<T>::mr),
                           balanced_block(k, limits.kc, 1),
                           balanced_block(n, limits.nc, BlockSizes<T>::nr)};
  if (row_sums != nullptr) std::fill(row_sums, row_sums + m, T(0));
  // Buffers for the largest blocks this problem uses; bounded by MC, KC, NC.
  const int64_t max_kc = std::min(k, blocks.kc);
  T* packed_a = packed_a_buffer<T>(packed_a_size<T>(std::min(m, blocks.mc), max_kc));
  T* packed_b = packed_b_buffer<T>(packed_b_size<T>(max_kc, std::min(n, blocks.nc)));

  for (int64_t jc = 0; jc < n; jc += blocks.nc) {
    const int64_t nc = std::min(blocks.nc, n - jc);
    for (int64_t pc = 0; pc < k; pc += blocks.kc) {
      const int64_t kc = std::min(blocks.kc, k - pc);
      pack_b<S>({b.data + pc * b.row_stride + jc * b.col_stride, kc, nc, b.row_stride,
                 b.col_stride},
                packed_b, kernels.pack_b_rows, kernels.pack_b_steps);
      const bool first_kc = pc == 0;
      for (int64_t ic = 0; ic < m; ic += blocks.mc) {
        const int64_t mc = std::min(blocks.mc, m - ic);
        // Each element of A is packed once per column block: sum it in the first only.
        T* block_row_sums = (row_sums != nullptr && jc == 0) ? row_sums + ic : nullptr;
        pack_a<S>({a.data + ic * a.row_stride + pc * a.col_stride, mc, kc, a.row_stride,
                   a.col_stride},
                  packed_a, block_row_sums, kernels.pack_a_rows, kernels.pack_a_steps);
        macro_kernel<T>(kernels.micro, kernels.micro_pair, kernels.micro_rows, kc, packed_a,
                        packed_b, {c.data + ic * c.ld + jc, mc, nc, c.ld},
                        first_kc && bias != nullptr ? bias + jc : nullptr, !first_kc);
      }
    }
  }
}

#define EML_INSTANTIATE_PACKED(S)                                                          \
  template void packed_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>,    \
                               OutputMatrix<Acc<S>>, const Acc<S>*, Acc<S>*);
EML_INSTANTIATE_PACKED(float)
EML_INSTANTIATE_PACKED(double)
EML_INSTANTIATE_PACKED(bfloat16_t)
EML_INSTANTIATE_PACKED(float16_t)
#undef EML_INSTANTIATE_PACKED

}  // namespace eml::gemm::blocked
