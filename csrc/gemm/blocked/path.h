// Which loop nest computes a (sub-)problem: packed, or one of the packing-free paths.
#pragma once

#include <cstdint>

#include "../gemm.h"

namespace eml::gemm::blocked {

enum class Path { automatic, packed, dot, broadcast, stream, transposed };

// The most rows of A (whole broadcast tiles) for which the transposed path is chosen. Zen 3,
// forward (W^T), 1 thread, against the dot and packed paths: float, 16 to 64 rows x 1024x1024
// to 4096x4096, 1.1x-1.9x (8, 12 and 20 rows, not whole tiles, 0.65x-0.93x); double, 8 rows
// 1.5x, 16 to 32 rows 0.95x-1.2x, 64 rows 0.8x.
template <typename T>
inline constexpr int64_t kTransposedMaxRows = sizeof(T) == 8 ? 8 : 64;

// The fastest path for this shape and layout (thresholds measured on Zen 3 with AVX2, and
// on Zen 5, scaled by the caches: tuning()).
template <typename T>
Path choose_path(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n, int64_t k);

// For tests and tuning: use `path` whenever the layout allows it (automatic: the
// default choice). Applies to all threads.
void force_path(Path path);

}  // namespace eml::gemm::blocked
