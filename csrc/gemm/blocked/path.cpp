#include "path.h"

#include <atomic>

#include "kernels.h"

namespace eml::gemm::blocked {
namespace {

std::atomic<Path> g_forced_path{Path::automatic};

template <typename T>
bool dot_applies(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  return a.col_stride == 1 && b.row_stride == 1;
}

template <typename T>
bool broadcast_applies(ConstMatrixView<T> b) {
  return b.col_stride == 1;
}

}  // namespace

void force_path(Path path) { g_forced_path.store(path, std::memory_order_relaxed); }

template <typename T>
Path choose_path(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n, int64_t k) {
  const Path forced = g_forced_path.load(std::memory_order_relaxed);
  if (forced == Path::dot && dot_applies(a, b)) return Path::dot;
  if (forced == Path::broadcast && broadcast_applies(b)) return Path::broadcast;
  if (forced == Path::stream && broadcast_applies(b)) return Path::stream;
  if (forced != Path::automatic) return Path::packed;

  // Packing B costs about as much as a few rows of compute, packing A as a few
  // columns: with few rows (or few columns) reading the operands in place wins.
  // Crossovers measured on Zen 3 (float; double behaves alike).
  const bool few_rows = m <= 8 || (m <= 32 && k >= 256);
  const bool few_cols = n <= 8;
  if ((few_rows || few_cols) && dot_applies(a, b)) return Path::dot;
  if (broadcast_applies(b)) {
    // Very few rows of a B beyond L2: stream B once, in memory order.
    const bool large_b = k * n * static_cast<int64_t>(sizeof(T)) > (int64_t{512} << 10);
    if (m <= 2 || (m <= kStreamRows && large_b)) return Path::stream;
    if (few_rows || few_cols) return Path::broadcast;
  }
  return Path::packed;
}

template Path choose_path<float>(ConstMatrixView<float>, ConstMatrixView<float>, int64_t,
                                 int64_t, int64_t);
template Path choose_path<double>(ConstMatrixView<double>, ConstMatrixView<double>, int64_t,
                                  int64_t, int64_t);

}  // namespace eml::gemm::blocked
