// The packing-free paths: loops over the direct tiles of kernels.h, reading A and
// B where they are. For problems where packing would cost more than it saves.
#pragma once

#include "../gemm.h"
#include "kernels.h"

namespace eml::gemm::blocked {

// Needs a.col_stride == 1 and b.row_stride == 1 (A and B both contiguous along k,
// as in Y = X·W^T). C = A·B (+ bias).
// 16-bit S: A and B are read in place; C and bias are float (Acc<S>).
template <typename S>
void dot_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
              OutputMatrix<Acc<S>> c, const Acc<S>* bias);

// Needs b.col_stride == 1 (B contiguous along n, as in G·W), or a float or double B that fits
// L1, which it copies into rows first; A may have any strides. Where C's rows are its narrow
// side (narrow_side, path.h: G^T·X), it computes C^T = B^T·A^T instead, A^T's contiguous rows
// as the tiles' vectors, and transposes it into C.
template <typename S>
void broadcast_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                    OutputMatrix<Acc<S>> c, const Acc<S>* bias);

// Needs a.col_stride == 1 and b.row_stride == 1, as dot_gemm, and float or double: C = A·B
// (+ bias) as C^T = B^T·A^T on the broadcast tiles, for few rows of A (X) and a B^T (W) read
// in place, whose values the tiles broadcast, instead of packed (a transpose of all of W);
// A^T is copied into rows (k x m), and C^T is transposed into C a block of columns at a time.
// Up to half a tile's width of rows of A take the half-width tiles (kernels.h).
template <typename S>
void transposed_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                     OutputMatrix<Acc<S>> c, const Acc<S>* bias);

// Needs b.row_stride == 1 (B contiguous along k, as W^T in Y = X·W^T), at most
// kInterleavedMaxRows rows of A (any strides), and the kernels' interleaved tiles (float and
// double with AVX-512): C = A·B (+ bias) by those tiles, A copied interleaved into L2 in
// groups of rows (direct_gemm.cpp's RowGroups) and B read in place, in order, each tile
// of B's columns by every group in turn.
template <typename S>
bool has_interleaved_tiles(const Kernels<S>& kernels) {
  return kernels.interleaved[0][0] != nullptr;
}
template <typename S>
void interleaved_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                      OutputMatrix<Acc<S>> c, const Acc<S>* bias);

// Needs b.col_stride == 1 (B contiguous along n, as W in G·W) and the kernels' strip tiles
// (float and double with AVX-512); A may have any strides (read in place, meant for rows
// contiguous along k). C = A·B (+ bias) by blocks of depth whose strips of B fill three
// quarters of L1: in each, strip by strip of kStripTileCols<S> columns, the first row tile reads
// B in place and copies the strip for the later ones, which read it from L1 (path.cpp: 33 to
// 256 rows and a narrow B).
template <typename S>
bool has_strip_tiles(const Kernels<S>& kernels) {
  return kernels.strip_pack != nullptr;
}
template <typename S>
void strip_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                OutputMatrix<Acc<S>> c, const Acc<S>* bias);

// Needs b.col_stride == 1; meant for very few rows and a B too large for cache:
// reads each row of B once, in order, updating column blocks of C held in L1.
template <typename S>
void stream_gemm(const Kernels<S>& kernels, ConstMatrixView<S> a, ConstMatrixView<S> b,
                 OutputMatrix<Acc<S>> c, const Acc<S>* bias);

}  // namespace eml::gemm::blocked
