// LIBXSMM set-up and a thread-safe cache of batch-reduce GEMM kernels.
#include <libxsmm.h>

#include <functional>
#include <mutex>
#include <unordered_map>

#include "tpp_internal.h"

namespace eml::gemm::tpp {

bool KernelKey::operator==(const KernelKey& o) const {
  return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
         stride_a == o.stride_a && stride_b == o.stride_b && trans_b == o.trans_b &&
         accumulate == o.accumulate;
}

namespace {

struct KeyHash {
  size_t operator()(const KernelKey& key) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint32_t(key.m)); mix(uint32_t(key.n)); mix(uint32_t(key.k));
    mix(uint32_t(key.lda)); mix(uint32_t(key.ldb)); mix(uint32_t(key.ldc));
    mix(uint32_t(key.stride_a)); mix(uint32_t(key.stride_b));
    mix((key.trans_b ? 1u : 0u) | (key.accumulate ? 2u : 0u));
    return size_t(h);
  }
};

template <typename T>
struct Cache {
  std::mutex mutex;
  std::unordered_map<KernelKey, BrgemmKernel<T>, KeyHash> kernels;
};

template <typename T>
Cache<T>& cache() {
  static Cache<T>* instance = new Cache<T>();  // never destroyed: safe at exit
  return *instance;
}

template <typename T>
BrgemmKernel<T> dispatch(const KernelKey& key) {
  const libxsmm_blasint lda = key.lda, ldb = key.ldb, ldc = key.ldc;
  const int flags = key.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  const T alpha = 1, beta = key.accumulate ? 1 : 0;
  if constexpr (sizeof(T) == sizeof(float)) {
    return reinterpret_cast<BrgemmKernel<T>>(libxsmm_smmdispatch_reducebatch_strd(
        key.m, key.n, key.k, key.stride_a, key.stride_b, &lda, &ldb, &ldc, &alpha, &beta,
        &flags, &prefetch));
  } else {
    return reinterpret_cast<BrgemmKernel<T>>(libxsmm_dmmdispatch_reducebatch_strd(
        key.m, key.n, key.k, key.stride_a, key.stride_b, &lda, &ldb, &ldc, &alpha, &beta,
        &flags, &prefetch));
  }
}

}  // namespace

bool init() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    libxsmm_init();
    KernelKey probe;
    probe.m = probe.n = probe.k = 8;
    probe.lda = probe.ldb = probe.ldc = 8;
    probe.stride_a = probe.stride_b = 8 * 8 * sizeof(float);
    ok = dispatch<float>(probe) != nullptr;
  });
  return ok;
}

template <typename T>
BrgemmKernel<T> get_kernel(const KernelKey& key) {
  if (key.m <= 0 || key.n <= 0 || key.k <= 0) return nullptr;
  Cache<T>& c = cache<T>();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.kernels.find(key);
  if (it != c.kernels.end()) return it->second;
  BrgemmKernel<T> kernel = dispatch<T>(key);  // nullptr is cached too: no retry storms
  c.kernels.emplace(key, kernel);
  return kernel;
}

template BrgemmKernel<float> get_kernel<float>(const KernelKey&);
template BrgemmKernel<double> get_kernel<double>(const KernelKey&);

}  // namespace eml::gemm::tpp

namespace eml::gemm {

bool tpp_available() { return tpp::init(); }

}  // namespace eml::gemm
