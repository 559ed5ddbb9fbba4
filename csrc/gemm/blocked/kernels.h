// The ISA-specific compute kernels, as tables of function pointers: the loops
// around them (blocking, packing, threading) are ISA-neutral and pick a table by
// active_isa() once per call.
#pragma once

#include <cstdint>

#include "../isa.h"  // EML_GEMM_X86
#include "block_sizes.h"

namespace eml::gemm::blocked {

// Packed path. C[0:MR, 0:NR] (row stride ldc) = sum_p A_panel[p] * B_panel[p], where
// packed_a holds kc steps of MR values and packed_b kc steps of NR values.
// accumulate: C += result. Otherwise C = result (+ bias[0:NR] when bias is set).
template <typename T>
using MicroKernel = void (*)(int64_t kc, const T* packed_a, const T* packed_b, T* c,
                             int64_t ldc, const T* bias, bool accumulate);

// Packing-free path for A and B both contiguous along k (Y = X·W^T):
// C[r, j] (+)= sum_p a[r*lda + p] * b[j*ldb + p] for a fixed tile of rows r and
// columns j (one function per tile shape); bias and accumulate as above.
template <typename T>
using DotTile = void (*)(int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                         int64_t ldc, const T* bias, bool accumulate);

// Packing-free path for B contiguous along n (G·W): C[r, 0:cols] (+)= sum_p
// A(r, p) * b[p*ldb + 0:cols] for a fixed number of rows r (one function per row
// count), A read through its strides, cols <= the kernel's width.
template <typename T>
using BroadcastTile = void (*)(int64_t k, const T* a, int64_t a_row_stride,
                               int64_t a_col_stride, const T* b, int64_t ldb, T* c, int64_t ldc,
                               int64_t cols, const T* bias, bool accumulate);

// Packing-free path for very few rows and a large B contiguous along n: streams
// each row of B once. C[r, 0:cols] += sum_p A(r, p) * b[p*ldb + 0:cols] for a fixed
// number of rows r (one function per count), all k steps, any cols; C must hold its
// initial value (bias or zeros) and stays in L1 (the caller keeps cols small).
template <typename T>
using StreamTile = void (*)(int64_t k, const T* a, int64_t a_row_stride, int64_t a_col_stride,
                            const T* b, int64_t ldb, T* c, int64_t ldc, int64_t cols);

// Packs one full micro-panel whose W source rows are each contiguous along k (the
// transposing case, e.g. B = W^T): panel[p*W + w] = src[w*ld + p] for p < depth.
// W is MR for A panels and NR for B panels.
template <typename T>
using PackRowsKernel = void (*)(const T* src, int64_t ld, int64_t depth, T* panel);

// Tile shapes of the packing-free paths, the same for every ISA.
inline constexpr int kDotRows = 3;     // dot tiles are up to 3 rows x 4 columns
inline constexpr int kDotCols = 4;
inline constexpr int kBroadcastRows = 6;
inline constexpr int kStreamRows = 4;
template <typename T>
inline constexpr int64_t kBroadcastCols = BlockSizes<T>::nr;

template <typename T>
struct Kernels {
  MicroKernel<T> micro;
  DotTile<T> dot[kDotRows][kDotCols];      // [rows - 1][cols - 1]
  BroadcastTile<T> broadcast[kBroadcastRows];  // [rows - 1]
  StreamTile<T> stream[kStreamRows];             // [rows - 1]
  PackRowsKernel<T> pack_a_rows = nullptr;       // null: packing.cpp's portable loop
  PackRowsKernel<T> pack_b_rows = nullptr;
};

// The tables, built once (kernels.cpp) from the pieces below.
template <typename T>
const Kernels<T>& generic_kernels();
#if EML_GEMM_X86
// Call only when the CPU has AVX2 and FMA.
template <typename T>
const Kernels<T>& avx2_kernels();
#endif

// The pieces, one ISA per file: microkernel_{generic,avx2}.cpp, direct_{generic,avx2}.cpp,
// packing_avx2.cpp.
template <typename T>
MicroKernel<T> generic_micro_kernel();
template <typename T>
void set_generic_direct_tiles(Kernels<T>& kernels);
#if EML_GEMM_X86
template <typename T>
MicroKernel<T> avx2_micro_kernel();
template <typename T>
void set_avx2_direct_tiles(Kernels<T>& kernels);
template <typename T>
void set_avx2_packing(Kernels<T>& kernels);
#endif

}  // namespace eml::gemm::blocked
