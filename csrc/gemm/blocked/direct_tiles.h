// Fills a Kernels table's packing-free tiles (dot, broadcast, stream: one function per
// tile shape) from the tile templates of one ISA's file (direct_avx2.cpp,
// direct_generic.cpp). `Tiles` names them:
//   template <typename S, typename SB, int R, int C> static DotTile<S, SB> dot();
//   template <typename S, int R, int W> static BroadcastTile<S> broadcast();  // W columns
//   (the SIMD files' factories take a fourth parameter, bool kPrefetchNext: the tiles that
//   also prefetch the next strip of B, for set_broadcast<..., true>)
//   template <typename S, int R> static StreamTile<S> stream();
// fill_table and fill_row fill any 2-D table of tiles (the AVX-512 interleaved ones too).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels.h"

#if EML_GEMM_X86
#include <xmmintrin.h>
#endif

namespace eml::gemm::blocked {
namespace direct_tiles {

// Elements from p to the next 64-byte boundary (0 when p is on one): the AVX-512 dot tiles'
// first, masked step, after which each row of B loads whole lines.
template <typename T>
int lanes_to_line(const T* p) {
  constexpr std::uintptr_t kLine = 64;
  const std::uintptr_t past = reinterpret_cast<std::uintptr_t>(p) % kLine;
  return past == 0 ? 0 : static_cast<int>((kLine - past) / sizeof(T));
}

// out (+)= sum, the dot product of a tile's A row and its B row j: accumulated into C, or
// written with the bias's entry j added where there is a bias.
template <typename T>
inline void write_dot_sum(T& out, T sum, const T* bias, int64_t j, bool accumulate) {
  if (accumulate) {
    out += sum;
  } else {
    out = bias != nullptr ? sum + bias[j] : sum;
  }
}

#if EML_GEMM_X86
// How far ahead of its loads a dot tile prefetches each row of B: the hardware prefetcher
// alone kept too few of B's lines in flight from memory (Zen 5, 4 to 12 rows of A: 1.1-1.4x
// with it).
constexpr std::uintptr_t kAheadBytes = 1536;

// A prefetch of the line at address p with `Hint` (_MM_HINT_T0: into L1, _MM_HINT_T1: into
// L2). An address, not a pointer: it may lie past B's end, which a prefetch may touch. No
// target attribute: it inlines into the tiles of every ISA.
template <int Hint>
__attribute__((always_inline)) inline void prefetch_line(std::uintptr_t p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), static_cast<_mm_hint>(Hint));
}

// A prefetch into L1 of the line kAheadBytes past p.
template <typename T>
__attribute__((always_inline)) inline void prefetch_ahead(const T* p) {
  prefetch_line<_MM_HINT_T0>(reinterpret_cast<std::uintptr_t>(p) + kAheadBytes);
}
#endif

// table[R - 1][C - 1] = make(R, C) for C of 1 to Cols, each number a std::integral_constant
// (a template argument inside `make`).
template <int R, typename Tile, int Rows, int Cols, typename Make, int... Cs>
void fill_row(Tile (&table)[Rows][Cols], Make make, std::integer_sequence<int, Cs...>) {
  ((table[R - 1][Cs] =
        make(std::integral_constant<int, R>{}, std::integral_constant<int, Cs + 1>{})),
   ...);
}

template <int R, typename Tile, int Rows, int Cols, typename Make>
void fill_row(Tile (&table)[Rows][Cols], Make make) {
  fill_row<R>(table, make, std::make_integer_sequence<int, Cols>{});
}

template <typename Tile, int Rows, int Cols, typename Make, int... Rs>
void fill_table(Tile (&table)[Rows][Cols], Make make, std::integer_sequence<int, Rs...>) {
  (fill_row<Rs + 1>(table, make), ...);
}

// Every entry of a 2-D table of tiles: table[R - 1][C - 1] = make(R, C).
template <typename Tile, int Rows, int Cols, typename Make>
void fill_table(Tile (&table)[Rows][Cols], Make make) {
  fill_table(table, make, std::make_integer_sequence<int, Rows>{});
}

// Tiles::dot<S, SB, R, C>() for fill_table and fill_row.
template <typename Tiles, typename S, typename SB>
struct MakeDot {
  template <typename R, typename C>
  DotTile<S, SB> operator()(R, C) const {
    return Tiles::template dot<S, SB, R::value, C::value>();
  }
};

// kPrefetchNext: the tiles that also prefetch the next strip of B.
template <typename Tiles, typename S, int W, bool kPrefetchNext = false, int N, int... Rs>
void set_broadcast(BroadcastTile<S> (&tiles)[N], std::integer_sequence<int, Rs...>) {
  if constexpr (kPrefetchNext) {
    ((tiles[Rs] = Tiles::template broadcast<S, Rs + 1, W, true>()), ...);
  } else {
    ((tiles[Rs] = Tiles::template broadcast<S, Rs + 1, W>()), ...);
  }
}

template <typename Tiles, typename S, int... Rs>
void set_stream(Kernels<S>& kernels, std::integer_sequence<int, Rs...>) {
  ((kernels.stream[Rs] = Tiles::template stream<S, Rs + 1>()), ...);
}

}  // namespace direct_tiles

// Every dot tile shape, A of S and B of SB, from `Tiles`.
template <typename Tiles, typename S, typename SB>
void set_dot_tiles(DotTile<S, SB> (&dot)[kDotRows][kDotCols]) {
  direct_tiles::fill_table(dot, direct_tiles::MakeDot<Tiles, S, SB>{});
}

// Every dot, broadcast (whole and, for float and double, half width) and stream tile of
// `kernels`, from `Tiles`.
template <typename Tiles, typename S>
void set_direct_tiles(Kernels<S>& kernels) {
  set_dot_tiles<Tiles>(kernels.dot);
  direct_tiles::set_broadcast<Tiles, S, static_cast<int>(kBroadcastCols<S>)>(
      kernels.broadcast, std::make_integer_sequence<int, kBroadcastRows>{});
  if constexpr (std::is_same_v<S, Acc<S>>) {
    direct_tiles::set_broadcast<Tiles, S, static_cast<int>(kHalfBroadcastCols<S>)>(
        kernels.half_broadcast, std::make_integer_sequence<int, kHalfBroadcastRows>{});
  }
  direct_tiles::set_stream<Tiles, S>(kernels, std::make_integer_sequence<int, kStreamRows>{});
}

}  // namespace eml::gemm::blocked
