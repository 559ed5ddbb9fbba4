// The packed path: the three cache-blocking loops (NC, KC, MC) around the macro-kernel.
#pragma once

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// Where C's rows are a multiple of tuning().aliasing_row_bytes apart (they would share one
// or two L1 sets, and a tile's rows and the packed panels evict each other) and k spans more
// than one KC block, packed_gemm computes each column block of C in a buffer of another row
// stride and copies it into C. The m x cols buffer must fit this thread's L3 share: where the
// column block does not, it is narrowed, down to kMinStagedBlockBytes per row.
struct StagedC {
  int64_t cols = 0;  // the column block; 0: C is computed in place
  int64_t ld = 0;    // the buffer's row stride
};
// Narrower blocks repack A more often than the staging saves (Zen 3, float: 1024 columns
// gain, 512 break even).
inline constexpr int64_t kMinStagedBlockBytes = 4096;
// T: float or double.
template <typename T>
StagedC staged_c(int64_t m, int64_t n, int64_t k, int64_t ldc);

// One row block of A (m at most MC, its block within a quarter of L2) would pack all of B
// into one block from the L3 share (NC) for the macro-kernel to read back from there, which
// no second row block reuses; over more than one block of depth it would also revisit all of C
// once per block. There the column block is narrowed to keep C's block and B's packed block in
// half of L2 (tuning().column_block_l2_bytes), each B block read by the kernels right after
// its pack; A is then packed once for all of k, so that the narrower blocks do not pack it
// again, and C is computed in place (not staged). It pays in one block of depth too (Xeon,
// forwards of 48 to 256 rows x 256 to 384 deep x 1024 to 4096 wide, one thread: 0.77x-0.98x
// -> 0.96x-1.05x of F.linear; two threads 0.91x-1.12x -> 0.96x-1.16x). The columns of that
// block (a multiple of 2 NR, less than n), or 0 where NC applies: more rows, the rule off (0
// bytes), or A's packed copy beyond the L3 share or kPackedAOnceBudgets. T: float or double.
template <typename T>
int64_t l2_column_block(int64_t m, int64_t n, int64_t k);
// The most bytes of A packed for all of k, in column_block_l2_bytes (4 L2s: 256 rows of up to
// 8192 floats).
inline constexpr int64_t kPackedAOnceBudgets = 8;

// A row stride for `cols` values of T whose rows do not alias: whole micro-tiles (NR values,
// one cache line) per row, and a line more if those alias too.
template <typename T>
int64_t unaliased_ld(int64_t cols);

// B packed ahead of the product (prepack_b, blocked_gemm.h), seen from column first_col (a
// multiple of NR) on. The block of kc_here steps from step pc holds the panels of all
// padded_cols columns, NR columns of kc_here steps each.
template <typename T>
struct PackedPanels {
  const T* data;
  int64_t padded_cols;
  int64_t kc;  // the depth of every block of steps but the last
  int64_t first_col;

  // The first panel of column jc (a multiple of NR) in the block of steps from pc.
  const T* block(int64_t pc, int64_t jc, int64_t kc_here) const {
    return data + pc * padded_cols + (first_col + jc) * kc_here;
  }
};

// C = A·B (+ bias) on the calling thread. If row_sums is set it receives A's row
// sums, accumulated while packing A for the first NC column block only. 16-bit S:
// A and B are widened while packed; C, bias and row sums are float (Acc<S>). With
// `prepacked` B is not packed but read from there (b then gives only its sizes). stream_c:
// Epilogue::stream_c (streams_c below decides).
template <typename S>
void packed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias, Acc<S>* row_sums,
                 const PackedPanels<Acc<S>>* prepacked = nullptr, bool stream_c = false);

// Whether packed_gemm writes a C that asks for it (Epilogue::stream_c) past the caches, its
// whole pair blocks (RegisterKernels::pair_block_stream): one written in one block of depth
// (kc >= k), its rows 64-byte aligned, of more than tuning().stream_c_bytes (the L2: a
// smaller C, written again soon, is still there). Each line is then written without being
// read first (Xeon, dL/dW of a batch of 64 to 256, 3 to 16 MiB: 1.02x-1.16x).
template <typename T>
bool streams_c(OutputMatrix<T> c, int64_t k, int64_t kc);
// A streamed store's alignment: one cache line, written whole.
inline constexpr int64_t kStreamAlignment = 64;

// The depth of the blocks of steps that the packed path uses for k steps of T.
template <typename T>
int64_t packed_depth(int64_t k);

}  // namespace eml::gemm::blocked
