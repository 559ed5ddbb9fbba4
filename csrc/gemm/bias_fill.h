// C = the bias in every row (or zeros): an empty product (k == 0), and the start of the
// paths that accumulate onto C. Shared by the blocked and tpp GEMMs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gemm.h"

namespace eml::gemm {

// Every row of c = bias[0:c.cols] (contiguous), or zeros when bias is null.
template <typename T>
void fill_with_bias(OutputMatrix<T> c, const T* bias) {
  for (int64_t i = 0; i < c.rows; ++i) {
    T* row = c.data + i * c.ld;
    if (bias != nullptr) {
      std::copy(bias, bias + c.cols, row);
    } else {
      std::fill(row, row + c.cols, T{});
    }
  }
}

}  // namespace eml::gemm
