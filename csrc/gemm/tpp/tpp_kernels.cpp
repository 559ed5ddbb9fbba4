// LIBXSMM set-up and a thread-safe cache of batch-reduce GEMM kernels: a lock-free
// per-thread cache in front of a shared one.
#include <libxsmm.h>

#include <atomic>
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

bool jit_avx512() {
  static const bool avx512 = init() && libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512;
  return avx512;
}

namespace {

// Kernels every thread may use, and keys whose dispatch failed lately. Only misses of a
// thread's own cache come here; LIBXSMM's JIT runs outside this lock.
template <typename T>
struct SharedCache {
  std::mutex mutex;
  std::unordered_map<KernelKey, BrgemmKernel<T>, KeyHash> kernels;
  // Key -> lookups still answered "no kernel" before the dispatch is tried again: a
  // failure is neither retried on every call nor remembered forever.
  std::unordered_map<KernelKey, int, KeyHash> failures;
};

constexpr size_t kMaxFailures = 256;       // forget them all beyond this
constexpr size_t kMaxThreadKernels = 1024;  // a thread's cache starts over beyond this

template <typename T>
SharedCache<T>& shared_cache() {
  static SharedCache<T>* instance = new SharedCache<T>();  // never destroyed: safe at exit
  return *instance;
}

std::atomic<int64_t> g_dispatch_attempts{0};
std::atomic<int> g_failures_to_inject{0};

// Takes one injected failure, if any is left.
bool take_injected_failure() {
  int left = g_failures_to_inject.load(std::memory_order_relaxed);
  while (left > 0 && !g_failures_to_inject.compare_exchange_weak(left, left - 1)) {
  }
  return left > 0;
}

// LIBXSMM's kernel for `key`, or nullptr; counted, and failed on request, for the tests.
template <typename T>
BrgemmKernel<T> counted_dispatch(const KernelKey& key) {
  g_dispatch_attempts.fetch_add(1, std::memory_order_relaxed);
  if (take_injected_failure()) return nullptr;
  return dispatch<T>(key);  // LIBXSMM's dispatch is thread-safe
}

// The shared cache's kernel for `key`, dispatching it on a miss; nullptr on failure.
template <typename T>
BrgemmKernel<T> shared_lookup(const KernelKey& key) {
  SharedCache<T>& shared = shared_cache<T>();
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    auto hit = shared.kernels.find(key);
    if (hit != shared.kernels.end()) return hit->second;
    auto failed = shared.failures.find(key);
    if (failed != shared.failures.end()) {
      if (--failed->second > 0) return nullptr;
      shared.failures.erase(failed);  // retry now
    }
  }
  BrgemmKernel<T> kernel = counted_dispatch<T>(key);
  std::lock_guard<std::mutex> lock(shared.mutex);
  if (kernel == nullptr) {
    if (shared.failures.size() >= kMaxFailures) shared.failures.clear();
    shared.failures[key] = kLookupsBetweenRetries;
    return nullptr;
  }
  return shared.kernels.emplace(key, kernel).first->second;  // first one in wins
}

}  // namespace

template <typename T>
BrgemmKernel<T> get_kernel(const KernelKey& key) {
  if (key.m <= 0 || key.n <= 0 || key.k <= 0) return nullptr;
  // Hits are answered by this thread's own copy, without a lock.
  thread_local std::unordered_map<KernelKey, BrgemmKernel<T>, KeyHash> own;
  auto hit = own.find(key);
  if (hit != own.end()) return hit->second;
  BrgemmKernel<T> kernel = shared_lookup<T>(key);
  if (kernel != nullptr) {
    if (own.size() >= kMaxThreadKernels) own.clear();
    own.emplace(key, kernel);
  }
  return kernel;
}

template BrgemmKernel<float> get_kernel<float>(const KernelKey&);
template BrgemmKernel<double> get_kernel<double>(const KernelKey&);

namespace testing {

int64_t dispatch_attempts() { return g_dispatch_attempts.load(); }

void fail_next_dispatches(int count) { g_failures_to_inject.store(count); }

}  // namespace testing

}  // namespace eml::gemm::tpp

namespace eml::gemm {

bool tpp_available() { return tpp::init(); }

}  // namespace eml::gemm
