// The ISA-specific compute kernels, as tables of function pointers: the loops
// around them (blocking, packing, threading) are ISA-neutral and pick a table by
// active_isa() once per call.
#pragma once

#include <cstdint>

#include "../half.h"
#include "../isa.h"  // EML_GEMM_X86
#include "block_sizes.h"

namespace eml::gemm::blocked {

// The element types: float and double, and the 16-bit bfloat16_t and float16_t
// (half.h), whose products accumulate in float (Acc<S> = accumulator_t<S>). The
// packed path widens 16-bit operands while packing, so its micro-kernel and panels
// are float; the packing-free paths read 16-bit operands in place and widen them in
// registers. C, bias and row sums of every kernel are accumulator-typed: the 16-bit
// GEMM rounds them to S once, at the end (blocked_gemm.cpp).
template <typename S>
using Acc = accumulator_t<S>;

// Packed path. C[0:MR, 0:NR] (row stride ldc) = sum_p A_panel[p] * B_panel[p], where
// packed_a holds kc steps of MR values and packed_b kc steps of NR values.
// accumulate: C += result. Otherwise C = result (+ bias[0:NR] when bias is set).
template <typename T>
using MicroKernel = void (*)(int64_t kc, const T* packed_a, const T* packed_b, T* c,
                             int64_t ldc, const T* bias, bool accumulate);

// Packing-free path for A and B both contiguous along k (Y = X·W^T):
// C[r, j] (+)= sum_p a[r*lda + p] * b[j*ldb + p] for a fixed tile of rows r and
// columns j (one function per tile shape); bias and accumulate as above. B's elements
// may be of another type SB than A's (compressed weights, weight_kernels.h), widened
// to Acc<S> in registers as the 16-bit types are.
template <typename S, typename SB = S>
using DotTile = void (*)(int64_t k, const S* a, int64_t lda, const SB* b, int64_t ldb, Acc<S>* c,
                         int64_t ldc, const Acc<S>* bias, bool accumulate);

// Packing-free path for B contiguous along n (G·W): C[r, 0:cols] (+)= sum_p
// A(r, p) * b[p*ldb + 0:cols] for a fixed number of rows r (one function per row
// count), A read through its strides, cols <= the kernel's width.
template <typename S>
using BroadcastTile = void (*)(int64_t k, const S* a, int64_t a_row_stride,
                               int64_t a_col_stride, const S* b, int64_t ldb, Acc<S>* c,
                               int64_t ldc, int64_t cols, const Acc<S>* bias, bool accumulate);

// The strip path's first row tile (strip_gemm, direct_gemm.cpp): a BroadcastTile of
// kStripTileRows whole rows and kStripTileCols<S> columns that also copies each step's values
// of B into strip[p * kStripTileCols<S> + 0:kStripTileCols<S>] for the later row tiles, and
// asks for the step kStripPrefetchSteps ahead of each (B's rows, read in place, are too far
// apart for the hardware prefetcher).
template <typename S>
using StripPackTile = void (*)(int64_t k, const S* a, int64_t a_row_stride, int64_t a_col_stride,
                               const S* b, int64_t ldb, Acc<S>* c, int64_t ldc,
                               const Acc<S>* bias, bool accumulate, S* strip);

// Packing-free tiles for at most kInterleavedRows rows of A and a B contiguous along k (Y =
// X·W^T at a small batch), on AVX-512: C[i, j] = sum_p A(i, p) * b[j*ldb + p] (+ bias[j])
// for the M rows of A and a tile of R columns j (one function per shape), over all k steps.
// A comes interleaved (interleaved_gemm, direct_gemm.cpp): for each step of
// kInterleavedLanes<S> values of k, the M rows' values of that step one after another,
// zeros past k.
template <typename S>
using InterleavedTile = void (*)(int64_t k, const S* a_steps, const S* b, int64_t ldb, S* c,
                                 int64_t ldc, const S* bias);

// Packing-free path for very few rows and a large B contiguous along n: streams
// each row of B once. C[r, 0:cols] += sum_p A(r, p) * b[p*ldb + 0:cols] for a fixed
// number of rows r (one function per count), all k steps, any cols; C must hold its
// initial value (bias or zeros) and stays in L1 (the caller keeps cols small).
template <typename S>
using StreamTile = void (*)(int64_t k, const S* a, int64_t a_row_stride, int64_t a_col_stride,
                            const S* b, int64_t ldb, Acc<S>* c, int64_t ldc, int64_t cols);

// Packs one full micro-panel whose W source rows are each contiguous along k (the
// transposing case, e.g. B = W^T): panel[p*W + w] = src[w*ld + p] for p < depth.
// W is MR for A panels and NR for B panels.
template <typename S>
using PackRowsKernel = void (*)(const S* src, int64_t ld, int64_t depth, Acc<S>* panel);

// Packs one full micro-panel whose steps are each W contiguous values (e.g. B = W in
// dL/dX): panel[p*W + w] = widen(src[p*ld + w]). Only for 16-bit S (float copies).
template <typename S>
using PackStepsKernel = void (*)(const S* src, int64_t ld, int64_t depth, Acc<S>* panel);

// dst[0:count] = narrow(src[0:count]) (round-to-nearest-even), and the reverse
// widening: the 16-bit types' conversions of whole rows.
template <typename S>
using NarrowKernel = void (*)(const Acc<S>* src, int64_t count, S* dst);
template <typename S>
using WidenKernel = void (*)(const S* src, int64_t count, Acc<S>* dst);

// Tile shapes of the packing-free paths, the same for every ISA.
inline constexpr int kDotRows = 3;     // dot tiles are up to 3 rows x 4 columns
inline constexpr int kDotCols = 4;
inline constexpr int kBroadcastRows = 6;
inline constexpr int kStreamRows = 4;
template <typename S>
inline constexpr int64_t kBroadcastCols = BlockSizes<Acc<S>>::nr;
// Half-width broadcast tiles (one AVX2 vector of columns; float and double only), for the
// transposed path's C^T of 8 rows of X (4 of double). 8 rows keep 8 FMA chains in flight and
// read 8 rows of W in place: W's rows a power of two apart share one set of an 8-way L1, and
// 12 rows ran at half the speed there (Zen 4, 8 x 4096 x 1024: 35 against 75 GFLOP/s); where
// they are a multiple of an L1 way apart, the transposed path takes Tuning::aliased_tile_rows
// (6 on an 8-way L1; direct_gemm.cpp).
inline constexpr int kHalfBroadcastRows = 8;
template <typename S>
inline constexpr int64_t kHalfBroadcastCols = kBroadcastCols<S> / 2;
// The few-rows broadcast tiles (AVX-512, float and double; Tuning::few_rows_tiles): up to 12
// rows x 2 vectors of columns, the packed pair kernel's 24 accumulators, for a B read in
// place from memory (dL/dX = G·W of up to 64 rows; path.cpp). Each step reads 128 bytes of a
// row of B: the 6 x 1-vector tiles, 64 bytes of a row per step and a B re-read per 6 rows of
// A, ran dL/dX of 8 to 32 rows at 0.42x-0.7x of MKL on a Xeon.
inline constexpr int kFewRowsTileRows = 12;
template <typename S>
inline constexpr int64_t kFewRowsTileCols = 2 * BlockSizes<Acc<S>>::nr;
// The strip tiles (AVX-512, float and double; Tuning::strip_max_cols): up to 8 rows x 3
// vectors of columns, 24 accumulators, for G·W of 33 to 256 rows and a narrow W (path.cpp).
// Each step loads 3 vectors of B for 8 broadcasts of A: 11 loads per 24 FMAs, where the
// few-rows tiles' 12 x 2 vectors load 14.
inline constexpr int kStripTileRows = 8;
template <typename S>
inline constexpr int64_t kStripTileCols = 3 * (64 / static_cast<int64_t>(sizeof(Acc<S>)));
inline constexpr int64_t kStripPrefetchSteps = 16;  // how far ahead strip_pack asks for B
// The interleaved tiles (InterleavedTile): up to 8 rows of A (M) x 4 columns of C (R), M x R
// accumulators of one AVX-512 vector each, and A's steps one 64-byte line per row.
inline constexpr int kInterleavedRows = 8;
inline constexpr int kInterleavedCols = 4;
// interleaved_gemm runs up to this many rows of A, in groups which read each tile's R rows of
// B in turn (the later groups from cache): up to kInterleavedRows rows in one group (the
// 8-row tile's 32 accumulators and 4 vectors of B leave some on the stack, but B streamed
// from memory once beats two groups of 4: Xeon, 8 x 1024 x 4096, 1.1x-1.25x), more in groups
// of at most kInterleavedGroupRows, whose 24 accumulators and 4 vectors of B stay in
// registers (Xeon, forward, against groups of 8: 16 x 512 x 1024 1.15x, 24 x 256 x 1024
// 1.16x, 32 x 512 x 512 1.11x-1.16x, 32 x 1024 x 4096 1.05x-1.08x; double even). Zen 4, whose
// split FMAs leave time for the spills, ties: 16 to 128 rows 0.98x-1.05x on 1 thread.
inline constexpr int kInterleavedMaxRows = 16 * kInterleavedRows;
inline constexpr int kInterleavedGroupRows = 6;
template <typename S>
inline constexpr int64_t kInterleavedLanes = 64 / sizeof(S);

// The packed path's register kernels (microkernel_*.cpp), as the macro-kernel takes them.
// [rows - 1] entries: the first rows of a whole-width tile, straight into C (the last row
// tile when MR does not divide the rows); null: through a scratch tile.
template <typename T>
struct RegisterKernels {
  static constexpr int64_t kMr = BlockSizes<T>::mr;
  MicroKernel<T> tile = nullptr;  // one MR x NR tile
  MicroKernel<T> tile_rows[kMr - 1] = {};  // rows 1 to MR - 1
  // Two adjacent MR x NR tiles at once (C[0:MR, 0:2*NR], the second tile's B panel kc*NR
  // values after the first's), where an ISA's wider registers gain from it; null: none.
  MicroKernel<T> pair = nullptr;
  MicroKernel<T> pair_rows[kMr - 1] = {};  // rows 1 to MR - 1
  // Two row tiles of a pair at once (C[0:2*MR, 0:2*NR], the second tile's A panel kc*MR
  // values after the first's), for the whole row tiles below the *_next ones; null: none.
  MicroKernel<T> pair_block = nullptr;
  // pair_block without its fetch of C at the start: for shallow blocks, written rows outer,
  // whose calls only write C (macro_kernel.cpp); null: none.
  MicroKernel<T> pair_block_store = nullptr;
  // pair_block_store writing C past the caches (64-byte aligned rows), for a C that is written
  // once and read again only later (Epilogue::stream_c); null: none.
  MicroKernel<T> pair_block_stream = nullptr;
  // Rows 1 to MR of a tile or a pair, each step also prefetching its panels of B ahead and the
  // next column step's panels into L2 (for a B streamed from memory); null: none.
  MicroKernel<T> tile_next[kMr] = {};
  MicroKernel<T> pair_next[kMr] = {};
};

template <typename S>
struct Kernels {
  RegisterKernels<Acc<S>> registers;
  DotTile<S> dot[kDotRows][kDotCols];      // [rows - 1][cols - 1]
  BroadcastTile<S> broadcast[kBroadcastRows];  // [rows - 1]
  BroadcastTile<S> half_broadcast[kHalfBroadcastRows] = {};  // [rows - 1]; null: 16-bit S
  // [rows - 1]; null: none (float and double with AVX-512 only)
  BroadcastTile<S> few_rows_broadcast[kFewRowsTileRows] = {};
  // The same tiles, each step also prefetching the next strip of B into L1 (the columns right
  // of the tile's, which a B read in place walked rows outer needs next; direct_gemm.cpp);
  // null: none (the portable tiles, and the few-rows tiles where they are null).
  BroadcastTile<S> broadcast_next[kBroadcastRows] = {};
  BroadcastTile<S> few_rows_broadcast_next[kFewRowsTileRows] = {};
  // [rows - 1]; null: none (float and double with AVX-512 only)
  BroadcastTile<S> strip[kStripTileRows] = {};
  StripPackTile<S> strip_pack = nullptr;  // the first row tile, whole; null with strip
  StreamTile<S> stream[kStreamRows];             // [rows - 1]
  // [cols - 1][rows - 1]; null: none (float and double with AVX-512 only)
  InterleavedTile<S> interleaved[kInterleavedCols][kInterleavedRows] = {};
  PackRowsKernel<S> pack_a_rows = nullptr;       // null: packing.cpp's portable loop
  PackRowsKernel<S> pack_b_rows = nullptr;
  PackStepsKernel<S> pack_a_steps = nullptr;     // null: portable loop (or memcpy)
  PackStepsKernel<S> pack_b_steps = nullptr;
  NarrowKernel<S> narrow = nullptr;              // 16-bit S only
  WidenKernel<S> widen = nullptr;                // 16-bit S only
};

// The tables, built once (kernels.cpp) from the pieces below.
template <typename S>
const Kernels<S>& generic_kernels();
#if EML_GEMM_X86
// Call only when the CPU has AVX2 and FMA. For float16_t without F16C (cpu_has_f16c()),
// the float16 conversions fall back to the portable pieces.
template <typename S>
const Kernels<S>& avx2_kernels();
// Call only when the CPU has AVX-512F: avx2_kernels() plus the AVX-512 tile-pair kernels
// (whole and edge rows, with and without the next panels' prefetch) and, for float and
// double, the AVX-512 dot tiles of 2 and 3 rows and the interleaved tiles (for float also the
// transposing pack of B).
template <typename S>
const Kernels<S>& avx512_kernels();
#endif

// The table for active_isa().
template <typename S>
const Kernels<S>& active_kernels();

// The pieces, one ISA per file: microkernel_{generic,avx2,avx512}.cpp (the last two from
// microkernel_impl.h), direct_{generic,avx2,avx512}.cpp, packing_{avx2,avx512}.cpp,
// convert_{generic,avx2}.cpp.
template <typename T>
MicroKernel<T> generic_micro_kernel();
template <typename S>
void set_generic_direct_tiles(Kernels<S>& kernels);
template <typename S>
void set_generic_conversions(Kernels<S>& kernels);  // 16-bit S only
#if EML_GEMM_X86
template <typename T>
MicroKernel<T> avx2_micro_kernel();
template <typename T>
MicroKernel<T> avx2_micro_kernel_rows(int rows);  // 1 <= rows < MR
template <typename T>
MicroKernel<T> avx2_micro_kernel_next(int rows);  // 1 <= rows <= MR
template <typename T>
MicroKernel<T> avx512_micro_kernel_pair();
template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_rows(int rows);  // 1 <= rows < MR
template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_next(int rows);  // 1 <= rows <= MR
template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_block();  // 2*MR rows of a pair
template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_block_store();  // the same, C not fetched first
template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_block_stream();  // and written past the caches
template <typename S>
void set_avx2_direct_tiles(Kernels<S>& kernels);
template <typename T>
void set_avx512_dot_tiles(Kernels<T>& kernels);  // float and double; 2 and 3 rows
template <typename T>
void set_avx512_interleaved_tiles(Kernels<T>& kernels);  // float and double
template <typename T>
void set_avx512_broadcast_tiles(Kernels<T>& kernels);  // float and double; whole width
// bfloat16's dot tiles on vdpbf16ps (direct_avx512_bf16.cpp), for CPUs with AVX512_BF16.
void set_avx512_bf16_dot_tiles(Kernels<bfloat16_t>& kernels);
// Whether the active kernels multiply bfloat16 with bfloat16 dot products (the AVX-512 ISA on
// a CPU with AVX512_BF16): their dot tiles then read a bfloat16 W at memory speed.
bool active_bf16_dot_tiles_are_native();
template <typename S>
void set_avx2_packing(Kernels<S>& kernels);
void set_avx512_packing(Kernels<float>& kernels);  // the transposing pack of B panels
template <typename S>
void set_avx2_conversions(Kernels<S>& kernels);  // 16-bit S only
#endif

}  // namespace eml::gemm::blocked
