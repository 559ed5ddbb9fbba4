// Fills a Kernels table's packing-free tiles (dot, broadcast, stream: one function per
// tile shape) from the tile templates of one ISA's file (direct_avx2.cpp,
// direct_generic.cpp). `Tiles` names them:
//   template <typename S, typename SB, int R, int C> static DotTile<S, SB> dot();
//   template <typename S, int R, int W> static BroadcastTile<S> broadcast();  // W columns
//   template <typename S, int R> static StreamTile<S> stream();
#pragma once

#include <type_traits>
#include <utility>

#include "kernels.h"

namespace eml::gemm::blocked {
namespace direct_tiles {

template <typename Tiles, typename S, typename SB, int R, int... Cs>
void set_dot_row(DotTile<S, SB> (&dot)[kDotRows][kDotCols], std::integer_sequence<int, Cs...>) {
  ((dot[R - 1][Cs] = Tiles::template dot<S, SB, R, Cs + 1>()), ...);
}

template <typename Tiles, typename S, typename SB, int... Rs>
void set_dot(DotTile<S, SB> (&dot)[kDotRows][kDotCols], std::integer_sequence<int, Rs...>) {
  (set_dot_row<Tiles, S, SB, Rs + 1>(dot, std::make_integer_sequence<int, kDotCols>{}), ...);
}

template <typename Tiles, typename S, int W, int N, int... Rs>
void set_broadcast(BroadcastTile<S> (&tiles)[N], std::integer_sequence<int, Rs...>) {
  ((tiles[Rs] = Tiles::template broadcast<S, Rs + 1, W>()), ...);
}

template <typename Tiles, typename S, int... Rs>
void set_stream(Kernels<S>& kernels, std::integer_sequence<int, Rs...>) {
  ((kernels.stream[Rs] = Tiles::template stream<S, Rs + 1>()), ...);
}

}  // namespace direct_tiles

// Every dot tile shape, A of S and B of SB, from `Tiles`.
template <typename Tiles, typename S, typename SB>
void set_dot_tiles(DotTile<S, SB> (&dot)[kDotRows][kDotCols]) {
  direct_tiles::set_dot<Tiles, S, SB>(dot, std::make_integer_sequence<int, kDotRows>{});
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
