#include "path.h"

#include <atomic>

#include "kernels.h"

namespace eml::gemm::blocked {
namespace {

std::atomic<Path> g_forced_path{Path::automatic};

// At most this many steps of k count as shallow (write-bound).
constexpr int64_t kShallowK = 4;

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
Path choose_path(ConstMatrixView<T> a, ConstMatrixView<T> b, int64_t m, int64_t n, int64_t k,
                 bool wide_packed_kernel) {
  const Path forced = g_forced_path.load(std::memory_order_relaxed);
  if (forced == Path::dot && dot_applies(a, b)) return Path::dot;
  if (forced == Path::broadcast && broadcast_applies(b)) return Path::broadcast;
  if (forced == Path::stream && broadcast_applies(b)) return Path::stream;
  if (forced != Path::automatic) return Path::packed;

  // Packing B costs about as much as a few rows of compute, packing A as a few
  // columns: with few rows (or few columns) reading the operands in place wins.
  // Crossovers measured on Zen 3 (float; double behaves alike).
  const int64_t a_bytes = m * k * static_cast<int64_t>(sizeof(T));
  const int64_t b_bytes = k * n * static_cast<int64_t>(sizeof(T));
  // The AVX-512 tile pairs beat the dot tiles on 16-32 rows x k >= 512 (Zen 5: 1.1-1.3x),
  // so with them the dot tiles keep only up to 12 rows (13-15 also go packed); AVX2's
  // packed kernel beats them only from 33 rows.
  const int64_t dot_max_rows = wide_packed_kernel ? 12 : 32;
  if (dot_applies(a, b) && (m <= 8 || (m <= dot_max_rows && k >= 256) || n <= 8)) {
    return Path::dot;
  }
  if (broadcast_applies(b)) {
    // A shallow product (k of a few steps, e.g. the rank-1 dL/dW of batch 1) is bound by
    // the writes of C: read the operands in place and write C in memory order.
    if (k <= kShallowK) return Path::broadcast;
    // Very few rows and a B beyond L2: stream B once, in memory order.
    if (m <= 2 || (m <= kStreamRows && b_bytes > (int64_t{512} << 10))) return Path::stream;
    // Few rows and a B that L3 holds, or a narrow B whose strips stay in L1 while
    // A is re-read (from L3) once per strip: when A's rows are contiguous (when
    // they are not, as in G^T·X, packing A wins), or when the problem is tiny.
    const bool few_rows = m <= 32 && b_bytes <= (int64_t{4} << 20);
    const bool narrow_b = n <= 128 && a_bytes <= (int64_t{4} << 20);
    const bool tiny = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <=
                      64.0 * 64 * 64;
    if (tiny || (a.col_stride == 1 && (few_rows || narrow_b))) return Path::broadcast;
  }
  return Path::packed;
}

#define EML_INSTANTIATE_CHOOSE_PATH(T)                                                   \
  template Path choose_path<T>(ConstMatrixView<T>, ConstMatrixView<T>, int64_t, int64_t, \
                               int64_t, bool);
EML_INSTANTIATE_CHOOSE_PATH(float)
EML_INSTANTIATE_CHOOSE_PATH(double)
EML_INSTANTIATE_CHOOSE_PATH(bfloat16_t)
EML_INSTANTIATE_CHOOSE_PATH(float16_t)
#undef EML_INSTANTIATE_CHOOSE_PATH

}  // namespace eml::gemm::blocked
