// The packed GEMM's register tile, per element type (packing and kernels must agree):
//     6 x 16 floats / 6 x 8 doubles = 12 ymm accumulators, the BLIS Haswell/Zen shape
//     (AVX-512 runs pairs of these tiles). The cache blocks MC, KC and NC depend on the CPU:
//     tuning.h (the model of block_model.h, with environment overrides).
#pragma once

#include <cstdint>

namespace eml::gemm::blocked {

template <typename T>
struct BlockSizes;

template <>
struct BlockSizes<float> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 16;
};

template <>
struct BlockSizes<double> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 8;
};

}  // namespace eml::gemm::blocked
