#include "packed_gemm.h"

#include <algorithm>
#include <cstring>

#if EML_GEMM_X86
#include <immintrin.h>
#endif

#include "../int_math.h"
#include "block_sizes.h"
#include "macro_kernel.h"
#include "packing.h"
#include "tuning.h"
#include "workspace.h"

namespace eml::gemm::blocked {
namespace {

// Orders this thread's streamed stores of C before its later stores (x86's sfence; no other
// ISA has streamed kernels).
void store_fence() {
#if EML_GEMM_X86
  _mm_sfence();
#endif
}

// The block of `extent` the loops use: as many blocks as `limit` needs, of equal size (a
// multiple of `unit` where possible), so that no thin last block runs the kernels on a
// few rows or steps (k = 1024 with KC = 320: 4 blocks of 256, not 320, 320, 320 and 64).
int64_t balanced_block(int64_t extent, int64_t limit, int64_t unit) {
  const int64_t even = ceil_div(extent, ceil_div(extent, limit));
  return std::min(limit, round_up(even, unit));
}

// The rows of A's block for `depth` steps: MC, or fewer for a block deeper than KC (a k done
// in one pass, block_model.h), so that the block keeps the bytes the model gave it in L2.
template <typename T>
int64_t row_block(const CacheBlocks& limits, int64_t depth) {
  constexpr int64_t mr = BlockSizes<T>::mr;
  if (depth <= limits.kc) return limits.mc;
  return std::max(mr, limits.mc * limits.kc / depth / mr * mr);
}

// Whether rows `ld` values of T apart share L1 sets (a multiple of aliasing_row_bytes).
template <typename T>
bool rows_alias(int64_t ld) {
  return (ld * static_cast<int64_t>(sizeof(T))) % tuning().aliasing_row_bytes == 0;
}

}  // namespace

template <typename T>
StagedC staged_c(int64_t m, int64_t n, int64_t k, int64_t ldc) {
  const Tuning& limits = tuning();
  const CacheBlocks& blocks = limits.blocks<T>();
  constexpr int64_t nr = BlockSizes<T>::nr;
  const auto bytes = static_cast<int64_t>(sizeof(T));
  // C is visited once per block of depth: the copy pays off from the second on.
  if (!rows_alias<T>(ldc) || packed_depth<T>(k) >= k) return {};
  // The widest multiple of NR whose m rows fit the L3 share with a line of padding.
  const int64_t fitting_cols = (limits.l3_share_bytes / (m * bytes) - nr) / nr * nr;
  if (fitting_cols < nr) return {};
  const int64_t cols = balanced_block(n, std::min(blocks.nc, fitting_cols), nr);
  if (cols < n && cols * bytes < kMinStagedBlockBytes) return {};
  return {cols, unaliased_ld<T>(cols)};
}

template <typename T>
int64_t l2_column_block(int64_t m, int64_t n, int64_t k) {
  const Tuning& limits = tuning();
  constexpr int64_t nr = BlockSizes<T>::nr;
  const auto bytes = static_cast<int64_t>(sizeof(T));
  const int64_t kc = packed_depth<T>(k);
  if (limits.column_block_l2_bytes == 0 || m > row_block<T>(limits.blocks<T>(), kc)) {
    return 0;
  }
  // A's block stays in L2 beside C's and B's, in at most half their bytes: each column block
  // reads it again (1024 rows of 256 steps, a block of 1 MiB, ran 1024^3 on two threads 4-7%
  // slower). A packed for all of k stays in L3, and within kPackedAOnceBudgets budgets (the
  // thread's workspace keeps it).
  const int64_t a_block_bytes = m * kc * bytes;
  const int64_t a_once_bytes =
      std::min(limits.l3_share_bytes, kPackedAOnceBudgets * limits.column_block_l2_bytes);
  if (2 * a_block_bytes > limits.column_block_l2_bytes || m * k * bytes > a_once_bytes) {
    return 0;
  }
  // Each column holds m values of C and kc of B; whole pairs of tiles (AVX-512's kernel runs
  // two at once, and an odd one per block ran 1024^3 7% slower).
  const int64_t cols = limits.column_block_l2_bytes / ((m + kc) * bytes) / (2 * nr) * (2 * nr);
  return cols > 0 && cols < n ? cols : 0;
}

template <typename T>
bool streams_c(OutputMatrix<T> c, int64_t k, int64_t kc) {
  constexpr auto bytes = static_cast<int64_t>(sizeof(T));
  const int64_t stream_bytes = tuning().stream_c_bytes;
  return stream_bytes > 0 && kc >= k && c.rows * c.cols * bytes > stream_bytes &&
         reinterpret_cast<uintptr_t>(c.data) % kStreamAlignment == 0 &&
         (c.ld * bytes) % kStreamAlignment == 0;
}

template <typename T>
int64_t unaliased_ld(int64_t cols) {
  constexpr int64_t nr = BlockSizes<T>::nr;
  const int64_t ld = round_up(cols, nr);
  return rows_alias<T>(ld) ? ld + nr : ld;
}

template <typename T>
int64_t packed_depth(int64_t k) {
  const CacheBlocks& limits = tuning().blocks<T>();
  if (k == 0) return 1;
  if (k <= limits.one_pass_kc) return k;
  return balanced_block(k, limits.kc, 1);
}

template <typename S>
void packed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums,
                 const PackedPanels<Acc<S>>* prepacked, bool stream_c) {
  using T = Acc<S>;
  const CacheBlocks& limits = tuning().blocks<T>();
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  // Column blocks that keep C and B's packed block in L2 (one row block; for a prepacked B,
  // which nothing packs here, only at the model's depth over several blocks of it), else where
  // C's rows alias, each column block is computed in a buffer and copied into C.
  const int64_t depth = packed_depth<T>(k);
  const bool column_blocks = prepacked == nullptr || (prepacked->kc == depth && depth < k);
  const int64_t l2_cols = column_blocks ? l2_column_block<T>(m, n, k) : 0;
  const StagedC staging = l2_cols != 0 ? StagedC{} : staged_c<T>(m, n, k, c.ld);
  const bool staged = staging.cols != 0;
  constexpr int64_t mr = BlockSizes<T>::mr, nr = BlockSizes<T>::nr;
  CacheBlocks blocks = limits;
  blocks.kc = prepacked != nullptr ? prepacked->kc : depth;
  blocks.mc = balanced_block(m, row_block<T>(limits, blocks.kc), mr);
  blocks.nc = staged      ? staging.cols
              : l2_cols != 0 ? balanced_block(n, l2_cols, 2 * nr)
                             : balanced_block(n, limits.nc, nr);
  if (row_sums != nullptr) std::fill(row_sums, row_sums + m, T(0));
  // Buffers for the largest blocks this problem uses; bounded by MC, KC, NC. Narrowed column
  // blocks keep A packed for all of k: block pc of it at packed_a + pc * (m rounded to MR).
  const int64_t max_kc = std::min(k, blocks.kc);
  const bool a_packed_once = l2_cols != 0;
  T* packed_a = packed_a_buffer<T>(
      packed_a_size<T>(std::min(m, blocks.mc), a_packed_once ? k : max_kc));
  T* packed_b = prepacked != nullptr
                    ? nullptr
                    : packed_b_buffer<T>(packed_b_size<T>(max_kc, std::min(n, blocks.nc)));

  T* staged_c_data = staged ? staged_c_buffer<T>(m * staging.ld) : nullptr;
  // Not into the staging buffer, which is copied right away.
  const bool streamed = stream_c && !staged && streams_c(c, k, blocks.kc);
  for (int64_t jc = 0; jc < n; jc += blocks.nc) {
    const int64_t nc = std::min(blocks.nc, n - jc);
    const OutputMatrix<T> c_block = staged ? OutputMatrix<T>{staged_c_data, m, nc, staging.ld}
                                           : OutputMatrix<T>{c.data + jc, m, nc, c.ld};
    for (int64_t pc = 0; pc < k; pc += blocks.kc) {
      const int64_t kc = std::min(blocks.kc, k - pc);
      const T* b_panels = packed_b;
      if (prepacked != nullptr) {
        b_panels = prepacked->block(pc, jc, kc);
      } else {
        pack_b<S>({b.data + pc * b.row_stride + jc * b.col_stride, kc, nc, b.row_stride,
                   b.col_stride},
                  packed_b, kernels.pack_b_rows, kernels.pack_b_steps);
      }
      const bool first_kc = pc == 0;
      for (int64_t ic = 0; ic < m; ic += blocks.mc) {
        const int64_t mc = std::min(blocks.mc, m - ic);
        T* a_block = a_packed_once ? packed_a + pc * packed_a_size<T>(mc, 1) : packed_a;
        if (!a_packed_once || jc == 0) {
          // Each element of A is packed once per column block: sum it in the first only.
          T* block_row_sums = (row_sums != nullptr && jc == 0) ? row_sums + ic : nullptr;
          pack_a<S>({a.data + ic * a.row_stride + pc * a.col_stride, mc, kc, a.row_stride,
                     a.col_stride},
                    a_block, block_row_sums, kernels.pack_a_rows, kernels.pack_a_steps);
        }
        macro_kernel<T>(kernels.registers, kc, a_block,
                        b_panels, {c_block.data + ic * c_block.ld, mc, nc, c_block.ld},
                        first_kc && bias != nullptr ? bias + jc : nullptr, !first_kc, streamed);
      }
    }
    if (staged) {
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(c.data + i * c.ld + jc, c_block.data + i * c_block.ld, nc * sizeof(T));
      }
    }
  }
  // Streamed stores are weakly ordered: done before the caller reads C or signals it done.
  if (streamed) store_fence();
}

template StagedC staged_c<float>(int64_t, int64_t, int64_t, int64_t);
template StagedC staged_c<double>(int64_t, int64_t, int64_t, int64_t);
template int64_t l2_column_block<float>(int64_t, int64_t, int64_t);
template int64_t l2_column_block<double>(int64_t, int64_t, int64_t);
template bool streams_c<float>(OutputMatrix<float>, int64_t, int64_t);
template bool streams_c<double>(OutputMatrix<double>, int64_t, int64_t);
template int64_t unaliased_ld<float>(int64_t);
template int64_t unaliased_ld<double>(int64_t);
template int64_t packed_depth<float>(int64_t);
template int64_t packed_depth<double>(int64_t);

#define EML_INSTANTIATE_PACKED(S)                                                          \
  template void packed_gemm<S>(const Kernels<S>&, ConstMatrixView<S>, ConstMatrixView<S>,    \
                               OutputMatrix<Acc<S>>, const Acc<S>*, Acc<S>*,          \
                               const PackedPanels<Acc<S>>*, bool);
EML_INSTANTIATE_PACKED(float)
EML_INSTANTIATE_PACKED(double)
EML_INSTANTIATE_PACKED(bfloat16_t)
EML_INSTANTIATE_PACKED(float16_t)
#undef EML_INSTANTIATE_PACKED

}  // namespace eml::gemm::blocked
