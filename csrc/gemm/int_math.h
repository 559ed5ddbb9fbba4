// Integer helpers of the block arithmetic, shared by the blocked and tpp GEMMs.
#pragma once

#include <cstdint>

namespace eml::gemm {

// x / y rounded up, for x >= 0 and y > 0.
constexpr int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// The smallest multiple of `multiple` that is >= value, for value >= 0.
constexpr int64_t round_up(int64_t value, int64_t multiple) {
  return ceil_div(value, multiple) * multiple;
}

}  // namespace eml::gemm
