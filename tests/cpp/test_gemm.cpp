// Standalone test (no torch) of eml::gemm::blocked_gemm against a float64 naive
// reference (and of gemm::run, the op layer's entry): odd shapes, every stride layout,
// bias / row sums, both ISAs, every path, threads; float, double, bfloat16 and float16
// (with the 16-bit conversions checked bit for bit against an exact rounding reference);
// compressed_gemm (float A, int8 / 16-bit weights) on both of its paths.
// `test_gemm bench [threads [m n k]]` prints GFLOP/s instead (env: BENCH_LAYOUT=fwd|gi|gw,
// BENCH_TYPES=f32,f64,bf16,f16 (default f32,f64), BENCH_PATH, BENCH_SHAPES="m,n,k;...",
// BENCH_ONE_CORE=1: the threads' parts run one after another on one core, see OneCoreParts).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <thread>
#include <type_traits>
#include <vector>

#include "gemm/aligned_buffer.h"
#include "gemm/backend.h"
#include "gemm/blocked/block_sizes.h"
#include "gemm/blocked/blocked_gemm.h"
#include "gemm/blocked/kernels.h"
#include "gemm/blocked/path.h"
#include "gemm/blocked/compressed_gemm.h"
#include "gemm/blocked/weight_kernels.h"
#include "gemm/blocked/block_model.h"
#include "gemm/blocked/packed_gemm.h"
#include "gemm/blocked/partition.h"
#include "gemm/blocked/tuning.h"
#include "gemm/blocked/workspace.h"
#include "gemm/cache_info.h"
#include "gemm/gemm.h"
#include "gemm/half.h"
#include "gemm/int_math.h"
#include "gemm/isa.h"
#include "gemm/peak.h"
#include "gemm/run.h"

using namespace eml::gemm;
using eml::gemm::blocked::Path;
using eml::Backend;
using eml::available_backends;
using eml::backend_name;
using eml::Bf16Policy;
using eml::bf16_policy;
using eml::set_bf16_policy;

namespace {

// ---------------------------------------------------------------- threading
// Runs chunks on fresh std::threads, split like at::parallel_for: one contiguous
// chunk per thread.
Threading spawning_threading(int threads) {
  Threading threading;
  threading.num_threads = threads;
  threading.parallel_for = [threads](int64_t begin, int64_t end,
                                     const std::function<void(int64_t, int64_t)>& body) {
    const int64_t total = end - begin;
    const int64_t chunks = std::min<int64_t>(threads, total);
    std::vector<std::thread> workers;
    for (int64_t t = 1; t < chunks; ++t) {
      workers.emplace_back(body, begin + total * t / chunks, begin + total * (t + 1) / chunks);
    }
    body(begin, begin + total / chunks);
    for (auto& worker : workers) worker.join();
  };
  return threading;
}

// A persistent pool of spinning workers, closer to OpenMP's cost per region (for timing).
class SpinPool {
 public:
  explicit SpinPool(int threads) : threads_(threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~SpinPool() {
    stop_ = true;
    generation_.fetch_add(1);
    for (auto& worker : workers_) worker.join();
  }
  void run(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& body) {
    begin_ = begin;
    end_ = end;
    body_ = &body;
    pending_.store(threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
    run_chunk(0);
    while (pending_.load(std::memory_order_acquire) != 0) {
    }
  }

 private:
  void run_chunk(int t) {
    const int64_t total = end_ - begin_;
    const int64_t lo = begin_ + total * t / threads_, hi = begin_ + total * (t + 1) / threads_;
    if (lo < hi) (*body_)(lo, hi);
  }
  void work(int t) {
    uint64_t seen = 0;
    while (true) {
      uint64_t now;
      while ((now = generation_.load(std::memory_order_acquire)) == seen) {
      }
      seen = now;
      if (stop_) return;
      run_chunk(t);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }
  int threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  int64_t begin_ = 0, end_ = 0;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
};

Threading pool_threading(SpinPool& pool, int threads) {
  Threading threading;
  threading.num_threads = threads;
  threading.parallel_for = [&pool](int64_t begin, int64_t end,
                                   const std::function<void(int64_t, int64_t)>& body) {
    pool.run(begin, end, body);
  };
  return threading;
}

// ---------------------------------------------------------------- element types
template <typename T>
double as_double(T value) {
  return static_cast<double>(widen(value));
}

template <typename T>
T from_double(double value) {
  return narrow<T>(static_cast<accumulator_t<T>>(value));
}

template <typename T>
bool same_bits(T x, T y) {
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  if constexpr (std::is_same_v<T, bfloat16_t>) return "bf16";
  if constexpr (std::is_same_v<T, float16_t>) return "f16";
}

template <typename W>
const char* compressed_type_name() {
  if constexpr (std::is_same_v<W, int8_t>) return "int8";
  if constexpr (!std::is_same_v<W, int8_t>) return type_name<W>();
}

// Mantissa bits and smallest normal exponent of the 16-bit types.
template <typename T>
constexpr int kMantissaBits = std::is_same_v<T, bfloat16_t> ? 7 : 10;
template <typename T>
constexpr int kMinExponent = std::is_same_v<T, bfloat16_t> ? -126 : -14;

// One unit in the last place of T at magnitude x (the subnormal spacing below the normals).
template <typename T>
double ulp(double x) {
  const int exponent = x == 0 ? kMinExponent<T> : std::max(std::ilogb(x), kMinExponent<T>);
  return std::ldexp(1.0, exponent - kMantissaBits<T>);
}

// The exact round-to-nearest-even of x to T, in double arithmetic (nearbyint rounds
// to nearest even): the reference for to_bfloat16 / to_float16 and the AVX2 kernels.
template <typename T>
double round_reference(double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double max_finite =
      std::ldexp(2.0 - std::ldexp(1.0, -kMantissaBits<T>), 1 - kMinExponent<T>);
  const double step = ulp<T>(std::abs(x));
  const double rounded = std::nearbyint(x / step) * step;
  if (std::abs(rounded) > max_finite) return std::copysign(INFINITY, x);
  return rounded;
}

// ---------------------------------------------------------------- layouts
enum class Layout {
  row_major,      // strides (cols, 1)
  col_major,      // a transposed view: strides (1, rows)
  sliced,         // every 2nd column of a wider row-major matrix, padded rows
  sliced_t,       // transposed and sliced: strides (2, 2*rows + 3)
  expanded_rows,  // one row repeated: strides (0, 1)
  expanded_cols,  // one column repeated: strides (1, 0)
  scalar,         // one element everywhere: strides (0, 0)
};
constexpr Layout kLayouts[] = {Layout::row_major,     Layout::col_major,     Layout::sliced,
                               Layout::sliced_t,      Layout::expanded_rows, Layout::expanded_cols,
                               Layout::scalar};

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::row_major: return "row_major";
    case Layout::col_major: return "col_major";
    case Layout::sliced: return "sliced";
    case Layout::sliced_t: return "sliced_t";
    case Layout::expanded_rows: return "expanded_rows";
    case Layout::expanded_cols: return "expanded_cols";
    case Layout::scalar: return "scalar";
  }
  return "?";
}

// A matrix in some layout, with its own storage.
template <typename T>
struct Operand {
  std::vector<T> storage;
  ConstMatrixView<T> view;
};

template <typename T>
Operand<T> make_operand(int64_t rows, int64_t cols, Layout layout, std::mt19937& rng) {
  Operand<T> op;
  int64_t row_stride = 0, col_stride = 0, size = 1;
  switch (layout) {
    case Layout::row_major: row_stride = cols; col_stride = 1; size = rows * cols; break;
    case Layout::col_major: row_stride = 1; col_stride = rows; size = rows * cols; break;
    case Layout::sliced: row_stride = 2 * cols + 5; col_stride = 2; size = rows * row_stride; break;
    case Layout::sliced_t:
      row_stride = 2; col_stride = 2 * rows + 3; size = cols * col_stride; break;
    case Layout::expanded_rows: row_stride = 0; col_stride = 1; size = cols; break;
    case Layout::expanded_cols: row_stride = 1; col_stride = 0; size = rows; break;
    case Layout::scalar: size = 1; break;
  }
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  op.storage.resize(static_cast<size_t>(std::max<int64_t>(size, 1)) + 8);
  for (auto& value : op.storage) value = from_double<T>(dist(rng));
  op.view = {op.storage.data(), rows, cols, row_stride, col_stride};
  return op;
}

// ---------------------------------------------------------------- checking
int g_failures = 0;
int64_t g_checks = 0;

// run.sh splits the problems between processes: with EML_GEMM_TEST_SHARD=i/n this one checks
// the problems (check_problem, check_compressed) that a greedy split by cost gives shard i;
// the other checks run in every shard.
struct Shard {
  int64_t index = 0;
  int64_t count = 1;
};

Shard shard_from_environment() {
  Shard shard;
  const char* text = std::getenv("EML_GEMM_TEST_SHARD");
  if (text == nullptr) return shard;
  long long index = 0, count = 0;
  if (std::sscanf(text, "%lld/%lld", &index, &count) != 2 || count < 1 || index < 0 ||
      index >= count) {
    std::fprintf(stderr, "bad EML_GEMM_TEST_SHARD=%s (want i/n, 0 <= i < n)\n", text);
    std::exit(2);
  }
  shard.index = index;
  shard.count = count;
  return shard;
}

const Shard g_shard = shard_from_environment();
// The cost given to each shard so far: every process computes the same split.
std::vector<double> g_shard_costs(static_cast<size_t>(g_shard.count), 0.0);

// Whether the next problem, of about `cost` operations, is this shard's: the cheapest shard
// so far takes it.
bool in_this_shard(double cost) {
  const auto cheapest = std::min_element(g_shard_costs.begin(), g_shard_costs.end());
  *cheapest += cost;
  return cheapest - g_shard_costs.begin() == g_shard.index;
}

// The cost of an m x n x k problem computed `runs` times, for in_this_shard.
double problem_cost(int64_t m, int64_t n, int64_t k, size_t runs) {
  const double mn = static_cast<double>(m) * static_cast<double>(n);
  return (mn * static_cast<double>(k) + mn + 1) * static_cast<double>(runs);
}

// One problem: operands in given layouts and what the result must be.
struct Problem {
  int64_t m, n, k;
  Layout a_layout, b_layout;
  bool bias, row_sums;
};

// How to compute it.
struct Variant {
  Isa isa;
  Path path;
  int threads;
  // B packed ahead (prepack_b) in blocks of this many steps, the path then ignored: 0, not
  // prepacked; kPrepackDepth, the depth prepack_depth gives.
  int64_t prepack_kc = 0;
  bool stream_c = false;  // Epilogue::stream_c
};
constexpr int64_t kPrepackDepth = -1;

const char* path_name(Path path) {
  switch (path) {
    case Path::automatic: return "automatic";
    case Path::packed: return "packed";
    case Path::dot: return "dot";
    case Path::broadcast: return "broadcast";
    case Path::stream: return "stream";
    case Path::transposed: return "transposed";
    case Path::interleaved: return "interleaved";
    case Path::strip: return "strip";
  }
  return "?";
}

std::string describe(const Problem& c, const Variant& v, const char* type) {
  char text[300];
  std::snprintf(text, sizeof(text),
                "%s m=%lld n=%lld k=%lld A=%s B=%s bias=%d row_sums=%d isa=%s path=%s threads=%d "
                "prepack_kc=%lld stream_c=%d",
                type, static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), layout_name(c.a_layout), layout_name(c.b_layout),
                c.bias, c.row_sums, isa_name(v.isa), path_name(v.path), v.threads,
                static_cast<long long>(v.prepack_kc), v.stream_c);
  return text;
}

void fail(const std::string& what, const std::string& where) {
  if (++g_failures <= 20) std::fprintf(stderr, "FAIL: %s [%s]\n", what.c_str(), where.c_str());
}

// Same NaN / infinity class and sign, or within the rounding bound.
bool close_enough(double got, double want, double bound) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (!std::isfinite(got)) return false;
  return std::abs(got - want) <= bound;
}

// Computes the problem once in float64, then checks every variant against it.
template <typename T>
void check_problem(const Problem& c, const std::vector<Variant>& variants,
                   std::mt19937& shared_rng, bool poison = false) {
  // One draw from the shared generator whichever shard runs the problem, so that every shard
  // draws the same later problems and assigns them alike (in_this_shard).
  std::mt19937 rng(shared_rng());
  // The float64 reference, then each variant.
  if (!in_this_shard(problem_cost(c.m, c.n, c.k, variants.size() + 1))) return;
  Operand<T> a = make_operand<T>(c.m, c.k, c.a_layout, rng);
  Operand<T> b = make_operand<T>(c.k, c.n, c.b_layout, rng);
  if (poison && c.m > 0 && c.k > 0 && c.n > 0) {  // one NaN in A, one infinity in B
    const_cast<T&>(a.view(c.m / 2, c.k / 3)) = from_double<T>(NAN);
    const_cast<T&>(b.view(c.k - 1, c.n / 2)) = from_double<T>(-INFINITY);
  }
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> bias(static_cast<size_t>(c.n) + 1);
  for (auto& value : bias) value = from_double<T>(dist(rng));

  // The float64 reference, with each entry's rounding bound: (k + 4) eps sum |terms|,
  // eps of the accumulator type; 16-bit results may be one ulp of T off on top (the
  // float result rounded once).
  const double eps = std::numeric_limits<accumulator_t<T>>::epsilon();
  auto output_ulp = [](double want) { return is_half_v<T> ? ulp<T>(std::abs(want)) : 0.0; };
  std::vector<double> want(static_cast<size_t>(c.m * c.n)), bound(want.size());
  std::vector<double> want_sums(static_cast<size_t>(c.m)), bound_sums(want_sums.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = c.bias ? as_double(bias[j]) : 0.0;
      double magnitude = std::abs(sum);
      for (int64_t p = 0; p < c.k; ++p) {
        const double product = as_double(a.view(i, p)) * as_double(b.view(p, j));
        sum += product;
        magnitude += std::abs(product);
      }
      want[i * c.n + j] = sum;
      bound[i * c.n + j] = (c.k + 4) * eps * magnitude + output_ulp(sum) + 1e-30;
    }
    double sum = 0, magnitude = 0;
    for (int64_t p = 0; p < c.k; ++p) {
      sum += as_double(a.view(i, p));
      magnitude += std::abs(as_double(a.view(i, p)));
    }
    want_sums[i] = sum;
    bound_sums[i] = (c.k + 4) * eps * magnitude + output_ulp(sum) + 1e-30;
  }

  const int64_t ld = c.n + (c.m % 3);  // sometimes wider than n
  const T sentinel = from_double<T>(12345.5);
  for (const Variant& v : variants) {
    // 64-byte aligned, as a streamed C's rows must be (with ld a multiple of a line).
    AlignedBuffer out_storage;
    const size_t out_size = static_cast<size_t>(c.m * ld) + 4;
    T* out = static_cast<T*>(out_storage.reserve(out_size * sizeof(T)));
    std::fill(out, out + out_size, sentinel);
    std::vector<T> sums(static_cast<size_t>(c.m) + 2, sentinel);
    Epilogue<T> epilogue;
    if (c.bias) epilogue.bias = bias.data();
    if (c.row_sums) epilogue.a_row_sums = sums.data();
    epilogue.stream_c = v.stream_c;
    set_active_isa(v.isa);
    blocked::force_path(v.path);
    const Threading threading = v.threads > 1 ? spawning_threading(v.threads) : Threading{};
    if constexpr (is_half_v<T>) {
      blocked_gemm<T>(a.view, b.view, {out, c.m, c.n, ld}, epilogue, threading);
    } else if (v.prepack_kc != 0) {
      const int64_t kc = v.prepack_kc == kPrepackDepth ? prepack_depth<T>(c.k) : v.prepack_kc;
      // A poisoned tail: the GEMM must read only the packed values.
      const size_t size = static_cast<size_t>(prepacked_b_size<T>(c.k, c.n)) + 16;
      AlignedBuffer storage;
      T* packed = static_cast<T*>(storage.reserve(size * sizeof(T)));
      std::fill(packed, packed + size, from_double<T>(NAN));
      prepack_b<T>(b.view, kc, packed);
      blocked_gemm<T>(a.view, PrepackedB<T>{packed, c.k, c.n, kc}, {out, c.m, c.n, ld},
                      epilogue, threading);
    } else {
      blocked_gemm<T>(a.view, b.view, {out, c.m, c.n, ld}, epilogue, threading);
    }
    ++g_checks;

    const std::string where = describe(c, v, type_name<T>());
    auto check = [&]() {
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          const double got = as_double(out[i * ld + j]);
          if (!close_enough(got, want[i * c.n + j], bound[i * c.n + j])) {
            return fail("C(" + std::to_string(i) + "," + std::to_string(j) + ") = " +
                            std::to_string(got) + ", want " + std::to_string(want[i * c.n + j]),
                        where);
          }
        }
        for (int64_t j = c.n; j < ld; ++j) {
          if (!same_bits(out[i * ld + j], sentinel)) return fail("wrote past C's columns", where);
        }
      }
      if (!same_bits(out[c.m * ld], sentinel)) return fail("wrote past C's end", where);
      if (!c.row_sums) return;
      for (int64_t i = 0; i < c.m; ++i) {
        if (!close_enough(as_double(sums[i]), want_sums[i], bound_sums[i])) {
          return fail("row_sums[" + std::to_string(i) + "] = " +
                          std::to_string(as_double(sums[i])) + ", want " +
                          std::to_string(want_sums[i]),
                      where);
        }
      }
      if (!same_bits(sums[c.m], sentinel)) return fail("wrote past row_sums", where);
    };
    check();
  }
}

// Every ISA this CPU supports (generic up to detected_isa()).
std::vector<Isa> isas() {
  std::vector<Isa> list;
  for (Isa isa : kAllIsas) {
    if (isa_supported(isa)) list.push_back(isa);
  }
  return list;
}

constexpr Path kPaths[] = {Path::automatic,  Path::packed,      Path::dot,
                           Path::broadcast,  Path::stream,      Path::transposed,
                           Path::interleaved, Path::strip};

// Every ISA x path, with the given thread counts.
std::vector<Variant> all_variants(std::initializer_list<int> thread_counts) {
  std::vector<Variant> variants;
  for (Isa isa : isas()) {
    for (Path path : kPaths) {
      for (int threads : thread_counts) variants.push_back({isa, path, threads});
    }
  }
  return variants;
}

// all_variants with, for float and double, B prepacked too: in blocks of the depth
// prepack_depth gives, and of 7 steps (many blocks, a short last one).
template <typename T>
std::vector<Variant> variants_of(std::initializer_list<int> thread_counts) {
  std::vector<Variant> variants = all_variants(thread_counts);
  if constexpr (!is_half_v<T>) {
    for (Isa isa : isas()) {
      for (int threads : thread_counts) {
        variants.push_back({isa, Path::packed, threads, kPrepackDepth});
        variants.push_back({isa, Path::packed, threads, 7});
      }
    }
  }
  return variants;
}

template <typename T>
void run_tests() {
  std::mt19937 rng(42);
  // 1. Every layout pair, bias and row sums, on a few odd shapes, every ISA and path.
  const int64_t layout_shapes[][3] = {{7, 19, 13}, {1, 33, 9}, {17, 5, 1}, {13, 18, 37}};
  for (const auto& s : layout_shapes) {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        const bool extras = (static_cast<int>(la) + static_cast<int>(lb)) % 2 == 0;
        check_problem<T>({s[0], s[1], s[2], la, lb, extras, !extras}, variants_of<T>({1}), rng);
      }
    }
  }
  // 2. Many sizes (primes, block-size edges, 0, 1) in the three linear-layer layouts.
  const int64_t sizes[] = {0, 1, 2, 3, 5, 6, 7, 8, 15, 16, 17, 31, 47, 64, 97, 143, 145, 257, 300};
  struct Product {
    Layout a, b;
  };
  const Product products[] = {{Layout::row_major, Layout::col_major},   // X·W^T
                              {Layout::row_major, Layout::row_major},   // G·W
                              {Layout::col_major, Layout::row_major}};  // G^T·X
  std::uniform_int_distribution<int> pick(0, sizeof(sizes) / sizeof(sizes[0]) - 1);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t m = sizes[pick(rng)], n = sizes[pick(rng)], k = sizes[pick(rng)];
    const Product& product = products[trial % 3];
    check_problem<T>({m, n, k, product.a, product.b, trial % 2 == 0, trial % 5 < 2},
                     variants_of<T>({1}), rng);
  }
  // The interleaved tiles of every shape: 1 to 8 rows of X, every width of the last tile of
  // W's rows, k within one vector, with a partial last step, and over many.
  for (int64_t m = 1; m <= blocked::kInterleavedRows; ++m) {
    for (int64_t n = 1; n <= 2 * blocked::kInterleavedCols + 1; ++n) {
      for (const int64_t k : {int64_t{3}, int64_t{37}, int64_t{300}}) {
        check_problem<T>({m, n, k, Layout::row_major, Layout::col_major, n % 2 == 0, false},
                         all_variants({1}), rng);
      }
    }
  }
  // More rows than one interleaved tile: groups of up to kInterleavedGroupRows, as even as
  // they go (9: 5 and 4, 17: 6, 6 and 5, 32: 6, 6 and four of 5), each reading the same tile
  // of W's rows.
  for (const int64_t m : {9, 12, 16, 17, 23, 32, 64, 127, 128}) {
    for (const int64_t n : {1, 4, 5, 9}) {
      for (const int64_t k : {int64_t{3}, int64_t{37}, int64_t{300}}) {
        check_problem<T>({m, n, k, Layout::row_major, Layout::col_major, n % 2 == 0, false},
                         all_variants({1}), rng);
      }
    }
  }
  // dL/dW = G^T·X with a narrow side (path.cpp's narrow_side): C^T of 16 to 64 rows, C of
  // 16 to 64 columns, 64 x 64, at depths in one block of the broadcast path, several and a
  // short last one; with 2 and 3 threads, parts on both sides of the rule.
  const int64_t narrow_shapes[][3] = {{16, 100, 300}, {32, 128, 128}, {48, 70, 700},
                                      {64, 64, 300},  {100, 48, 257}, {130, 32, 1000},
                                      {64, 300, 129}};
  for (const auto& s : narrow_shapes) {
    check_problem<T>({s[0], s[1], s[2], Layout::col_major, Layout::row_major, true, true},
                     all_variants({1, 2, 3}), rng);
  }
  // Shallow blocks, written rows outer (macro_kernel.cpp): two row tiles per call from depth
  // 16 (kPairBlockMinDepth) on, with the rows and the columns (a whole and a part tile) left
  // after the whole pairs; depth 8 below it.
  for (const int64_t k : {8, 16, 17, 32}) {
    for (const int64_t m : {12, 29, 100}) {
      check_problem<T>({m, 83, k, Layout::row_major, Layout::col_major, true, false},
                       variants_of<T>({1, 2}), rng);
    }
  }
  // 3. Beyond the cache blocks (KC and MC on most CPUs, the direct paths' k blocks; each CPU's
  // model blocks: check_model_blocks) and threads
  // (4 threads on a square problem: a 2 x 2 grid of parts).
  const int64_t big_shapes[][3] = {{300, 257, 301}, {151, 129, 1100}, {7, 4100, 20},
                                   {16, 700, 1500}, {290, 3, 70},     {3, 290, 70},
                                   {160, 150, 140}, {1, 1000, 600},   {4, 600, 2100},
                                   {1, 3000, 2000}, {250, 260, 270},  {600, 64, 100},
                                   {8, 100, 1024},  {4, 100, 1024}};
  for (const auto& s : big_shapes) {
    for (const Product& product : products) {
      check_problem<T>({s[0], s[1], s[2], product.a, product.b, true, true},
                       variants_of<T>({1, 2, 3, 4}), rng);
    }
  }
  // 4. NaN and infinity propagate like in a plain GEMM.
  for (const Product& product : products) {
    for (const auto& s : {std::array<int64_t, 3>{9, 21, 11}, std::array<int64_t, 3>{40, 70, 300}}) {
      check_problem<T>({s[0], s[1], s[2], product.a, product.b, true, false}, variants_of<T>({1}),
                       rng, /*poison=*/true);
    }
  }
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// 16-bit results with k = 1 are exact float values (a product of two 16-bit values,
// plus the bias, in float) rounded once: every path and ISA must give the same bits
// as the scalar rounding of that float.
template <typename S>
void check_exact_rounding(std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-4.0, 4.0);
  for (const auto& shape : {std::array<int64_t, 2>{7, 19}, std::array<int64_t, 2>{1, 40},
                            std::array<int64_t, 2>{33, 3}, std::array<int64_t, 2>{150, 70}}) {
    const int64_t m = shape[0], n = shape[1];
    std::vector<S> a(m), b(n), bias(n);
    for (auto& value : a) value = from_double<S>(dist(rng));
    for (auto& value : b) value = from_double<S>(dist(rng) * 1e-3);
    for (auto& value : bias) value = from_double<S>(dist(rng));
    for (const Variant& v : all_variants({1, 2})) {
      for (const bool col_major : {false, true}) {
        std::vector<S> out(static_cast<size_t>(m * n));
        Epilogue<S> epilogue;
        epilogue.bias = bias.data();
        set_active_isa(v.isa);
        blocked::force_path(v.path);
        const ConstMatrixView<S> a_view{a.data(), m, 1, col_major ? 1 : 1, col_major ? m : 1};
        const ConstMatrixView<S> b_view{b.data(), 1, n, n, 1};
        blocked_gemm<S>(a_view, b_view, {out.data(), m, n, n}, epilogue,
                        v.threads > 1 ? spawning_threading(v.threads) : Threading{});
        ++g_checks;
        for (int64_t i = 0; i < m * n; ++i) {
          const float exact = widen(a[i / n]) * widen(b[i % n]) + widen(bias[i % n]);
          if (!same_bits(out[i], narrow<S>(exact))) {
            fail("k = 1 result not the float result rounded once: got " +
                     std::to_string(as_double(out[i])) + ", want " +
                     std::to_string(as_double(narrow<S>(exact))),
                 describe({m, n, 1, Layout::row_major, Layout::row_major, true, false}, v,
                          type_name<S>()));
            break;
          }
        }
      }
    }
  }
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// The scalar conversions of half.h and every ISA's row conversions against the exact
// reference: all 65536 16-bit patterns widened (and narrowed back), and floats (random
// bit patterns, ties, overflow, subnormals, NaN, Inf) narrowed.
template <typename S>
void check_conversions(std::mt19937& rng) {
  const std::string where = std::string("conversions ") + type_name<S>();
  std::vector<S> halves(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) halves[bits] = S{static_cast<uint16_t>(bits)};
  std::vector<float> floats;
  for (const S half : halves) {
    const float value = widen(half);
    const int exponent_bits = std::is_same_v<S, bfloat16_t> ? 8 : 5;
    const int exponent = (half.bits >> kMantissaBits<S>) & ((1 << exponent_bits) - 1);
    const int mantissa = half.bits & ((1 << kMantissaBits<S>) - 1);
    const double sign = (half.bits & 0x8000) ? -1.0 : 1.0;
    double want;
    if (exponent == (1 << exponent_bits) - 1) {
      want = mantissa != 0 ? NAN : sign * INFINITY;
    } else if (exponent == 0) {
      want = sign * std::ldexp(mantissa, kMinExponent<S> - kMantissaBits<S>);
    } else {
      want = sign * std::ldexp(1.0 + std::ldexp(mantissa, -kMantissaBits<S>),
                               exponent - (1 << (exponent_bits - 1)) + 1);
    }
    if (std::isnan(want) ? !std::isnan(value) : static_cast<double>(value) != want) {
      fail("widen(" + std::to_string(half.bits) + ") = " + std::to_string(value), where);
    }
    if (!std::isnan(value) && !same_bits(narrow<S>(value), half)) {
      fail("narrow(widen(" + std::to_string(half.bits) + ")) changed the bits", where);
    }
    floats.push_back(value);
    // The midpoint to the next 16-bit value: a tie, which rounds to the even neighbour.
    if (std::isfinite(value)) {
      floats.push_back(static_cast<float>(value + ulp<S>(std::abs(value)) / 2));
    }
  }
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = any_bits(rng);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    floats.push_back(value);
  }
  for (const float value : {65504.0f, 65519.99f, 65520.0f, 1e30f, -1e-30f, 3.4e38f, 1e-8f}) {
    floats.push_back(value);
  }
  for (const float value : floats) {
    const double want = round_reference<S>(value);
    const double got = as_double(narrow<S>(value));
    if (std::isnan(want) ? !std::isnan(got) : got != want) {
      fail("narrow(" + std::to_string(value) + ") = " + std::to_string(got) + ", want " +
               std::to_string(want),
           where);
    }
  }
  ++g_checks;
  // Every ISA's row kernels: the same bits as the scalar conversions (NaN as NaN).
  for (Isa isa : isas()) {
    set_active_isa(isa);
    const blocked::Kernels<S>& kernels = blocked::active_kernels<S>();
    std::vector<S> narrowed(floats.size());
    kernels.narrow(floats.data(), static_cast<int64_t>(floats.size()), narrowed.data());
    for (size_t i = 0; i < floats.size(); ++i) {
      const S want = narrow<S>(floats[i]);
      const bool both_nan = std::isnan(widen(want)) && std::isnan(widen(narrowed[i]));
      if (!both_nan && !same_bits(narrowed[i], want)) {
        fail("row narrow(" + std::to_string(floats[i]) + ") differs from the scalar one",
             where + " isa=" + isa_name(isa));
        break;
      }
    }
    std::vector<float> widened(halves.size());
    kernels.widen(halves.data(), static_cast<int64_t>(halves.size()), widened.data());
    for (size_t i = 0; i < halves.size(); ++i) {
      const float want = widen(halves[i]);
      if (std::isnan(want) ? !std::isnan(widened[i]) : widened[i] != want) {
        fail("row widen(" + std::to_string(i) + ") differs from the scalar one",
             where + " isa=" + isa_name(isa));
        break;
      }
    }
    ++g_checks;
  }
  set_active_isa(detected_isa());
}

void test_isa_switching() {
  for (Isa isa : kAllIsas) {
    bool threw = false;
    try {
      set_active_isa(isa);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    const std::string name = isa_name(isa);
    if (isa_supported(isa) && (threw || active_isa() != isa)) {
      fail("set_active_isa(" + name + ") on a CPU that has it did not take effect", "isa");
    }
    if (!isa_supported(isa) && !threw) {
      fail("set_active_isa(" + name + ") on a CPU without it did not throw", "isa");
    }
  }
  if (!isa_supported(Isa::generic) || !isa_supported(detected_isa())) {
    fail("generic and the detected ISA must be supported", "isa");
  }
  set_active_isa(detected_isa());
}

// bfloat16 under each policy: own and aten whatever the size; auto by rows and m·k·n at
// the limits of run.h, forward and each gradient (a product whose m·k·n overflows int64_t too).
void check_bf16_routing() {
  struct Case {
    ProductSize size;
    Pass pass;
    bool ours;
  };
  constexpr int64_t huge = int64_t{1} << 30;
  const Bf16Policy before = bf16_policy();
  for (Isa isa : isas()) {
    set_active_isa(isa);
    const bool native = isa == Isa::avx512 && cpu_has_avx512_bf16();
    // With the bfloat16 dot tiles and no AMX in ATen's kernels, from the tiles' depth on, the
    // dot path's rows (32).
    const bool deep = native && !cpu_has_amx_bf16();
    const int64_t rows = deep ? blocked::dot_max_rows_at(4096) : kBf16OwnMaxRows;
    const int64_t shallow_rows = kBf16OwnMaxRows;
    ++g_checks;
    if (bf16_own_max_rows(4096) != rows || bf16_own_max_rows(kBf16DotTilesMinDepth) != rows ||
        bf16_own_max_rows(kBf16DotTilesMinDepth - 1) != shallow_rows ||
        blocked::active_bf16_dot_tiles_are_native() != native ||
        (deep && rows <= kBf16OwnMaxRows)) {
      fail("bf16_own_max_rows(4096) = " + std::to_string(bf16_own_max_rows(4096)), isa_name(isa));
    }
    const Case automatic_cases[] = {
        {{rows, 4096, 4096}, Pass::forward, true},
        {{rows + 1, 4096, 4096}, Pass::forward, false},
        {{shallow_rows, 64, 4096}, Pass::forward, true},
        {{shallow_rows + 1, 64, 4096}, Pass::forward, false},  // 2^20 and more
        {{256, 64, 63}, Pass::forward, true},  // just below 2^20
        {{256, 64, 64}, Pass::forward, false},
        {{huge, huge, huge}, Pass::forward, false},
        {{4, 64, 256}, Pass::input_gradient, true},  // 2^16
        {{4, 64, 257}, Pass::input_gradient, false},
        {{kBf16OwnInputGradientRows, 4096, 4096}, Pass::input_gradient, true},
        {{kBf16OwnInputGradientRows + 1, 4096, 4096}, Pass::input_gradient, false},
        {{4, 64, 256}, Pass::weight_gradient, true},  // 2^16
        {{4, 64, 257}, Pass::weight_gradient, false},
        {{1, 4096, 4096}, Pass::weight_gradient, false},
    };
    for (Bf16Policy policy : {Bf16Policy::own, Bf16Policy::aten, Bf16Policy::automatic}) {
      set_bf16_policy(policy);
      const std::string where = std::string("bf16 policy ") + eml::bf16_policy_name(policy) +
                                ", " + isa_name(isa);
      for (const Case& c : automatic_cases) {
        const bool want = policy == Bf16Policy::automatic ? c.ours : policy == Bf16Policy::own;
        ++g_checks;
        if (runs_on_own_gemm(Backend::blocked, Element::bfloat16, c.size, c.pass) != want) {
          fail("m, k, n = " + std::to_string(c.size.m) + ", " + std::to_string(c.size.k) +
                   ", " + std::to_string(c.size.n) +
                   " pass " + std::to_string(static_cast<int>(c.pass)),
               where);
        }
        if (runs_on_own_gemm(Backend::aten, Element::bfloat16, c.size, c.pass)) {
          fail("aten runs bfloat16 on our GEMM", where);
        }
      }
    }
  }
  set_active_isa(detected_isa());
  set_bf16_policy(before);
  bool threw = false;
  try {
    eml::require_bf16_policy("ours");
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  if (!threw) fail("require_bf16_policy accepted 'ours'", "bf16 policy");
  ++g_checks;
  // The forward's rows for each CPU, whichever this is: only dot tiles against ATen without
  // AMX tiles take more than kBf16OwnMaxRows, and only from kBf16DotTilesMinDepth on.
  const int64_t dot_rows = blocked::dot_max_rows_at(4096);
  for (bool native : {false, true}) {
    for (bool amx : {false, true}) {
      const int64_t deep_rows = native && !amx ? dot_rows : kBf16OwnMaxRows;
      ++g_checks;
      if (bf16_own_max_rows(4096, native, amx) != deep_rows ||
          bf16_own_max_rows(kBf16DotTilesMinDepth - 1, native, amx) != kBf16OwnMaxRows) {
        fail("bf16_own_max_rows(4096, " + std::to_string(native) + ", " + std::to_string(amx) +
                 ") = " + std::to_string(bf16_own_max_rows(4096, native, amx)),
             "bf16 policy");
      }
    }
  }
  if (dot_rows <= kBf16OwnMaxRows) fail("the dot path takes no more rows than 3", "bf16 policy");
}

// gemm::run, the op layer's entry: which element types it takes on which backend, that
// reference and blocked give the product, that aten is refused, and that mismatched
// shapes throw on every backend (one contract).
void test_run_entry() {
  const Threading serial;
  const ProductSize large{4096, 4096, 4096};
  for (Element element : {Element::float32, Element::float64, Element::float16}) {
    for (Pass pass : {Pass::forward, Pass::input_gradient, Pass::weight_gradient}) {
      if (runs_on_own_gemm(Backend::aten, element, large, pass)) {
        fail("aten runs on our GEMM", "run");
      }
      if (!runs_on_own_gemm(Backend::blocked, element, large, pass) ||
          !runs_on_own_gemm(Backend::reference, element, large, pass)) {
        fail("blocked or reference does not run a type they compute", "run");
      }
    }
  }
  check_bf16_routing();
  // [[1, 2], [3, 4]] · [[5, 6], [7, 8]] + [10, 20]
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, bias[2] = {10, 20};
  const float want[4] = {29, 42, 53, 70};
  Epilogue<float> epilogue;
  epilogue.bias = bias;
  for (Backend backend : available_backends()) {
    if (backend == Backend::aten) continue;
    float c[4] = {};
    run<float>(backend, {a, 2, 2, 2, 1}, {b, 2, 2, 2, 1}, {c, 2, 2, 2}, epilogue, serial);
    if (!std::equal(c, c + 4, want)) fail(std::string(backend_name(backend)) + " product", "run");
    bool threw = false;
    try {  // B has 3 rows for A's 2 columns
      run<float>(backend, {a, 2, 2, 2, 1}, {b, 3, 1, 1, 1}, {c, 2, 1, 1}, {}, serial);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    if (!threw) fail(std::string(backend_name(backend)) + " accepted mismatched shapes", "run");
    ++g_checks;
  }
  bool threw = false;
  float c[4] = {};
  try {
    run<float>(Backend::aten, {a, 2, 2, 2, 1}, {b, 2, 2, 2, 1}, {c, 2, 2, 2}, {}, serial);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  if (!threw) fail("run(aten) did not throw", "run");
  ++g_checks;
}

// Sums over 2^25 steps of ones: one float running sum stalls at 2^24, the blocked sums
// must reach 2^25 exactly (C and row sums; every path and ISA, and the reference).
// Stride-0 operands keep the memory small.
void check_long_reductions() {
  constexpr int64_t k = int64_t{1} << 25, m = 2, n = 2;
  const float ones[m > n ? m : n] = {1.0f, 1.0f};
  const std::vector<float> k_ones(static_cast<size_t>(k), 1.0f);  // 128 MiB, shared by A and B
  // A = G^T and B = X as in a weight gradient; and A, B contiguous along k (the dot path).
  const ConstMatrixView<float> a_layouts[] = {{ones, m, k, 1, 0}, {k_ones.data(), m, k, 0, 1}};
  const ConstMatrixView<float> b_layouts[] = {{ones, k, n, 0, 1}, {k_ones.data(), k, n, 1, 0}};
  const float want = static_cast<float>(k);
  auto check = [&](const float* c, const float* sums, const std::string& where) {
    ++g_checks;
    for (int64_t i = 0; i < m * n; ++i) {
      if (c[i] != want) return fail("C = " + std::to_string(c[i]) + ", want 2^25", where);
    }
    for (int64_t i = 0; i < m; ++i) {
      if (sums[i] != want) return fail("row sum = " + std::to_string(sums[i]) + ", want 2^25", where);
    }
  };
  for (int layout = 0; layout < 2; ++layout) {
    const std::string name = "long reduction, layout " + std::to_string(layout);
    float c[m * n], sums[m];
    reference_gemm<float>(a_layouts[layout], b_layouts[layout], {c, m, n, n}, {nullptr, sums});
    check(c, sums, name + ", reference");
    for (Isa isa : isas()) {
      for (Path path : kPaths) {
        set_active_isa(isa);
        blocked::force_path(path);
        blocked_gemm<float>(a_layouts[layout], b_layouts[layout], {c, m, n, n}, {nullptr, sums},
                            Threading{});
        check(c, sums, name + " isa=" + isa_name(isa) + " path=" + path_name(path));
      }
    }
  }
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// ---------------------------------------------------------------- compressed weights
// compressed_gemm against float64 on the same (widened) weights: few rows (the dot
// path) and many (widened blocks on blocked_gemm), strided A, scales and bias, threads.
template <typename W>
void check_compressed(std::mt19937& shared_rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::uniform_int_distribution<int> quantised(-127, 127);
  const int64_t shapes[][3] = {{1, 1, 1},     {1, 37, 19}, {3, 9, 600},    {5, 4100, 33},
                               {8, 64, 1030}, {32, 17, 9}, {33, 70, 300},  {100, 600, 2100},
                               {7, 3, 0},     {0, 5, 4}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    // Two layouts of A, each on two thread counts in every ISA; one draw per shape whichever
    // shard runs it (see check_problem).
    std::mt19937 rng(shared_rng());
    if (!in_this_shard(problem_cost(m, n, k, 4 * isas().size()))) continue;
    for (const bool transposed_a : {false, true}) {
      std::vector<float> a(static_cast<size_t>(m * k));
      for (float& value : a) value = static_cast<float>(dist(rng));
      std::vector<W> w(static_cast<size_t>(n * k));
      for (W& value : w) {
        if constexpr (std::is_same_v<W, int8_t>) {
          value = static_cast<int8_t>(quantised(rng));
        } else {
          value = from_double<W>(dist(rng));
        }
      }
      std::vector<float> scales(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
      for (float& value : scales) value = static_cast<float>(0.01 + std::abs(dist(rng)));
      for (float& value : bias) value = static_cast<float>(dist(rng));
      const ConstMatrixView<float> a_view =
          transposed_a ? ConstMatrixView<float>{a.data(), m, k, 1, m}
                       : ConstMatrixView<float>{a.data(), m, k, k, 1};
      for (Isa isa : isas()) {
        set_active_isa(isa);
        for (int threads : {1, 3}) {
          SpinPool pool(threads);
          std::vector<float> c(static_cast<size_t>(m * n), NAN);
          compressed_gemm<W>(a_view, ConstMatrixView<W>{w.data(), n, k, k, 1}, scales.data(),
                             OutputMatrix<float>{c.data(), m, n, n}, bias.data(),
                             pool_threading(pool, threads));
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0, magnitude = 0;
              for (int64_t p = 0; p < k; ++p) {
                const double product = double{a_view(i, p)} * as_double(w[j * k + p]);
                sum += product;
                magnitude += std::abs(product);
              }
              const double want = sum * scales[j] + bias[j];
              const double bound =
                  4.0 * (static_cast<double>(k) + 2) * 0x1p-24 * (magnitude * scales[j] + 1);
              ++g_checks;
              if (!close_enough(c[i * n + j], want, bound)) {
                char where[160];
                std::snprintf(where, sizeof(where),
                              "compressed %s m=%lld n=%lld k=%lld %s isa=%s threads=%d",
                              compressed_type_name<W>(), static_cast<long long>(m),
                              static_cast<long long>(n), static_cast<long long>(k),
                              transposed_a ? "A^T" : "A", isa_name(isa), threads);
                fail("C(" + std::to_string(i) + "," + std::to_string(j) + ") = " +
                         std::to_string(c[i * n + j]) + ", want " + std::to_string(want),
                     where);
              }
            }
          }
        }
      }
    }
  }
  set_active_isa(detected_isa());
}

// ---------------------------------------------------------------- block-size model
// The caches of five CPUs (size, ways, line, logical CPUs sharing) and the model's blocks
// for them, worked out by hand from block_model.h (ways of 4 KiB in L1, 64 KiB in L2 of
// 512 KiB, 128 KiB in L2 of 1 MiB 8-way), and whether AVX-512 is split into 256-bit halves:
struct ModelCase {
  const char* cpu;
  CacheInfo caches;
  Isa isa;
  blocked::CacheBlocks f32, f64;
  int64_t min_parallel_flops;
  bool splits_avx512 = false;
  // Rows of W per half-width tile at an aliasing stride: 6, or 8 where the L1 set holds 8
  // rows and 2 lines of X^T (Zen 5's 12 ways).
  int64_t aliased_tile_rows = 6;
};

// The narrow tiles' values block_model.cpp should give: tiles at full rate with AVX2 and with
// AVX-512 split into halves, and the transposed path's rows measured with them (0 without).
struct NarrowTiles {
  bool narrow;
  int64_t transposed_max_rows;
};
NarrowTiles expected_narrow_tiles(Isa isa, bool splits_avx512) {
  const bool narrow = isa == Isa::avx2 || (isa == Isa::avx512 && splits_avx512);
  return {narrow, narrow ? 64 : 0};
}

// The interleaved path's most rows in block_model.cpp: 128 where 512-bit FMAs are split into
// halves, 40 where they run whole (the packed tiles tie or win from 48 rows on).
int64_t expected_interleaved_rows(bool splits_avx512) { return splits_avx512 ? 128 : 40; }

CacheInfo caches_of(CacheLevel l1d, CacheLevel l2, CacheLevel l3) {
  CacheInfo caches;
  caches.l1d = l1d;
  caches.l2 = l2;
  caches.l3 = l3;
  caches.source = "test";
  return caches;
}

std::vector<ModelCase> model_cases() {
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB;
  return {
      // Zen 3 as this VM reports it: L3 shared by 2 -> 16 MiB share, ways of 1 MiB.
      // float 6x16: KC 320 (A 2 ways + B 5 = 7; 328: 2 + 6); MC 6 ways x 64 KiB / 1280 B
      // = 307 -> 306; NC 14 ways x 1 MiB / 1280 B = 11468 -> 11456.
      // double 6x8: KC 256 (3 + 4); MC 6 x 64 KiB / 2048 B = 192; NC 14 MiB / 2048 = 7168.
      {"Zen 3", caches_of({32 * KiB, 8, 64, 1}, {512 * KiB, 8, 64, 1}, {32 * MiB, 16, 64, 2}),
       Isa::avx2, {306, 320, 11456, 512}, {192, 256, 7168, 512}, 2048 * 32},
      // Zen 4 as this VM reports it (L2 1 MiB 8-way: ways of 128 KiB), AVX-512 in halves.
      // float 6x32: KC 168 (A 1 way + B 6; 176: 2 + 6); MC 6 ways x 128 KiB / 672 B = 1170;
      // A block 786240 B = 1 way of 1 MiB, NC 14 MiB / 672 B = 21845 -> 21824. double 6x16:
      // KC 160 (2 + 5; 168: 2 + 6); MC 6 x 128 KiB / 1280 B = 614 -> 612; NC 14 MiB / 1280
      // = 11468 -> 11456. One pass: 32 KiB / 128 B = 256 for both.
      {"Zen 4", caches_of({32 * KiB, 8, 64, 1}, {1 * MiB, 8, 64, 1}, {32 * MiB, 16, 64, 2}),
       Isa::avx512, {1170, 168, 21824, 256}, {612, 160, 11456, 256}, 2048 * 64, true},
      // Zen 5 (one 8-core CCD, SMT: L3 shared by 16 -> 2 MiB share, ways of 128 KiB).
      // float 6x32 (tile pairs): KC 288 (2 + 9 = 11 ways of 12 - 1; 296: 2 + 10); MC 14
      // ways x 64 KiB / 1152 B = 796 -> 792; A block 912384 B = 7 ways, NC 8 x 128 KiB /
      // 1152 B = 910 -> 896. double 6x16: KC 256 (3 + 8); MC 14 x 64 KiB / 2048 = 448 ->
      // 444; A 909312 B = 7 ways, NC 8 x 128 KiB / 2048 = 512.
      {"Zen 5", caches_of({48 * KiB, 12, 64, 1}, {1 * MiB, 16, 64, 1}, {32 * MiB, 16, 64, 16}),
       Isa::avx512, {792, 288, 896, 384}, {444, 256, 512, 384}, 2048 * 64, false, 8},
      // Skylake-X, 10 cores: 13.75 MiB 11-way L3 shared by 10 -> 1.375 MiB share (ways of
      // 128 KiB). float 6x32: KC 168 (A 1 way + B 6; 176: 2 + 6); MC 14 x 64 KiB / 672 B
      // = 1365 -> 1362; A block 915264 B = 7 ways, NC 3 x 128 KiB / 672 B = 585 -> 576.
      // double 6x16: KC 160 (2 + 5; 168: 2 + 6); MC 14 x 64 KiB / 1280 = 716 -> 714;
      // A 913920 B = 7 ways, NC 3 x 128 KiB / 1280 = 307 -> 304.
      {"Skylake-X",
       caches_of({32 * KiB, 8, 64, 1}, {1 * MiB, 16, 64, 1}, {13 * MiB + 3 * MiB / 4, 11, 64, 10}),
       Isa::avx512, {1362, 168, 576, 256}, {714, 160, 304, 256}, 2048 * 64},
      // Nothing reported: the assumed 32 KiB 8-way, 256 KiB 8-way (ways of 32 KiB), 2 MiB
      // 16-way (ways of 128 KiB). float: KC 320; MC 6 x 32 KiB / 1280 = 153 -> 150; A
      // 192000 B = 2 ways, NC 13 x 128 KiB / 1280 = 1331 -> 1328. double: KC 256; MC 6 x
      // 32 KiB / 2048 = 96; A 196608 B = 2 ways, NC 13 x 128 KiB / 2048 = 832.
      {"nothing reported", CacheInfo{}, Isa::avx2, {150, 320, 1328, 512}, {96, 256, 832, 512},
       2048 * 32},
  };
}

void expect_blocks(const blocked::CacheBlocks& got, const blocked::CacheBlocks& want,
                   const std::string& where) {
  ++g_checks;
  if (got.mc != want.mc || got.kc != want.kc || got.nc != want.nc ||
      got.one_pass_kc != want.one_pass_kc) {
    fail("MC/KC/NC/one-pass KC = " + std::to_string(got.mc) + "/" + std::to_string(got.kc) +
             "/" + std::to_string(got.nc) + "/" + std::to_string(got.one_pass_kc) + ", want " +
             std::to_string(want.mc) + "/" + std::to_string(want.kc) + "/" +
             std::to_string(want.nc) + "/" + std::to_string(want.one_pass_kc),
         where);
  }
}

void test_block_model() {
  for (const ModelCase& c : model_cases()) {
    const blocked::Tuning t = blocked::model_tuning(c.caches, c.isa, c.splits_avx512);
    const std::string where = std::string("block model, ") + c.cpu;
    expect_blocks(t.f32, c.f32, where + ", float");
    expect_blocks(t.f64, c.f64, where + ", double");
    const CacheInfo known = or_assumed(c.caches);
    ++g_checks;
    if (t.min_parallel_flops != c.min_parallel_flops ||
        t.shallow_block_bytes != known.l1d.size_bytes ||
        t.stream_b_bytes != known.l2.size_bytes ||
        t.l3_share_bytes != known.l3.size_bytes / known.l3.sharing ||
        t.aliasing_row_bytes != known.l1d.size_bytes / known.l1d.ways / 2 ||
        t.column_block_l2_bytes !=
            (known.l2.size_bytes >= 2 * 1024 * 1024 ? known.l2.size_bytes / 2 : 0)) {
      fail("thresholds differ from the caches and the ISA", where);
    }
    const NarrowTiles want = expected_narrow_tiles(c.isa, c.splits_avx512);
    ++g_checks;
    const int64_t interleaved_rows =
        c.isa != Isa::avx512 ? 0 : expected_interleaved_rows(c.splits_avx512);
    const int64_t few_rows_tiles = c.isa == Isa::avx512 && !c.splits_avx512 ? 1 : 0;
    // The streamed pair blocks exist with whole 512-bit FMAs only; with them, blocks up to 64
    // steps deep are written rows outer (else 32).
    const int64_t stream_c_bytes = few_rows_tiles == 1 ? known.l2.size_bytes : 0;
    const int64_t write_bound_depth = few_rows_tiles == 1 ? 64 : 32;
    // The strip tiles (8 x 3 vectors) take W up to 768 columns wide where FMAs run whole.
    const int64_t strip_max_cols = few_rows_tiles == 1 ? 768 : 0;
    // The next column step's panels prefetched from 4 rows with AVX2, 5 with AVX-512's whole
    // FMAs, 1 with its split ones.
    const int64_t prefetch_rows = c.isa != Isa::avx512 ? 4 : c.splits_avx512 ? 1 : 5;
    if (t.narrow_tiles != (want.narrow ? 1 : 0) || t.few_rows_tiles != few_rows_tiles ||
        t.prefetch_next_min_rows != prefetch_rows ||
        t.stream_c_bytes != stream_c_bytes || t.write_bound_depth != write_bound_depth ||
        t.strip_max_cols != strip_max_cols ||
        t.transposed_max_rows != want.transposed_max_rows ||
        t.interleaved_max_rows != interleaved_rows ||
        t.aliased_tile_rows != c.aliased_tile_rows) {
      fail("narrow tiles " + std::to_string(t.narrow_tiles) + ", few-rows tiles " +
               std::to_string(t.few_rows_tiles) + ", prefetch rows " +
               std::to_string(t.prefetch_next_min_rows) + ", stream_c_bytes " +
               std::to_string(t.stream_c_bytes) + ", write-bound depth " +
               std::to_string(t.write_bound_depth) + ", strip columns " +
               std::to_string(t.strip_max_cols) + ", transposed rows " +
               std::to_string(t.transposed_max_rows) + ", interleaved rows " +
               std::to_string(t.interleaved_max_rows) + ", aliased tile rows " +
               std::to_string(t.aliased_tile_rows),
           where);
    }
  }
  // An L2 of 2 MiB (the Xeon's) keeps one row block's column blocks of C in its half; the
  // model cases' L2s of 1 MiB or less do not (checked above).
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB;
  const CacheInfo xeon =
      caches_of({48 * KiB, 12, 64, 1}, {2 * MiB, 16, 64, 1}, {480 * MiB, 16, 64, 2});
  const blocked::Tuning xeon_avx512 = blocked::model_tuning(xeon, Isa::avx512, false);
  const blocked::Tuning xeon_avx2 = blocked::model_tuning(xeon, Isa::avx2, false);
  ++g_checks;
  if (xeon_avx512.column_block_l2_bytes != MiB || xeon_avx2.column_block_l2_bytes != MiB) {
    fail("column_block_l2_bytes is not half of a 2 MiB L2", "block model");
  }
  // And A's block takes half the ways the model leaves it (ways of 128 KiB; the L3 share of
  // 240 MiB has ways of 15 MiB). AVX-512, float 6x32: KC 288 (A 2 ways of 4 KiB + B 9 = 11);
  // B's micro-panel 1 way of L2, C 1: 14 ways, half 7 x 128 KiB / 1152 B = 796 -> 792 (not
  // 1590); A block 912384 B = 1 way, NC 14 x 15 MiB / 1152 B = 191146 -> 191136. double
  // 6x16: KC 256 (3 + 8); 7 x 128 KiB / 2048 B = 448 -> 444; NC 14 x 15 MiB / 2048 = 107520.
  // AVX2, float 6x16: KC 512 (A 3 ways + B 8); 7 x 128 KiB / 2048 B = 448 -> 444.
  expect_blocks(xeon_avx512.f32, {792, 288, 191136, 384}, "block model, Xeon, float");
  expect_blocks(xeon_avx512.f64, {444, 256, 107520, 384}, "block model, Xeon, double");
  ++g_checks;
  if (xeon_avx2.f32.mc != 444) {
    fail("MC is not half the free ways of a 2 MiB L2", "block model, Xeon, AVX2");
  }
  // The tile of each ISA: the packed kernel's, AVX-512 in pairs.
  ++g_checks;
  if (blocked::register_tile(Isa::avx2, 4).nr != 16 || blocked::register_tile(Isa::avx2, 8).nr != 8 ||
      blocked::register_tile(Isa::avx512, 4).nr != 32 ||
      blocked::register_tile(Isa::generic, 4).nr != 16 || blocked::register_tile(Isa::avx2, 4).mr != 6) {
    fail("register tiles", "block model");
  }
  // What this CPU reports is self-consistent, and the tuning in use is the model's for it
  // (no EML_OPS_* override is set by run.sh).
  const CacheInfo& here = cache_info();
  std::printf("caches (%s): L1d %s; L2 %s; L3 %s\n", here.source.c_str(),
              describe(here.l1d).c_str(), describe(here.l2).c_str(), describe(here.l3).c_str());
  ++g_checks;
  for (const CacheLevel* level : {&here.l1d, &here.l2, &here.l3}) {
    if (level->known() && level->sets() * level->ways * level->line_bytes != level->size_bytes) {
      fail("sets x ways x line != size", "cache_info");
    }
  }
  const blocked::Tuning model = blocked::model_tuning(here, active_isa(), cpu_splits_avx512());
  ++g_checks;
  if (std::getenv("EML_OPS_MC") == nullptr && blocked::tuning().f32.mc != model.f32.mc) {
    fail("tuning() is not the model's for this CPU", "tuning");
  }
}

// The GEMM is correct with the blocks the model picks for each CPU, on every ISA this CPU
// has: shapes just past MC and KC (one pass up to the one-pass depth, with fewer rows per
// block) and past the one-pass depth, and past NC (few rows, the packed path forced).
template <typename T>
void check_model_blocks(std::mt19937& rng) {
  for (const ModelCase& c : model_cases()) {
    for (Isa isa : isas()) {
      const blocked::Tuning t = blocked::model_tuning(c.caches, isa, c.splits_avx512);
      const blocked::CacheBlocks& blocks = t.blocks<accumulator_t<T>>();
      blocked::set_tuning_for_testing(&t);
      std::vector<Variant> variants = {{isa, Path::packed, 1}, {isa, Path::automatic, 2}};
      if constexpr (!is_half_v<T>) variants.push_back({isa, Path::packed, 2, kPrepackDepth});
      check_problem<T>({blocks.mc + 5, 37, blocks.kc + 3, Layout::row_major, Layout::col_major,
                        true, false},
                       variants, rng);
      check_problem<T>({blocks.mc + 5, 37, blocks.one_pass_kc + 3, Layout::row_major,
                        Layout::col_major, false, false},
                       variants, rng);
      check_problem<T>({7, blocks.nc + 5, blocks.kc + 3, Layout::col_major, Layout::row_major,
                        false, true},
                       variants, rng);
      if constexpr (!is_half_v<T>) {
        // 8 rows of X against W's rows an L1 way apart: the half tiles' aliased rows.
        const int64_t way_values = 2 * t.aliasing_row_bytes / static_cast<int64_t>(sizeof(T));
        check_problem<T>({8, 100, 2 * way_values, Layout::row_major, Layout::col_major, true,
                          false},
                         {{isa, Path::transposed, 1}, {isa, Path::automatic, 2}}, rng);
      }
      blocked::set_tuning_for_testing(nullptr);
    }
  }
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// C's rows a multiple of aliasing_row_bytes apart, k past one block of depth: the packed path
// computes C in a staged buffer and copies it (packed_gemm.h). One and two row blocks, one
// and more column widths, bias or not, one and two threads; and an L3 share too small for
// the whole width, so that the column blocks are narrowed (or C is not staged at all).
// 16-bit T: the decision for their float results, and the product, whose float results
// are computed at a row stride that does not alias (blocked_gemm.cpp), not staged.
template <typename T>
void check_staged_c(std::mt19937& rng) {
  using Acc = accumulator_t<T>;
  // The problems are built from the detected ISA's blocks, and each check runs the GEMM
  // under every ISA, leaving the last one active: the staging is asked of the detected one.
  set_active_isa(detected_isa());
  const blocked::Tuning& t = blocked::tuning();
  const blocked::CacheBlocks& blocks = t.blocks<Acc>();
  const auto bytes = static_cast<int64_t>(sizeof(Acc));
  const int64_t aliasing_cols = t.aliasing_row_bytes / bytes;
  const int64_t two_row_blocks = (blocks.mc / 3 + 4) * 3;  // check_problem's ld is n here
  const auto check = [&](const Problem& c, int64_t want_cols) {
    ++g_checks;
    set_active_isa(detected_isa());
    const blocked::StagedC staging = blocked::staged_c<Acc>(c.m, c.n, c.k, c.n);
    const blocked::Tuning& in_use = blocked::tuning();
    const bool ld_aliases =
        staging.cols != 0 && (staging.ld * bytes) % in_use.aliasing_row_bytes == 0;
    const bool bad_ld = staging.ld < staging.cols || ld_aliases ||
                        c.m * staging.ld * bytes > in_use.l3_share_bytes;
    if (c.m % 3 != 0 || staging.cols != want_cols || bad_ld ||
        blocked::staged_c<Acc>(c.m, c.n, c.k, c.n + 1).cols != 0 ||
        blocked::staged_c<Acc>(c.m, c.n, blocks.one_pass_kc, c.n).cols != 0) {
      fail("staged_c: not the expected staging", describe(c, {active_isa(), Path::packed, 1},
                                                          type_name<T>()));
    }
    for (Isa isa : isas()) {
      check_problem<T>(c, {{isa, Path::packed, 1}, {isa, Path::packed, 2}}, rng);
    }
  };
  const std::vector<Problem> problems = {
      {99, aliasing_cols, blocks.one_pass_kc + 37, Layout::row_major, Layout::col_major, true,
       false},
      {two_row_blocks, 2 * aliasing_cols, 2 * blocks.one_pass_kc + 5, Layout::row_major,
       Layout::row_major, false, true},
      {two_row_blocks, 3 * aliasing_cols, blocks.one_pass_kc + 1, Layout::col_major,
       Layout::col_major, true, false},
  };
  for (const Problem& c : problems) {
    check(c, std::min(c.n, blocks.nc));  // these widths are multiples of NR
  }
  // An L3 share of 12 rows of 2 minimum blocks: 4 minimum blocks become 3 balanced ones.
  const int64_t min_cols = blocked::kMinStagedBlockBytes / bytes;
  const int64_t nr = blocked::BlockSizes<Acc>::nr;
  const Problem wide{12, 4 * min_cols, blocks.one_pass_kc + 9, Layout::row_major,
                     Layout::col_major, true, false};
  blocked::Tuning small_share = t;
  (std::is_same_v<Acc, double> ? small_share.f64 : small_share.f32).nc = wide.n;
  small_share.l3_share_bytes = wide.m * (2 * min_cols) * bytes;
  blocked::set_tuning_for_testing(&small_share);
  check(wide, round_up(ceil_div(wide.n, 3), nr));
  // Too small for a minimum block: C is computed in place.
  small_share.l3_share_bytes = wide.m * min_cols * bytes;
  check(wide, 0);
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// One row block: column blocks that keep C's and B's blocks within column_block_l2_bytes
// (packed_gemm.h), over several blocks of depth or one. The columns chosen are the widest
// whole pairs of tiles that fit, narrower than n; none for more than one row block, an A
// block beyond half of the budget, A's packed copy beyond the L3 share or
// kPackedAOnceBudgets budgets, or the rule off. The product under it (A packed once for all
// of k, C in place at an aliasing stride, bias, row sums, a short last column block) on
// every ISA, one and two threads and prepacked, at both depths.
template <typename T>
void check_l2_column_block(std::mt19937& rng) {
  using Acc = accumulator_t<T>;
  const auto bytes = static_cast<int64_t>(sizeof(Acc));
  const int64_t pair = 2 * blocked::BlockSizes<Acc>::nr;
  blocked::Tuning t = blocked::tuning();
  blocked::CacheBlocks& blocks = std::is_same_v<Acc, double> ? t.f64 : t.f32;
  blocks.kc = 64;
  blocks.one_pass_kc = 64;
  const int64_t m = 37, k = 197;                    // 4 blocks of depth: 50, 50, 50, 47
  t.column_block_l2_bytes = (m + 50) * bytes * 3 * pair + 1;  // 3 pairs of columns
  blocked::set_tuning_for_testing(&t);
  const int64_t kc = blocked::packed_depth<Acc>(k);
  const auto fits = [&](int64_t cols) {
    return (m + kc) * cols * bytes <= t.column_block_l2_bytes;
  };
  const int64_t cols = blocked::l2_column_block<Acc>(m, 10 * pair, k);
  // One block of depth as deep as each of the four above: the same columns.
  const int64_t one_pass_k = kc;
  ++g_checks;
  if (kc != 50 || cols != 3 * pair || !fits(cols) || fits(cols + pair) ||
      blocked::l2_column_block<Acc>(m, 3 * pair, k) != 0 ||
      blocked::l2_column_block<Acc>(m, 10 * pair, one_pass_k) != cols ||
      blocked::l2_column_block<Acc>(t.column_block_l2_bytes / (2 * kc * bytes) + 1, 10 * pair,
                                    k) != 0) {
    fail("l2_column_block: not the expected columns (" + std::to_string(cols) + ")",
         type_name<T>());
  }
  const auto is_off = [&](blocked::Tuning off) {
    blocked::set_tuning_for_testing(&off);
    const bool none = blocked::l2_column_block<Acc>(m, 10 * pair, k) == 0;
    blocked::set_tuning_for_testing(&t);
    return none;
  };
  blocked::Tuning no_budget = t, small_share = t, two_row_blocks = t;
  no_budget.column_block_l2_bytes = 0;
  small_share.l3_share_bytes = m * k * bytes - 1;
  (std::is_same_v<Acc, double> ? two_row_blocks.f64 : two_row_blocks.f32).mc = 18;
  const int64_t k_beyond_once = blocked::kPackedAOnceBudgets * t.column_block_l2_bytes /
                                (m * bytes) + 1;
  ++g_checks;
  if (!is_off(no_budget) || !is_off(small_share) || !is_off(two_row_blocks) ||
      blocked::l2_column_block<Acc>(m, 10 * pair, k_beyond_once) != 0) {
    fail("l2_column_block: not off without a budget, room for A once or one row block",
         type_name<T>());
  }
  // n: 3 whole blocks and 5 columns; then 16 pairs of columns, rows 32 lines apart (C's
  // rows alias, and stay unstaged).
  const int64_t n = 9 * pair + 5;
  for (Isa isa : isas()) {
    std::vector<Variant> variants = {{isa, Path::packed, 1}, {isa, Path::packed, 2}};
    if constexpr (!is_half_v<T>) variants.push_back({isa, Path::packed, 1, kPrepackDepth});
    check_problem<T>({m, n, k, Layout::row_major, Layout::col_major, true, true}, variants, rng);
    check_problem<T>({m, 16 * pair, k, Layout::col_major, Layout::row_major, false, false},
                     variants, rng);
    check_problem<T>({m, n, one_pass_k, Layout::row_major, Layout::col_major, true, true},
                     variants, rng);
  }
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// A C that asks to be streamed (Epilogue::stream_c). streams_c takes one written in one block
// of depth, of more than stream_c_bytes, its data and row stride whole cache lines, and no
// other. The product is the same with the hint: whole pair blocks streamed (on AVX-512 with
// whole FMAs), a short last row tile, a single last tile, bias and row sums, one and two
// threads and prepacked, on every ISA; and where C is not streamed (rows not aligned, several
// blocks of depth).
template <typename T>
void check_streamed_c(std::mt19937& rng) {
  const auto bytes = static_cast<int64_t>(sizeof(T));
  const int64_t line = blocked::kStreamAlignment / bytes;  // values per cache line
  blocked::Tuning t = blocked::tuning();
  blocked::CacheBlocks& blocks = std::is_same_v<T, double> ? t.f64 : t.f32;
  blocks.kc = 64;
  blocks.one_pass_kc = 64;
  const int64_t m = 51, n = 7 * line, k = 50;  // 4 pair blocks and 3 rows; 3 pairs and a tile
  t.stream_c_bytes = 1;  // every part of the products below
  t.shallow_block_bytes = 0;  // no block written rows outer, which streams nothing
  t.write_bound_depth = 0;
  blocked::set_tuning_for_testing(&t);
  AlignedBuffer storage;
  T* data = static_cast<T*>(storage.reserve(static_cast<size_t>(m * n + 1) * sizeof(T)));
  const OutputMatrix<T> c{data, m, n, n};
  blocked::Tuning just_below = t, equal = t, off = t;
  just_below.stream_c_bytes = m * n * bytes - 1;
  equal.stream_c_bytes = m * n * bytes;
  off.stream_c_bytes = 0;
  const auto streams_with = [&](const blocked::Tuning& tuning, OutputMatrix<T> matrix,
                                int64_t depth) {
    blocked::set_tuning_for_testing(&tuning);
    const bool streams = blocked::streams_c<T>(matrix, depth, blocked::packed_depth<T>(depth));
    blocked::set_tuning_for_testing(&t);
    return streams;
  };
  ++g_checks;
  if (!streams_with(just_below, c, k) || streams_with(just_below, c, 2 * blocks.kc) ||
      streams_with(just_below, {data + 1, m, n, n}, k) ||
      streams_with(just_below, {data, m, n, n + 1}, k) || streams_with(equal, c, k) ||
      streams_with(off, c, k)) {
    fail("streams_c: not exactly the one-pass, large, aligned C", type_name<T>());
  }
  for (Isa isa : isas()) {
    const std::vector<Variant> variants = {{isa, Path::packed, 1, 0, true},
                                           {isa, Path::packed, 2, 0, true},
                                           {isa, Path::packed, 1, kPrepackDepth, true}};
    // dL/dW's layouts (A = G^T) and the forward's; then rows not aligned (ld = n + 2) and
    // several blocks of depth.
    check_problem<T>({m, n, k, Layout::col_major, Layout::row_major, false, true}, variants, rng);
    check_problem<T>({m, n, k, Layout::row_major, Layout::col_major, true, false}, variants, rng);
    check_problem<T>({m - 1, n, k, Layout::col_major, Layout::row_major, true, true}, variants,
                     rng);
    check_problem<T>({m, n, 3 * k, Layout::col_major, Layout::row_major, false, true}, variants,
                     rng);
  }
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// Blocks of B up to write_bound_depth steps deep and within stream_b_bytes are walked rows
// outer (writes_rows_outer), deeper or larger ones columns outer, and 0 leaves only blocks
// within L1. The order of the tiles changes no sum: dL/dW's (A = G^T) and dL/dX's (A = G)
// layouts of 33 to 64 steps have the same bits either way, on every ISA, and are correct.
template <typename T>
void check_write_bound_depth(std::mt19937& rng) {
  blocked::Tuning rows_outer = blocked::tuning(), columns_outer = blocked::tuning();
  rows_outer.write_bound_depth = 64;
  columns_outer.write_bound_depth = 0;
  const int64_t l1 = rows_outer.shallow_block_bytes, l2 = rows_outer.stream_b_bytes;
  blocked::set_tuning_for_testing(&rows_outer);
  ++g_checks;
  if (!blocked::writes_rows_outer(64, l2) || blocked::writes_rows_outer(65, l1 + 1) ||
      blocked::writes_rows_outer(64, l2 + 1) || !blocked::writes_rows_outer(65, l1)) {
    fail("writes_rows_outer: not the blocks up to 64 steps within L2", type_name<T>());
  }
  blocked::set_tuning_for_testing(&columns_outer);
  ++g_checks;
  if (blocked::writes_rows_outer(1, l1 + 1) || !blocked::writes_rows_outer(1, l1)) {
    fail("writes_rows_outer: a write-bound depth of 0 keeps more than L1's blocks",
         type_name<T>());
  }
  // m x n x k: rows of C, its columns (whole pair blocks and an edge), depth.
  const int64_t shapes[][3] = {{150, 200, 33}, {77, 96, 48}, {200, 130, 64}};
  for (Isa isa : isas()) {
    set_active_isa(isa);
    for (const auto& [m, n, k] : shapes) {
      for (Layout a_layout : {Layout::col_major, Layout::row_major}) {
        ++g_checks;
        const Operand<T> a = make_operand<T>(m, k, a_layout, rng);
        const Operand<T> b = make_operand<T>(k, n, Layout::row_major, rng);
        std::vector<T> by_rows(m * n), by_columns(m * n);
        blocked::set_tuning_for_testing(&rows_outer);
        blocked_gemm<T>(a.view, b.view, {by_rows.data(), m, n, n}, Epilogue<T>{}, Threading{});
        blocked::set_tuning_for_testing(&columns_outer);
        blocked_gemm<T>(a.view, b.view, {by_columns.data(), m, n, n}, Epilogue<T>{},
                        Threading{});
        if (std::memcmp(by_rows.data(), by_columns.data(), by_rows.size() * sizeof(T)) != 0) {
          fail("rows outer and columns outer differ", std::string(type_name<T>()) + " " +
                                                          isa_name(isa) + " k " +
                                                          std::to_string(k));
        }
      }
      blocked::set_tuning_for_testing(&rows_outer);
      const std::vector<Variant> variants = {{isa, Path::packed, 1, 0, false},
                                             {isa, Path::packed, 2, 0, true}};
      check_problem<T>({m, n, k, Layout::col_major, Layout::row_major, true, false}, variants,
                       rng);
    }
  }
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// Several rows of parts: the threads pack B once between them, into the calling thread's
// shared buffer, which then holds exactly what prepack_b writes; C has the bits of one
// thread's product (the same blocks of depth, summed in the same order). Each ISA, B in the
// forward and the backward layouts, an n that leaves the last panel short and the column
// shares uneven. An L3 share too small for the packed B: each part packs its own again.
template <typename T>
void check_shared_b(std::mt19937& rng) {
  const int64_t m = 300, n = 301, k = 700;  // 4 threads: 2 x 2 parts of 150 x 144 or 157
  const size_t packed_size = static_cast<size_t>(prepacked_b_size<T>(k, n));
  for (Isa isa : isas()) {
    for (Layout layout : {Layout::col_major, Layout::row_major}) {
      ++g_checks;
      const std::string where = std::string(type_name<T>()) + " " + isa_name(isa) +
                                (layout == Layout::col_major ? " B = W^T" : " B = W");
      set_active_isa(isa);
      // The parts on the packed path, which shares B (the strip path would take those of G·W).
      blocked::Tuning packed_parts = blocked::tuning();
      packed_parts.strip_max_cols = 0;
      blocked::set_tuning_for_testing(&packed_parts);
      const Operand<T> a = make_operand<T>(m, k, Layout::row_major, rng);
      const Operand<T> b = make_operand<T>(k, n, layout, rng);
      std::vector<T> bias(n, from_double<T>(0.25)), one_thread(m * n), four_threads(m * n);
      Epilogue<T> epilogue;
      epilogue.bias = bias.data();
      blocked_gemm<T>(a.view, b.view, {one_thread.data(), m, n, n}, epilogue, Threading{});
      T* shared = blocked::shared_b_buffer<T>(packed_size);
      std::fill(shared, shared + packed_size, from_double<T>(NAN));
      blocked_gemm<T>(a.view, b.view, {four_threads.data(), m, n, n}, epilogue,
                      spawning_threading(4));
      AlignedBuffer expected_storage;
      T* expected = static_cast<T*>(expected_storage.reserve(packed_size * sizeof(T)));
      prepack_b<T>(b.view, prepack_depth<T>(k), expected);
      if (std::memcmp(shared, expected, packed_size * sizeof(T)) != 0) {
        fail("the shared packed B is not prepack_b's", where);
      }
      if (std::memcmp(one_thread.data(), four_threads.data(), one_thread.size() * sizeof(T)) != 0) {
        fail("four threads with a shared B differ from one thread", where);
      }
      blocked::Tuning small_share = blocked::tuning();
      small_share.l3_share_bytes = static_cast<int64_t>(packed_size * sizeof(T)) / 4 - 1;
      blocked::set_tuning_for_testing(&small_share);
      std::fill(shared, shared + packed_size, from_double<T>(NAN));
      blocked_gemm<T>(a.view, b.view, {four_threads.data(), m, n, n}, epilogue,
                      spawning_threading(4));
      blocked::set_tuning_for_testing(nullptr);
      const bool same = std::memcmp(one_thread.data(), four_threads.data(),
                                    one_thread.size() * sizeof(T)) == 0;
      if (!std::isnan(as_double(shared[0])) || !same) {
        fail("a B past the threads' L3 shares is shared, or its product differs", where);
      }
    }
  }
  set_active_isa(detected_isa());
}

// Threads that split k instead of C (blocked_gemm.cpp): G·W of at most 256 rows and 768
// columns whose grid's parts would not take the strip path, in float and double on every ISA,
// with the strip path where AVX-512's FMAs run whole (strip_max_cols 768) and with none (0,
// as on AVX2: the parts of 64 x 768 split k there); 2 and 3 threads, a bias, rows that are no
// whole tile, few rows, an uneven last share: within the float64 reference's bound, and the
// partial products buffer written. Not where the parts stay on the strip path, where a share
// would have fewer than 256 steps, with more rows or columns, or for G^T·X: there the buffer
// keeps its NaNs.
template <typename T>
void check_depth_split(std::mt19937& rng) {
  constexpr int64_t min_cols = blocked::kStripMinStrips * blocked::kStripTileCols<T>;
  struct Case {
    int64_t m, n, k;
    int threads;
    bool strips;  // strip_max_cols 768, else 0
    Layout a_layout;
    bool splits;
  };
  const Layout row = Layout::row_major, col = Layout::col_major;
  const Case cases[] = {{64, min_cols + 64, 1100, 2, true, row, true},
                        {41, min_cols + 8, 999, 3, true, row, true},
                        {8, min_cols + 64, 600, 2, true, row, true},
                        {64, 768, 1024, 2, false, row, true},
                        {64, 768, 1024, 2, true, row, false},
                        {64, min_cols + 64, 500, 2, true, row, false},
                        {300, min_cols, 1024, 2, true, row, false},
                        {64, 769, 1024, 2, false, row, false},
                        {64, min_cols + 64, 1100, 2, true, col, false}};
  for (Isa isa : isas()) {
    for (const Case& c : cases) {
      blocked::Tuning tuning = blocked::tuning();
      tuning.strip_max_cols = c.strips ? 768 : 0;
      blocked::set_tuning_for_testing(&tuning);
      const std::string where = std::string(type_name<T>()) + " " + isa_name(isa) + " " +
                                std::to_string(c.m) + "x" + std::to_string(c.n) + " k=" +
                                std::to_string(c.k) + ", " + std::to_string(c.threads) +
                                " threads, strip_max_cols " + (c.strips ? "768" : "0") +
                                (c.a_layout == col ? ", G^T" : "");
      check_problem<T>({c.m, c.n, c.k, c.a_layout, Layout::row_major, true, false},
                       {{isa, Path::automatic, c.threads}}, rng);
      // The same product again, every shard: whether the threads split k.
      const size_t partial_size = static_cast<size_t>(c.m * c.n * (c.threads - 1));
      T* partials = blocked::partial_products_buffer<T>(partial_size);
      std::fill(partials, partials + partial_size, from_double<T>(NAN));
      const Operand<T> a = make_operand<T>(c.m, c.k, c.a_layout, rng);
      const Operand<T> b = make_operand<T>(c.k, c.n, Layout::row_major, rng);
      std::vector<T> out(static_cast<size_t>(c.m * c.n));
      set_active_isa(isa);
      blocked_gemm<T>(a.view, b.view, {out.data(), c.m, c.n, c.n}, Epilogue<T>{},
                      spawning_threading(c.threads));
      const bool written = !std::isnan(as_double(partials[0])) &&
                           !std::isnan(as_double(partials[partial_size - 1]));
      ++g_checks;
      if (written != c.splits) {
        fail(c.splits ? "k not split between the threads" : "k split between the threads",
             where);
      }
    }
  }
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
}

// B = W^T packed from every start within a cache line, W's rows a multiple of 64 bytes apart
// (there the AVX-512 float pack first reads up to the next line start, packing_avx512.cpp):
// in blocks of depth 45 (a first block to the line start, whole blocks, a last one), 7 and 3
// (a first block alone, or less than one). Every ISA packs the generic ISA's bits.
template <typename T>
void check_pack_line_starts(std::mt19937& rng) {
  constexpr int64_t kLineValues = 64 / sizeof(T);
  const int64_t k = 45, n = 35, ld = 64;
  const size_t packed_size = static_cast<size_t>(prepacked_b_size<T>(k, n));
  AlignedBuffer w_storage, want_storage, got_storage;
  T* w = static_cast<T*>(w_storage.reserve((n * ld + kLineValues) * sizeof(T)));
  T* want = static_cast<T*>(want_storage.reserve(packed_size * sizeof(T)));
  T* got = static_cast<T*>(got_storage.reserve(packed_size * sizeof(T)));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < n * ld + kLineValues; ++i) w[i] = from_double<T>(dist(rng));
  for (int64_t start = 0; start < kLineValues; ++start) {
    const ConstMatrixView<T> b{w + start, k, n, 1, ld};
    for (const int64_t kc : {int64_t{45}, int64_t{7}, int64_t{3}}) {
      set_active_isa(Isa::generic);
      prepack_b<T>(b, kc, want);
      for (Isa isa : isas()) {
        ++g_checks;
        set_active_isa(isa);
        std::fill(got, got + packed_size, from_double<T>(NAN));
        prepack_b<T>(b, kc, got);
        if (std::memcmp(got, want, packed_size * sizeof(T)) != 0) {
          fail("B packed from value " + std::to_string(start) + " of a line, in blocks of " +
                   std::to_string(kc) + " steps, is not the generic ISA's",
               std::string(type_name<T>()) + " " + isa_name(isa));
        }
      }
    }
  }
  set_active_isa(detected_isa());
}

// The depth of the packed path's blocks: k itself up to the one-pass depth, else balanced
// blocks of at most KC; an override of the one-pass depth down to KC splits k past KC.
void test_one_pass_depth() {
  blocked::Tuning t = blocked::model_tuning(model_cases()[0].caches, Isa::avx2, false);
  blocked::set_tuning_for_testing(&t);
  ++g_checks;
  const bool one_pass = blocked::packed_depth<float>(512) == 512 &&
                        blocked::packed_depth<float>(321) == 321 &&
                        blocked::packed_depth<float>(513) == 257 &&
                        blocked::packed_depth<float>(1024) == 256 &&
                        blocked::packed_depth<double>(512) == 512 &&
                        blocked::packed_depth<double>(513) == 171;
  t.f32.one_pass_kc = t.f32.kc;
  const bool split = blocked::packed_depth<float>(321) == 161 &&
                     blocked::packed_depth<float>(320) == 320;
  blocked::set_tuning_for_testing(nullptr);
  if (!one_pass || !split) fail("packed_depth: not the one-pass rule", "block depth");
}

// The threading floor: no part below min_part_flops.
void test_grid_floor() {
  ++g_checks;
  const int64_t flops = 2 * 16 * 128 * 128;  // 524288
  if (blocked::choose_grid(16, 128, 128, 8, 6, 16, flops / 4).parts() != 4 ||
      blocked::choose_grid(16, 128, 128, 8, 6, 16, flops).parts() != 1 ||
      blocked::choose_grid(16, 128, 128, 2, 6, 16, 1).parts() != 2) {
    fail("choose_grid ignores its floor", "partition");
  }
}

// The path choose_path takes for X (m x k, rows contiguous) times W^T (weight_transposed: a
// 512 x k W's view) or a k x 512 W, under the tuning in use. It reads the views' shapes and
// strides, never their values.
template <typename T>
Path path_of(int64_t m, int64_t k, bool weight_transposed) {
  constexpr int64_t n = 512;
  const T* nowhere = nullptr;
  const ConstMatrixView<T> a{nowhere, m, k, k, 1};
  const ConstMatrixView<T> b = weight_transposed ? ConstMatrixView<T>{nowhere, k, n, 1, k}
                                                 : ConstMatrixView<T>{nowhere, k, n, n, 1};
  return blocked::choose_path(a, b, m, n, k);
}

// Calls check(tuning, cpu, isa, where) with the model's tuning of each CPU of model_cases()
// and each ISA in use.
template <typename T, typename Check>
void for_each_model_tuning(const Check& check) {
  for (const ModelCase& c : model_cases()) {
    for (const Isa isa : kAllIsas) {
      const blocked::Tuning t = blocked::model_tuning(c.caches, isa, c.splits_avx512);
      blocked::set_tuning_for_testing(&t);
      check(t, c, isa,
            std::string("choose_path, ") + type_name<T>() + ", " + c.cpu + ", " + isa_name(isa));
    }
  }
  blocked::set_tuning_for_testing(nullptr);
}

// The transposed path's choice (path.cpp): with narrow tiles (AVX2, or AVX-512 split into
// halves), X · W^T whose rows of X fill whole broadcast tiles (or one half-width tile), up to
// transposed_max_rows, at least 256 deep; elsewhere, and without narrow tiles (generic ISA,
// AVX-512 at full width), the other paths.
template <typename T>
void check_transposed_choice() {
  constexpr int64_t tile = blocked::kBroadcastCols<T>;
  for_each_model_tuning<T>([&](const blocked::Tuning& t, const ModelCase& c, Isa isa,
                              const std::string& where) {
    const int64_t max_rows = blocked::transposed_max_rows<T>(t);
    const bool narrow = expected_narrow_tiles(isa, c.splits_avx512).narrow;
    ++g_checks;
    if (narrow != (max_rows >= tile)) fail("transposed rows " + std::to_string(max_rows), where);
    // One half-width tile, whole tiles up to the limit: transposed exactly with narrow tiles
    // (where the interleaved path does not take them first: check_interleaved_choice).
    for (const int64_t m : {blocked::kHalfBroadcastCols<T>, tile, std::max(max_rows, tile)}) {
      if (m <= t.interleaved_max_rows) continue;
      ++g_checks;
      if ((path_of<T>(m, 256, true) == Path::transposed) != narrow) {
        fail(std::to_string(m) + " rows x 256: " + (narrow ? "not " : "") + "transposed", where);
      }
    }
    // Rows not whole tiles, too many rows, too shallow, X beyond L2, B = W (not W^T).
    const int64_t beyond_l2 = t.stream_b_bytes / (tile * int64_t(sizeof(T))) + 1;
    const int64_t too_many = std::max(max_rows, tile) + tile;
    const std::tuple<int64_t, int64_t, bool> others[] = {{tile + 2, 1024, true},
                                                         {too_many, 1024, true},
                                                         {tile, 255, true},
                                                         {tile, beyond_l2, true},
                                                         {tile, 1024, false}};
    for (const auto& [m, k, weight_transposed] : others) {
      ++g_checks;
      if (path_of<T>(m, k, weight_transposed) == Path::transposed) {
        fail(std::to_string(m) + " x " + std::to_string(k) + (weight_transposed ? "" : " (W)") +
                 ": transposed",
             where);
      }
    }
  });
}

// The broadcast path's narrow side (path.cpp): G^T·X from k = 128, its narrower side whole
// tile widths up to 64 values, its wider side's rows shorter than a page (4 KiB), on every
// CPU model and ISA; C^T where the rows are narrower; float and double only.
template <typename T>
void check_narrow_side_choice() {
  constexpr int64_t tile = blocked::kBroadcastCols<T>;
  constexpr int64_t page_values = 4096 / sizeof(T);
  using blocked::NarrowSide;
  const T* nowhere = nullptr;
  for_each_model_tuning<T>([&](const blocked::Tuning&, const ModelCase&, Isa,
                               const std::string& where) {
    struct Case {
      int64_t out, in, k;
      NarrowSide side;
    };
    const Case cases[] = {{2 * tile, 128, 128, NarrowSide::rows},
                          {128, 2 * tile, 8192, NarrowSide::cols},
                          {64, 64, 4096, NarrowSide::cols},
                          {tile, page_values - 1, 128, NarrowSide::rows},
                          {tile, page_values, 4096, NarrowSide::none},
                          {page_values, tile, 4096, NarrowSide::none},
                          {2 * tile, 128, 127, NarrowSide::none},
                          {tile + 2, 128, 4096, NarrowSide::none},
                          {64 + tile, 128, 4096, NarrowSide::none},
                          {128, tile / 2, 4096, NarrowSide::none}};
    for (const Case& c : cases) {
      const std::string shape = std::to_string(c.out) + "x" + std::to_string(c.in) + " k=" +
                                std::to_string(c.k);
      // dL/dW = G^T·X of an out x in weight over k rows of G and X (both row-major).
      const ConstMatrixView<T> g_t{nowhere, c.out, c.k, 1, c.out};
      const ConstMatrixView<T> x{nowhere, c.k, c.in, c.in, 1};
      ++g_checks;
      if (blocked::narrow_side(g_t, x, c.out, c.in, c.k) != c.side) {
        fail("narrow side of G^T·X " + shape, where);
      }
      if (c.side != NarrowSide::none &&
          blocked::choose_path(g_t, x, c.out, c.in, c.k) != Path::broadcast) {
        fail("G^T·X " + shape + " not on the broadcast path", where);
      }
    }
    // The forward's layout, X·W^T, has no narrow side.
    const ConstMatrixView<T> x{nowhere, 64, 4096, 4096, 1};
    const ConstMatrixView<T> w_t{nowhere, 4096, 64, 1, 4096};
    ++g_checks;
    if (blocked::narrow_side(x, w_t, 64, 64, 4096) != NarrowSide::none) {
      fail("X·W^T has a narrow side", where);
    }
  });
}

// The choice for G·W (B = W, rows contiguous) of few rows (path.cpp), on every CPU model with
// its L3 share set to 1 GiB and the strip path off (check_strip_choice). With the few-rows tiles (float and double where
// Tuning::few_rows_tiles is set): up to 64 rows read in place, up to 16 where W is beyond the
// L3 share; 3 and 4 rows in place too where W is beyond L2, not streamed. Otherwise: up to 32
// rows with narrow tiles, else 8, up to 16 of them where W is beyond the L3 share; 3 or 4 rows
// stream a W beyond L2.
// 1 and 2 rows stream it either way.
template <typename T>
void check_few_rows_choice() {
  for_each_model_tuning<T>([](const blocked::Tuning& model, const ModelCase&, Isa,
                              const std::string& where) {
    blocked::Tuning t = model;
    constexpr int64_t kMiB = int64_t{1} << 20;
    t.l3_share_bytes = 1024 * kMiB;
    t.strip_max_cols = 0;
    blocked::set_tuning_for_testing(&t);
    const bool tiles = t.few_rows_tiles > 0 && !is_half_v<T>;
    const int64_t in_place_rows = t.narrow_tiles > 0 ? 32 : 8;
    // The path without the tiles: stream, broadcast (in place) or packed.
    const auto own_path = [&](int64_t m, int64_t w_bytes) {
      if (m <= 2 || (m <= 4 && w_bytes > t.stream_b_bytes)) return Path::stream;
      const bool in_place = m <= in_place_rows && (w_bytes <= t.l3_share_bytes || m <= 16);
      return in_place ? Path::broadcast : Path::packed;
    };
    const std::tuple<int64_t, int64_t, Path> with_tiles[] = {
        {64, 16 * kMiB, Path::broadcast},   {65, 16 * kMiB, Path::packed},
        {64, 1024 * kMiB, Path::broadcast}, {17, 2048 * kMiB, Path::packed},
        {16, 2048 * kMiB, Path::broadcast}, {33, 16 * kMiB, Path::broadcast},
        {9, 64 * kMiB, Path::broadcast},    {3, 64 * kMiB, Path::broadcast},
        {4, 64 * kMiB, Path::broadcast},    {2, 64 * kMiB, Path::stream},
        {8, 2048 * kMiB, Path::broadcast},  {32, 2048 * kMiB, Path::packed}};
    for (const auto& [m, w_bytes, tiles_path] : with_tiles) {
      const int64_t k = w_bytes / (512 * int64_t(sizeof(T)));  // path_of's W: k x 512
      const Path want = tiles ? tiles_path : own_path(m, w_bytes);
      ++g_checks;
      if (path_of<T>(m, k, /*weight_transposed=*/false) != want) {
        fail(std::to_string(m) + " rows x W of " + std::to_string(w_bytes / kMiB) +
                 " MiB: not " + path_name(want),
             where);
      }
    }
  });
}

// AVX-512's few-rows tiles on any AVX-512 host (Tuning::few_rows_tiles set there): G·W of 1
// to 64 rows (one tile of each height, two, several), every width of the last tile of columns
// (one or both vectors masked, the second off), k within one block of 32 steps, over two and
// a short last one, and over many. Then the tiles over a B in cache (direct_gemm.cpp's
// in_cache_tiles) wider than one vector: more rows than 64 times a B copied into rows (X·W^T),
// a narrow side (G^T·X; k from 128) and a narrow B read in place (G·W).
template <typename T>
void check_few_rows_tiles(std::mt19937& rng) {
  if (!isa_supported(Isa::avx512)) return;
  blocked::Tuning t = blocked::tuning_for(Isa::avx512);
  t.few_rows_tiles = 1;
  t.narrow_tiles = 0;
  blocked::set_tuning_for_testing(&t);
  const std::vector<Variant> variants = {{Isa::avx512, Path::broadcast, 1},
                                         {Isa::avx512, Path::automatic, 1}};
  constexpr int64_t width = blocked::kFewRowsTileCols<T>;
  for (const int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 23, 24, 25, 37, 64}) {
    for (const int64_t n : {int64_t{1}, width / 2 - 1, width / 2, width / 2 + 1, width - 1, width,
                            width + 1, 2 * width + 5}) {
      for (const int64_t k : {int64_t{3}, int64_t{32}, int64_t{70}, int64_t{600}}) {
        check_problem<T>({m, n, k, Layout::row_major, Layout::row_major, (m + n) % 2 == 0, false},
                         variants, rng);
      }
    }
  }
  const std::pair<Layout, Layout> in_cache_layouts[] = {{Layout::row_major, Layout::col_major},
                                                        {Layout::col_major, Layout::row_major},
                                                        {Layout::row_major, Layout::row_major}};
  for (const auto& [a_layout, b_layout] : in_cache_layouts) {
    for (const int64_t m : {65, 300}) {
      for (const int64_t n : {width / 2 + 1, width, width + 5, 2 * width}) {
        for (const int64_t k : {int64_t{5}, int64_t{128}, int64_t{300}}) {
          check_problem<T>({m, n, k, a_layout, b_layout, k % 2 == 1, false}, variants, rng);
        }
      }
    }
  }
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// The packed kernels that prefetch the next column step's panels (RegisterKernels::tile_next
// and pair_next), from one row on (Tuning::prefetch_next_min_rows 1) and never: 1 to 2 MR + 1
// rows (whole and short row tiles, the prefetching first two and the later ones), pairs, a
// single tile and a short last one, one and several blocks of depth, packed and prepacked, on
// every ISA.
template <typename T>
void check_prefetch_next(std::mt19937& rng) {
  using Acc = accumulator_t<T>;
  constexpr int64_t mr = blocked::BlockSizes<Acc>::mr, nr = blocked::BlockSizes<Acc>::nr;
  for (const int64_t min_rows : {int64_t{1}, int64_t{1000}}) {
    blocked::Tuning t = blocked::tuning();
    t.prefetch_next_min_rows = min_rows;
    blocked::set_tuning_for_testing(&t);
    for (Isa isa : isas()) {
      std::vector<Variant> variants = {{isa, Path::packed, 1}};
      if constexpr (!is_half_v<T>) variants.push_back({isa, Path::packed, 1, kPrepackDepth});
      for (int64_t m = 1; m <= 2 * mr + 1; ++m) {
        for (const int64_t k : {int64_t{70}, int64_t{700}}) {
          check_problem<T>({m, 5 * nr + 5, k, Layout::row_major, Layout::col_major, m % 2 == 1,
                            false},
                           variants, rng);
        }
      }
    }
  }
  blocked::set_tuning_for_testing(nullptr);
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// Random operands of two broadcast tiles of `rows` x `width` over k steps that should write
// the same bits: A (rows x lda, unit column stride), B (k x ldb), the bias, and C (rows x ldc)
// as `want` and `got`, equal before the tiles run.
template <typename S>
struct TileOperands {
  std::vector<S> a, b;
  std::vector<accumulator_t<S>> bias, want, got;
};
template <typename S>
TileOperands<S> random_tile_operands(std::mt19937& rng, int64_t rows, int64_t width, int64_t k,
                                     int64_t lda, int64_t ldb, int64_t ldc) {
  using Acc = accumulator_t<S>;
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  TileOperands<S> t{std::vector<S>(rows * lda), std::vector<S>(k * ldb),
                    std::vector<Acc>(width), std::vector<Acc>(rows * ldc), {}};
  for (S& value : t.a) value = from_double<S>(dist(rng));
  for (S& value : t.b) value = from_double<S>(dist(rng));
  for (Acc& value : t.bias) value = static_cast<Acc>(dist(rng));
  for (Acc& value : t.want) value = static_cast<Acc>(dist(rng));
  t.got = t.want;
  return t;
}

// The broadcast tiles that also prefetch the next strip of B (Kernels::broadcast_next and
// few_rows_broadcast_next, used on a B read in place): present for the SIMD ISAs (the
// few-rows ones wherever the few-rows tiles are), absent for the portable tiles, and each
// writes the same bits as its plain tile: whole and partial widths, k of 1 to past a
// block, bias or accumulate, a B whose rows hold two strips more to the right.
template <typename S>
void check_next_strip_tiles(std::mt19937& rng) {
  using Acc = accumulator_t<S>;
  const auto compare = [&](blocked::BroadcastTile<S> plain, blocked::BroadcastTile<S> next,
                           int64_t rows, int64_t width, const std::string& where) {
    for (const int64_t k : {int64_t{1}, int64_t{7}, int64_t{33}}) {
      for (const int64_t cols : {width, width - 3}) {
        for (const bool accumulate : {false, true}) {
          const int64_t ldb = 3 * width, ldc = width + 5;
          TileOperands<S> t = random_tile_operands<S>(rng, rows, width, k, k, ldb, ldc);
          const Acc* bias_data = accumulate ? nullptr : t.bias.data();
          plain(k, t.a.data(), k, 1, t.b.data(), ldb, t.want.data(), ldc, cols, bias_data,
                accumulate);
          next(k, t.a.data(), k, 1, t.b.data(), ldb, t.got.data(), ldc, cols, bias_data,
               accumulate);
          ++g_checks;
          for (size_t i = 0; i < t.want.size(); ++i) {
            if (!same_bits(t.want[i], t.got[i])) {
              return fail("next-strip tile differs from its plain tile (k " + std::to_string(k) +
                              ", cols " + std::to_string(cols) + ")",
                          where);
            }
          }
        }
      }
    }
  };
  for (Isa isa : isas()) {
    set_active_isa(isa);
    const blocked::Kernels<S>& kernels = blocked::active_kernels<S>();
    const std::string where = std::string(type_name<S>()) + " isa=" + isa_name(isa);
    const bool simd = isa != Isa::generic;
    for (int r = 0; r < blocked::kBroadcastRows; ++r) {
      ++g_checks;
      if ((kernels.broadcast_next[r] != nullptr) != simd) {
        fail("broadcast_next present where it should not be, or absent", where);
      } else if (simd) {
        compare(kernels.broadcast[r], kernels.broadcast_next[r], r + 1,
                blocked::kBroadcastCols<S>, where + " broadcast rows=" + std::to_string(r + 1));
      }
    }
    for (int r = 0; r < blocked::kFewRowsTileRows; ++r) {
      ++g_checks;
      const bool few_rows = kernels.few_rows_broadcast[r] != nullptr;
      if ((kernels.few_rows_broadcast_next[r] != nullptr) != few_rows) {
        fail("few_rows_broadcast_next not where the few-rows tiles are", where);
      } else if (few_rows) {
        compare(kernels.few_rows_broadcast[r], kernels.few_rows_broadcast_next[r], r + 1,
                blocked::kFewRowsTileCols<S>, where + " few-rows rows=" + std::to_string(r + 1));
      }
    }
  }
  set_active_isa(detected_isa());
}

// The strip path's choice (path.cpp): float or double G·W of kStripMinRows to kStripMaxRows
// rows of G (contiguous along k) and a W of kStripMinStrips strips to Tuning::strip_max_cols
// columns within the L3 share, or of any width up to kStripWideMaxRows rows, on every CPU model
// and ISA (the model's value: 768 where 512-bit FMAs run whole, else 0: none); never fewer or
// more rows, a narrower W, a wider one beyond kStripWideMaxRows rows, a G^T (dL/dW's layout),
// or 16-bit types.
template <typename T>
void check_strip_choice() {
  const T* nowhere = nullptr;
  for_each_model_tuning<T>([&](const blocked::Tuning& t, const ModelCase&, Isa,
                               const std::string& where) {
    const int64_t l3_depth = t.l3_share_bytes / (768 * int64_t(sizeof(T)));
    // W within the L3 share (the smaller shares of the models hold fewer of the cases).
    const auto takes_w = [&](int64_t n, int64_t k) {
      return std::is_same_v<T, blocked::Acc<T>> && t.strip_max_cols > 0 &&
             n * k * int64_t(sizeof(T)) <= t.l3_share_bytes;
    };
    const int64_t min_cols = blocked::kStripMinStrips * blocked::kStripTileCols<T>;
    const int64_t wide_rows = blocked::kStripWideMaxRows;
    const std::tuple<int64_t, int64_t, int64_t, bool> cases[] = {
        {33, 768, 3072, true},      {128, 768, 768, true},       {256, 512, 2048, true},
        {40, min_cols, 4096, true}, {40, min_cols - 1, 4096, false}, {32, 768, 3072, false},
        {257, 768, 3072, false},    {wide_rows + 1, 769, 3072, false},
        {wide_rows, 769, 3072, true}, {33, 4096, 1024, true},    {wide_rows, 1024, 1024, true},
        {wide_rows + 1, 1024, 1024, false}, {64, 768, 2 * l3_depth, false}};
    for (const auto& [m, n, k, in_range] : cases) {
      const bool want = in_range && takes_w(n, k);
      const std::string shape = std::to_string(m) + "x" + std::to_string(n) + " k=" +
                                std::to_string(k);
      const ConstMatrixView<T> g{nowhere, m, k, k, 1};
      const ConstMatrixView<T> w{nowhere, k, n, n, 1};
      ++g_checks;
      if ((blocked::choose_path(g, w, m, n, k) == Path::strip) != want) {
        fail("G·W " + shape + (want ? ": not" : ":") + " on the strip path", where);
      }
      const ConstMatrixView<T> g_t{nowhere, m, k, 1, m};  // A's columns contiguous instead
      ++g_checks;
      if (blocked::choose_path(g_t, w, m, n, k) == Path::strip) {
        fail("A not contiguous along k, " + shape + ": on the strip path", where);
      }
    }
  });
}

// The strip tiles where the kernels have them (float and double with AVX-512): the first row
// tile that copies its strip (Kernels::strip_pack) writes the same bits as the plain 8-row
// tile and copies each step's values of B, for k of 1 to past the prefetch distance, bias or
// accumulate; then the strip path forced and chosen on G·W around its tile and block edges
// (rows 1, 7 to 9, 33, 47 and 300; columns 1, a strip's width and one either side of it, one
// either side of two strips, and 770; k within, at and past the block depth), row- and
// column-major A.
template <typename T>
void check_strip_tiles(std::mt19937& rng) {
  if (!isa_supported(Isa::avx512)) return;
  set_active_isa(Isa::avx512);
  const blocked::Kernels<T>& kernels = blocked::active_kernels<T>();
  const std::string where = std::string(type_name<T>()) + " strip tiles";
  ++g_checks;
  if (kernels.strip_pack == nullptr || kernels.strip[blocked::kStripTileRows - 1] == nullptr) {
    fail("no strip tiles with AVX-512", where);
    set_active_isa(detected_isa());
    return;
  }
  constexpr int64_t rows = blocked::kStripTileRows, width = blocked::kStripTileCols<T>;
  for (const int64_t k : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{40}}) {
    for (const bool accumulate : {false, true}) {
      const int64_t lda = k + 3, ldb = width + 11, ldc = width + 5;
      TileOperands<T> t = random_tile_operands<T>(rng, rows, width, k, lda, ldb, ldc);
      std::vector<T> strip(k * width, T(0));
      const T* bias_data = accumulate ? nullptr : t.bias.data();
      kernels.strip[rows - 1](k, t.a.data(), lda, 1, t.b.data(), ldb, t.want.data(), ldc, width,
                              bias_data, accumulate);
      kernels.strip_pack(k, t.a.data(), lda, 1, t.b.data(), ldb, t.got.data(), ldc, bias_data,
                         accumulate, strip.data());
      const std::string at = where + " (k " + std::to_string(k) + ")";
      ++g_checks;
      for (size_t i = 0; i < t.want.size(); ++i) {
        if (!same_bits(t.want[i], t.got[i])) {
          fail("strip_pack differs from the plain strip tile", at);
          break;
        }
      }
      ++g_checks;
      for (int64_t p = 0; p < k; ++p) {
        if (!std::equal(t.b.begin() + p * ldb, t.b.begin() + p * ldb + width,
                        strip.begin() + p * width)) {
          fail("strip_pack's copy of step " + std::to_string(p) + " differs from B's", at);
          break;
        }
      }
    }
  }
  const std::vector<Variant> variants = {{Isa::avx512, Path::strip, 1},
                                         {Isa::avx512, Path::automatic, 1},
                                         {Isa::avx512, Path::strip, 2}};
  const int64_t depth = blocked::tuning().shallow_block_bytes * 3 / 4 /
                        (width * static_cast<int64_t>(sizeof(T)));
  for (const int64_t m : {1, 7, 8, 9, 33, 47, 300}) {
    for (const int64_t n : {int64_t{1}, width - 1, width, width + 1, 2 * width - 1, 2 * width + 1,
                            int64_t{770}}) {
      for (const int64_t k : {int64_t{5}, depth, depth + 1, 2 * depth + 17}) {
        const Layout a_layout = (m + n + k) % 3 == 0 ? Layout::col_major : Layout::row_major;
        check_problem<T>({m, n, k, a_layout, Layout::row_major, (m + k) % 2 == 0, false},
                         variants, rng);
      }
    }
  }
  set_active_isa(detected_isa());
  blocked::force_path(Path::automatic);
}

// The interleaved path's choice (path.cpp): with AVX-512, float or double X · W^T of 2 to 16
// rows at any depth, up to 64 rows from k = 256, up to 128 from k = 768, and of one row where
// W fills the thread's L3 share, within the model's interleaved_max_rows (128 where 512-bit
// FMAs are split into halves, 32 where they run whole); never more rows, B = W, an X beyond
// L2, 16-bit types, or another ISA.
template <typename T>
void check_interleaved_choice() {
  for_each_model_tuning<T>([](const blocked::Tuning& t, const ModelCase& c, Isa isa,
                              const std::string& where) {
    const bool tiles = isa == Isa::avx512 && std::is_same_v<T, blocked::Acc<T>>;
    const int64_t max_rows = expected_interleaved_rows(c.splits_avx512);
    const int64_t k_from_memory = t.l3_share_bytes / (512 * int64_t(sizeof(T)));
    const int64_t x_beyond_l2 = t.stream_b_bytes / (8 * int64_t(sizeof(T))) + 1;
    const std::tuple<int64_t, int64_t, bool, bool> cases[] = {
        {2, 64, true, tiles},     {8, 1024, true, tiles},   {5, 3, true, tiles},
        {1, 256, true, false},    {1, k_from_memory, true, tiles},
        {9, 1024, true, tiles},   {16, 64, true, tiles},    {17, 255, true, false},
        {17, 256, true, tiles},   {64, 767, true, tiles},   {65, 767, true, false},
        {65, 768, true, tiles},   {128, 768, true, tiles},  {129, 4096, true, false},
        {32, 256, true, tiles},   {33, 768, true, tiles},   {40, 256, true, tiles},
        {41, 1024, true, tiles},  {48, 1024, true, tiles},
        {8, 1024, false, false},  {8, x_beyond_l2, true, false}};
    for (const auto& [m, k, weight_transposed, by_depth] : cases) {
      // X must fit L2 (the smaller L2s of the models hold fewer of the deep, many-row cases).
      const bool interleaved =
          by_depth && m <= max_rows && m * k * int64_t(sizeof(T)) <= t.stream_b_bytes;
      ++g_checks;
      if ((path_of<T>(m, k, weight_transposed) == Path::interleaved) != interleaved) {
        fail(std::to_string(m) + " x " + std::to_string(k) + (weight_transposed ? "" : " (W)") +
                 (interleaved ? ": not" : ":") + " interleaved",
             where);
      }
    }
  });
}

// ---------------------------------------------------------------- timing
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `threads` threads emulated on the calling core (BENCH_ONE_CORE=1), for a machine with
// fewer cores than the partition to study: each part of a parallel loop runs alone and is
// timed, each part's best time over the runs kept (a part is short: one interruption would
// otherwise decide), and the slowest part is the loop's time on `threads` idle cores. That
// counts each part's own packing, edges and the grid's imbalance, not what the cores would
// share (L3, memory bandwidth, the all-core clock).
class OneCoreParts {
 public:
  Threading threading(int threads) {
    Threading threading;
    threading.num_threads = threads;
    threading.parallel_for = [this](int64_t begin, int64_t end,
                                    const std::function<void(int64_t, int64_t)>& body) {
      if (best_.size() <= loop_) best_.emplace_back();
      std::vector<double>& best = best_[loop_++];
      best.resize(static_cast<size_t>(end - begin), 1e30);
      for (int64_t part = begin; part < end; ++part) {
        const auto start = std::chrono::steady_clock::now();
        body(part, part + 1);
        double& part_best = best[static_cast<size_t>(part - begin)];
        part_best = std::min(part_best, seconds_since(start));
      }
    };
    return threading;
  }
  void forget() { best_.clear(); }
  void start_run() { loop_ = 0; }
  // The emulated time of the runs since forget(): the sum over the parallel loops of each
  // one's slowest part; negative if there was none (the product was not split).
  double seconds() const {
    double total = best_.empty() ? -1 : 0;
    for (const std::vector<double>& loop : best_) {
      total += *std::max_element(loop.begin(), loop.end());
    }
    return total;
  }

 private:
  std::vector<std::vector<double>> best_;  // per parallel loop of a run, per part
  size_t loop_ = 0;
};

// The best of at least 3 timed runs (after one untimed) spending about budget_seconds; with
// `parts`, their emulated time where the product was split.
double best_seconds(const std::function<void()>& run, double budget_seconds,
                    OneCoreParts* parts = nullptr) {
  run();
  if (parts != nullptr) parts->forget();
  double best = 1e30, spent = 0;
  int reps = 0;
  while ((spent < budget_seconds || reps < 3) && reps < 100000) {
    if (parts != nullptr) parts->start_run();
    const auto start = std::chrono::steady_clock::now();
    run();
    const double seconds = seconds_since(start);
    best = std::min(best, seconds);
    spent += seconds;
    ++reps;
  }
  if (parts != nullptr && parts->seconds() >= 0) return parts->seconds();
  return best;
}

// The three products of a linear layer, chosen by BENCH_LAYOUT:
//   fwd (default): A = X (m x k, row-major), B = W^T with W (n x k) row-major
//   gi: A = G (m x k) row-major, B = W (k x n) row-major (grad_input)
//   gw: A = G^T with G (k x m) row-major, B = X (k x n) row-major (grad_weight)
template <typename T>
void bench_shape(int64_t m, int64_t n, int64_t k, const Threading& threading, double budget,
                 OneCoreParts* one_core) {
  std::mt19937 rng(1);
  const char* layout_env = std::getenv("BENCH_LAYOUT");
  const std::string layout = layout_env != nullptr ? layout_env : "fwd";
  Operand<T> a = make_operand<T>(m, k, layout == "gw" ? Layout::col_major : Layout::row_major, rng);
  Operand<T> b =
      make_operand<T>(k, n, layout == "fwd" ? Layout::col_major : Layout::row_major, rng);
  std::vector<T> bias(n, from_double<T>(0.5)), out(m * n), row_sums(m);
  Epilogue<T> epilogue;
  if (layout == "fwd") epilogue.bias = bias.data();
  if (layout == "gw") epilogue.a_row_sums = row_sums.data();
  const auto time_on = [&](const Threading& on, OneCoreParts* parts) {
    return best_seconds(
        [&] { blocked_gemm<T>(a.view, b.view, {out.data(), m, n, n}, epilogue, on); }, budget,
        parts);
  };
  const double seconds = time_on(threading, one_core);
  std::printf("%-4s %2d thr  m=%5lld n=%5lld k=%5lld  %10.2f us  %7.2f GFLOP/s",
              type_name<T>(), threading.num_threads, static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), seconds * 1e6,
              2.0 * m * n * k / seconds / 1e9);
  if (one_core != nullptr) {  // parallel efficiency against one thread on the same core
    const double one_thread = time_on(Threading{}, nullptr);
    std::printf("  one core: efficiency %.2f", one_thread / (seconds * threading.num_threads));
  }
  std::printf("\n");
  std::fflush(stdout);
}

int bench(int argc, char** argv) {
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  if (std::getenv("BENCH_NO_PEAK") == nullptr) {
    std::printf("isa %s, FMA peak (1 thread): f32 %.1f GFLOP/s, f64 %.1f GFLOP/s\n",
                isa_name(active_isa()), measure_fma_peak_gflops(false),
                measure_fma_peak_gflops(true));
  }
  OneCoreParts one_core_parts;
  OneCoreParts* one_core = std::getenv("BENCH_ONE_CORE") != nullptr ? &one_core_parts : nullptr;
  SpinPool pool(one_core != nullptr ? 1 : threads);
  const Threading threading = one_core != nullptr ? one_core->threading(threads)
                              : threads > 1       ? pool_threading(pool, threads)
                                                  : Threading{};
  std::vector<std::array<int64_t, 3>> shapes = {  // m (batch), n (out), k (in)
      // (run.sh bench THREADS M N K: one shape)
      {1, 16, 16},     {8, 64, 64},      {16, 128, 128},   {64, 256, 256},   {128, 512, 512},
      {256, 256, 256}, {512, 512, 512},  {1024, 1024, 1024}, {2048, 2048, 2048},
      {127, 511, 255}, {333, 555, 777},  {1, 4096, 4096},  {16, 2048, 2048}, {4, 2048, 4096},
      {4096, 1024, 64}, {64, 1024, 4096}};
  if (argc > 5) shapes = {{std::atoll(argv[3]), std::atoll(argv[4]), std::atoll(argv[5])}};
  if (const char* list = std::getenv("BENCH_SHAPES")) {  // "m,n,k;m,n,k;..."
    shapes.clear();
    long long m, n, k;
    int used = 0;
    while (std::sscanf(list, "%lld,%lld,%lld%n", &m, &n, &k, &used) == 3) {
      shapes.push_back({m, n, k});
      list += used;
      if (*list == ';') ++list;
    }
  }
  const double budget = std::getenv("BENCH_BUDGET") ? std::atof(std::getenv("BENCH_BUDGET")) : 0.3;
  if (const char* path = std::getenv("BENCH_PATH")) {  // packed, dot, broadcast, ...
    const std::string name = path;
    blocked::force_path(name == "packed" ? Path::packed
                        : name == "dot"  ? Path::dot
                        : name == "broadcast" ? Path::broadcast
                        : name == "stream" ? Path::stream
                        : name == "transposed" ? Path::transposed
                        : name == "interleaved" ? Path::interleaved
                        : name == "strip" ? Path::strip
                                                : Path::automatic);
  }
  const char* types = std::getenv("BENCH_TYPES");  // e.g. "f32,bf16"; unset: f32 and f64
  auto wanted = [types](const char* name) {
    return types == nullptr ? std::strcmp(name, "f32") == 0 || std::strcmp(name, "f64") == 0
                            : std::strstr(types, name) != nullptr;
  };
  for (const auto& s : shapes) {
    if (wanted("f32")) bench_shape<float>(s[0], s[1], s[2], threading, budget, one_core);
    if (wanted("bf16")) bench_shape<bfloat16_t>(s[0], s[1], s[2], threading, budget, one_core);
    if (wanted("f16")) bench_shape<float16_t>(s[0], s[1], s[2], threading, budget, one_core);
    if (wanted("f64")) bench_shape<double>(s[0], s[1], s[2], threading, budget, one_core);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return bench(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "active-isa") == 0) {  // for run.sh's EML_OPS_ISA check
    std::printf("%s\n", isa_name(active_isa()));
    return 0;
  }
  std::printf("detected ISA: %s\n", isa_name(detected_isa()));
  test_isa_switching();
  test_run_entry();
  test_block_model();
  test_one_pass_depth();
  test_grid_floor();
  check_transposed_choice<float>();
  check_transposed_choice<double>();
  check_interleaved_choice<float>();
  check_interleaved_choice<double>();
  check_interleaved_choice<bfloat16_t>();
  check_narrow_side_choice<float>();
  check_narrow_side_choice<double>();
  check_few_rows_choice<float>();
  check_few_rows_choice<double>();
  check_few_rows_choice<bfloat16_t>();
  check_strip_choice<float>();
  check_strip_choice<double>();
  check_strip_choice<bfloat16_t>();
  {
    std::mt19937 model_rng(11);
    check_model_blocks<float>(model_rng);
    check_model_blocks<double>(model_rng);
    check_model_blocks<bfloat16_t>(model_rng);
    check_staged_c<float>(model_rng);
    check_staged_c<double>(model_rng);
    check_staged_c<bfloat16_t>(model_rng);
    check_l2_column_block<float>(model_rng);
    check_l2_column_block<double>(model_rng);
    check_l2_column_block<bfloat16_t>(model_rng);
    check_streamed_c<float>(model_rng);
    check_streamed_c<double>(model_rng);
    check_write_bound_depth<float>(model_rng);
    check_write_bound_depth<double>(model_rng);
    check_shared_b<float>(model_rng);
    check_shared_b<double>(model_rng);
    check_depth_split<float>(model_rng);
    check_depth_split<double>(model_rng);
    check_pack_line_starts<float>(model_rng);
    check_pack_line_starts<double>(model_rng);
    check_few_rows_tiles<float>(model_rng);
    check_few_rows_tiles<double>(model_rng);
    check_prefetch_next<float>(model_rng);
    check_prefetch_next<double>(model_rng);
    check_prefetch_next<bfloat16_t>(model_rng);
    check_next_strip_tiles<float>(model_rng);
    check_next_strip_tiles<double>(model_rng);
    check_next_strip_tiles<bfloat16_t>(model_rng);
    check_next_strip_tiles<float16_t>(model_rng);
    check_strip_tiles<float>(model_rng);
    check_strip_tiles<double>(model_rng);
  }
  run_tests<float>();
  run_tests<double>();
  std::mt19937 rng(7);
  check_conversions<bfloat16_t>(rng);
  check_conversions<float16_t>(rng);
  check_exact_rounding<bfloat16_t>(rng);
  check_exact_rounding<float16_t>(rng);
  run_tests<bfloat16_t>();
  run_tests<float16_t>();
  // 16-bit outputs beyond the 8 MiB float buffer: blocks of rows and of columns; shallow
  // products (k <= kShallowK) in blocks within half of L2 (staging_block), one of them wider
  // than such a block.
  const std::vector<Variant> best_and_generic = {{detected_isa(), Path::automatic, 1},
                                                 {detected_isa(), Path::automatic, 2},
                                                 {Isa::generic, Path::automatic, 1}};
  for (const auto& s :
       {std::array<int64_t, 3>{700, 3100, 3}, std::array<int64_t, 3>{150, 15000, 5},
        std::array<int64_t, 3>{3, 300001, 2}}) {
    check_problem<bfloat16_t>({s[0], s[1], s[2], Layout::row_major, Layout::col_major, true, true},
                              best_and_generic, rng);
    check_problem<float16_t>({s[0], s[1], s[2], Layout::col_major, Layout::row_major, true, true},
                             best_and_generic, rng);
  }
  check_long_reductions();
  check_compressed<int8_t>(rng);
  check_compressed<bfloat16_t>(rng);
  check_compressed<float16_t>(rng);
  std::printf("F16C: %s\n", cpu_has_f16c() ? "yes" : "no");
  if (g_failures != 0) {
    std::fprintf(stderr, "%d of %lld checks FAILED\n", g_failures,
                 static_cast<long long>(g_checks));
    return 1;
  }
  if (g_shard.count > 1) {
    std::printf("shard %lld/%lld: ", static_cast<long long>(g_shard.index),
                static_cast<long long>(g_shard.count));
  }
  std::printf("all %lld checks passed\n", static_cast<long long>(g_checks));
  return 0;
}
