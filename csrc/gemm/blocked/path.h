// Which loop nest computes a (sub-)problem: packed, or one of the packing-free paths.
#pragma once

#include <cstdint>

#include "../gemm.h"

namespace eml::gemm::blocked {

enum class Path { automatic, packed, dot, broadcast, stream };

// The fastest path for this shape and layout (thresholds measured on Zen 3 with AVX2, and
// on Zen 5, scaled by the caches: tuning()).
template <typename T>
Path choose_path(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n, int64_t k);

// For tests and tuning: use `path` whenever the layout allows it (automatic: the
// default choice). Applies to all threads.
void force_path(Path path);

}  // namespace eml::gemm::blocked
