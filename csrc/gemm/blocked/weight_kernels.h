// The kernels of compressed_gemm (compressed_gemm.h): float activations times weights
// stored narrower (int8, bfloat16_t, float16_t), widened to float in registers. They
// are the dot tiles of the packing-free path (direct_*.cpp) with B of another element
// type, and the row widening of the 16-bit types (convert_*.cpp) for int8 too.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace eml::gemm {

// int8 weights beside half.h's widen() overloads: exact in float.
inline float widen(int8_t value) { return static_cast<float>(value); }

namespace blocked {

template <typename W>
struct WeightKernels {
  DotTile<float, W> dot[kDotRows][kDotCols];  // [rows - 1][cols - 1]
  void (*widen)(const W* src, int64_t count, float* dst) = nullptr;
};

// The table for active_isa() (compressed_gemm.cpp), for W = int8_t, bfloat16_t, float16_t.
template <typename W>
const WeightKernels<W>& active_weight_kernels();

// The pieces, one ISA per file as for Kernels (kernels.h).
template <typename W>
void set_generic_weight_tiles(WeightKernels<W>& kernels);  // direct_generic.cpp
template <typename W>
void set_generic_weight_widen(WeightKernels<W>& kernels);  // convert_generic.cpp
#if EML_GEMM_X86
template <typename W>
void set_avx2_weight_tiles(WeightKernels<W>& kernels);  // direct_avx2.cpp
template <typename W>
void set_avx2_weight_widen(WeightKernels<W>& kernels);  // convert_avx2.cpp
#endif

}  // namespace blocked
}  // namespace eml::gemm
