// Standalone test (no torch) of the TPP GEMM backend (csrc/gemm/tpp) against a naive
// double-precision reference. Build and run: tests/cpp/run_tpp.sh
//   test_tpp            correctness sweep; non-zero exit on any failure
//   test_tpp --bench    GFLOP/s of the linear layer's three products (1 thread; add
//                       --threads N for more), median of repeated timings
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "../../csrc/gemm/isa.h"
#include "../../csrc/gemm/tpp/tpp_internal.h"

using namespace eml::gemm;

namespace {

// ---------------------------------------------------------------- threading
// Runs the chunks of [begin, end) on `threads` std::threads (the caller takes chunk 0).
Threading std_threading(int threads) {
  Threading t;
  t.num_threads = threads;
  t.parallel_for = [threads](int64_t begin, int64_t end,
                             const std::function<void(int64_t, int64_t)>& body) {
    const int64_t len = end - begin;
    const int64_t chunks = std::min<int64_t>(threads, len);
    std::vector<std::thread> pool;
    for (int64_t i = 1; i < chunks; ++i) {
      const int64_t b = begin + len * i / chunks, e = begin + len * (i + 1) / chunks;
      pool.emplace_back([&body, b, e] { body(b, e); });
    }
    body(begin, begin + len / chunks);
    for (auto& th : pool) th.join();
  };
  return t;
}

// ---------------------------------------------------------------- strided views
enum Layout {
  kRowMajor,     // rs = cols, cs = 1
  kColMajor,     // rs = 1, cs = rows (a transposed view)
  kRowPadded,    // sliced out of a wider row-major matrix
  kColPadded,    // sliced out of a taller column-major matrix
  kStepTwo,      // both strides non-unit (a [::2] slice of a transposed matrix)
  kRowBcast,     // rs = 0: every row the same (expanded)
  kColBcast,     // cs = 0: every column the same
  kScalarBcast,  // rs = cs = 0
  kNumLayouts
};
const char* layout_name(int l) {
  static const char* names[] = {"row", "col", "rowpad", "colpad", "step2", "rowbc", "colbc", "scalar"};
  return names[l];
}

// Memory that ends exactly at an inaccessible page: reading or writing past the end
// of a matrix crashes the test instead of passing unnoticed.
template <typename T>
class Guarded {
 public:
  explicit Guarded(size_t count) : count_(count) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t bytes = (count * sizeof(T) + page - 1) / page * page;
    len_ = bytes + page;
    void* p = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      std::exit(2);
    }
    base_ = static_cast<char*>(p);
    mprotect(base_ + bytes, page, PROT_NONE);
    data_ = reinterpret_cast<T*>(base_ + bytes) - count;
  }
  ~Guarded() { munmap(base_, len_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  T* data() { return data_; }
  size_t size() const { return count_; }
  T& operator[](size_t i) { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + count_; }

 private:
  size_t count_ = 0, len_ = 0;
  char* base_ = nullptr;
  T* data_ = nullptr;
};

template <typename T>
struct Owned {
  explicit Owned(size_t count) : storage(count) {}
  Guarded<T> storage;
  ConstMatrixView<T> view;
};

template <typename T>
std::unique_ptr<Owned<T>> make_matrix(int64_t rows, int64_t cols, int layout, std::mt19937& rng) {
  int64_t rs = 0, cs = 0, offset = 0, size = 0;
  switch (layout) {
    case kRowMajor: rs = cols; cs = 1; break;
    case kColMajor: rs = 1; cs = rows; break;
    case kRowPadded: rs = cols + 5; cs = 1; offset = 3; break;
    case kColPadded: rs = 1; cs = rows + 3; offset = 2; break;
    case kStepTwo: rs = 2; cs = 2 * rows + 1; offset = 1; break;
    case kRowBcast: rs = 0; cs = 1; break;
    case kColBcast: rs = 1; cs = 0; break;
    case kScalarBcast: rs = 0; cs = 0; break;
  }
  // the storage ends right after the view's last element (and a guard page follows)
  if (rows > 0 && cols > 0) size = offset + (rows - 1) * rs + (cols - 1) * cs + 1;
  auto o = std::make_unique<Owned<T>>(size_t(std::max<int64_t>(size, 1)));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (auto& v : o->storage) v = T(dist(rng));
  o->view = {o->storage.data() + offset, rows, cols, rs, cs};
  return o;
}

// ---------------------------------------------------------------- one checked case
struct Case {
  int64_t m, n, k;
  int layout_a, layout_b;
  bool bias, row_sums;
  int threads;
  tpp::Options opt;
  bool use_public_api;  // tpp_gemm() instead of tpp::gemm(..., opt)
};

std::atomic<int> g_failures{0}, g_cases{0};

std::string describe(const Case& cs, const char* type) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "%s m=%lld n=%lld k=%lld A=%s B=%s bias=%d sums=%d threads=%d orient=%d "
                "packP=%d packQ=%d bm=%lld bn=%lld bk=%lld chunk=%lld order=%d avx512=%d "
                "panel=%zu public=%d",
                type, (long long)cs.m, (long long)cs.n, (long long)cs.k, layout_name(cs.layout_a),
                layout_name(cs.layout_b), cs.bias, cs.row_sums, cs.threads, cs.opt.orientation,
                cs.opt.force_pack_p, cs.opt.force_pack_q, (long long)cs.opt.block_m,
                (long long)cs.opt.block_n, (long long)cs.opt.block_k,
                (long long)cs.opt.chunk_k, cs.opt.tile_order, cs.opt.avx512_plan,
                cs.opt.max_panel_bytes, cs.use_public_api);
  return buf;
}

template <typename T>
void run_case(const Case& cs, std::mt19937& rng) {
  ++g_cases;
  const char* type = sizeof(T) == 4 ? "float" : "double";
  auto fail = [&](const char* what, int64_t i, int64_t j, double got, double want) {
    if (g_failures < 25)
      std::printf("FAIL %s: %s at (%lld,%lld): got %.9g want %.9g\n", describe(cs, type).c_str(),
                  what, (long long)i, (long long)j, got, want);
    ++g_failures;
  };
  const auto a_owned = make_matrix<T>(cs.m, cs.k, cs.layout_a, rng);
  const auto b_owned = make_matrix<T>(cs.k, cs.n, cs.layout_b, rng);
  const Owned<T>& A = *a_owned;
  const Owned<T>& B = *b_owned;
  std::vector<T> bias(size_t(cs.n) + 1);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (auto& v : bias) v = T(dist(rng));
  const int64_t pad = (cs.m + cs.n) % 2 ? 3 : 0;  // some outputs have ld > n
  const int64_t ld = cs.n + pad;
  const T sentinel = T(777.0);
  // C ends right after its last element, before a guard page
  Guarded<T> cbuf(size_t(std::max<int64_t>(cs.m > 0 ? (cs.m - 1) * ld + cs.n : 0, 1)));
  std::fill(cbuf.begin(), cbuf.end(), sentinel);
  for (int64_t i = 0; i < cs.m; ++i)  // garbage in C must not leak in: beta = 0
    for (int64_t j = 0; j < cs.n; ++j) cbuf[size_t(i * ld + j)] = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> sums(size_t(cs.m) + 1, sentinel);

  Epilogue<T> ep;
  if (cs.bias) ep.bias = bias.data();
  if (cs.row_sums) ep.a_row_sums = sums.data();
  OutputMatrix<T> c{cbuf.data(), cs.m, cs.n, ld};
  const Threading th = std_threading(cs.threads);
  const bool ok = cs.use_public_api ? tpp_gemm<T>(A.view, B.view, c, ep, th)
                                    : tpp::gemm<T>(A.view, B.view, c, ep, th, cs.opt);
  if (!ok) {
    fail("returned false", -1, -1, 0, 0);
    return;
  }
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double want = 0, mag = 0;
      for (int64_t kk = 0; kk < cs.k; ++kk) {
        const double prod = double(A.view(i, kk)) * double(B.view(kk, j));
        want += prod;
        mag += std::fabs(prod);
      }
      if (cs.bias) {
        want += double(bias[size_t(j)]);
        mag += std::fabs(double(bias[size_t(j)]));
      }
      const double got = double(c(i, j));
      if (!(std::fabs(got - want) <= eps * double(cs.k + 2) * mag + 1e-300)) {
        fail("C", i, j, got, want);
        return;
      }
    }
    for (int64_t j = cs.n; j < ld && i + 1 < cs.m; ++j)
      if (c(i, j) != sentinel) {
        fail("write past C's columns", i, j, double(c(i, j)), double(sentinel));
        return;
      }
  }
  if (cs.row_sums) {
    for (int64_t i = 0; i < cs.m; ++i) {
      double want = 0, mag = 0;
      for (int64_t kk = 0; kk < cs.k; ++kk) {
        want += double(A.view(i, kk));
        mag += std::fabs(double(A.view(i, kk)));
      }
      const double got = double(sums[size_t(i)]);
      if (!(std::fabs(got - want) <= eps * double(cs.k + 2) * mag + 1e-300)) {
        fail("a_row_sums", i, -1, got, want);
        return;
      }
    }
    if (sums[size_t(cs.m)] != sentinel) fail("write past a_row_sums", cs.m, -1, 0, 0);
  }
}

void run_typed(const Case& cs, std::mt19937& rng) {
  run_case<float>(cs, rng);
  run_case<double>(cs, rng);
}

// ---------------------------------------------------------------- failed dispatches
void check(bool ok, const char* what) {
  ++g_cases;
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++g_failures;
  }
}

// The hand-over to the blocked GEMM: small forward products, except few rows times a deep k
// where LIBXSMM runs AVX-512 kernels on full-width FMA units.
void test_kernel_wins() {
  const std::vector<float> x(128 * 512, 1.0f), w(512 * 512, 1.0f);
  const ConstMatrixView<float> small_x{x.data(), 16, 64, 64, 1};
  const ConstMatrixView<float> small_wt{w.data(), 64, 64, 1, 64};  // W^T of a 64 x 64 W
  const ConstMatrixView<float> small_w{w.data(), 64, 64, 64, 1};   // W itself (grad_input)
  check(!tpp_kernel_wins(small_x, small_wt), "small forward, k = 64: blocked");
  check(tpp_kernel_wins(small_x, small_w), "grad_input layout stays with LIBXSMM");
  const bool full_width_avx512 = tpp::jit_avx512() && !cpu_splits_avx512();
  const int64_t rows = kTppAvx512ForwardMaxRows, depth = kTppAvx512ForwardMinDepth;
  const ConstMatrixView<float> few_rows_x{x.data(), rows, depth, depth, 1};
  const ConstMatrixView<float> deep_wt{w.data(), depth, 64, 1, depth};  // W^T of a 64 x k W
  check(tpp_kernel_wins(few_rows_x, deep_wt) == full_width_avx512,
        "few rows, deep k: LIBXSMM where AVX-512 runs at full width");
  const ConstMatrixView<float> more_rows_x{x.data(), rows + 1, depth, depth, 1};
  check(!tpp_kernel_wins(more_rows_x, deep_wt), "more rows: blocked");
  const ConstMatrixView<float> shallow_x{x.data(), rows, depth - 1, depth - 1, 1};
  const ConstMatrixView<float> shallow_wt{w.data(), depth - 1, 64, 1, depth - 1};
  check(!tpp_kernel_wins(shallow_x, shallow_wt), "shallower k: blocked");
  const std::vector<float> big(1024 * 1024, 1.0f);
  const ConstMatrixView<float> big_x{big.data(), 1024, 1024, 1024, 1};
  const ConstMatrixView<float> big_wt{big.data(), 1024, 1024, 1, 1024};
  check(tpp_kernel_wins(big_x, big_wt), "1024^3 forward stays with LIBXSMM");
}

// A key that fails to dispatch answers nullptr without dispatching for the next
// kLookupsBetweenRetries - 1 lookups, then is dispatched again; a GEMM that needs it
// returns false meanwhile (its caller falls back to another backend), then runs.
// Failures are injected through the cache's test seam; the keys and block sizes are
// used nowhere else, so nothing is cached for them yet.
void test_dispatch_retry(std::mt19937& rng) {
  using tpp::testing::dispatch_attempts;
  using tpp::testing::fail_next_dispatches;
  constexpr int kRetry = tpp::kLookupsBetweenRetries;
  {
    tpp::KernelKey key;
    key.m = 8;
    key.n = 5;
    key.k = 3;
    key.lda = 8;
    key.ldb = 3;
    key.ldc = 11;
    const int64_t before = dispatch_attempts();
    fail_next_dispatches(1);
    check(tpp::get_kernel<float>(key) == nullptr, "an injected dispatch failure gives no kernel");
    check(dispatch_attempts() == before + 1, "the failing lookup dispatches once");
    bool answered_null = true;
    for (int lookup = 1; lookup < kRetry; ++lookup)
      answered_null = answered_null && tpp::get_kernel<float>(key) == nullptr;
    check(answered_null, "lookups before the retry answer nullptr");
    check(dispatch_attempts() == before + 1, "lookups before the retry do not dispatch");
    const auto kernel = tpp::get_kernel<float>(key);
    check(kernel != nullptr, "the retry lookup gets the kernel");
    check(dispatch_attempts() == before + 2, "the retry lookup dispatches once");
    check(tpp::get_kernel<float>(key) == kernel && dispatch_attempts() == before + 2,
          "the retried kernel is cached");
  }
  {
    Case cs{};
    cs.m = 37;
    cs.n = 29;
    cs.k = 19;
    cs.threads = 1;
    cs.bias = true;
    cs.opt.orientation = tpp::Options::kZIsC;
    cs.opt.block_m = 24;
    cs.opt.block_n = 11;
    cs.opt.block_k = 19;
    const auto a = make_matrix<float>(cs.m, cs.k, kRowMajor, rng);
    const auto b = make_matrix<float>(cs.k, cs.n, kRowMajor, rng);
    std::vector<float> c(size_t(cs.m * cs.n)), bias(size_t(cs.n), 1.0f);
    Epilogue<float> ep;
    ep.bias = bias.data();
    auto call = [&] {
      return tpp::gemm<float>(a->view, b->view, {c.data(), cs.m, cs.n, cs.n}, ep,
                              std_threading(1), cs.opt);
    };
    const int64_t before = dispatch_attempts();
    fail_next_dispatches(1);
    check(!call(), "a GEMM whose kernel fails to dispatch returns false");
    bool all_false = true;
    for (int lookup = 1; lookup < kRetry; ++lookup) all_false = all_false && !call();
    check(all_false, "the GEMM keeps returning false until the retry");
    check(dispatch_attempts() == before + 1, "GEMM calls before the retry do not dispatch");
    run_case<float>(cs, rng);  // the retry: dispatches, runs and is checked
    check(dispatch_attempts() > before + 1, "the retrying GEMM dispatches its kernels");
  }
}

// ---------------------------------------------------------------- plans and shapes
// The plan's invariants on many shapes, and the L1 rule on one: a column-major A whose
// leading dimension is 4 KiB (every column starts in the same L1 set) is packed, one a
// few lines longer is read in place. Plans read no memory: the views need none.
void test_plans(std::mt19937& rng) {
  static const float nothing[1] = {};
  tpp::Options avx2;
  avx2.avx512_plan = 0;
  avx2.orientation = tpp::Options::kZIsC;  // P = A
  auto plan_col_major_a = [&](int64_t lda) {
    const int64_t m = 64, k = 256, n = 256;
    return tpp::make_plan<float>({nothing, m, k, 1, lda}, {nothing, k, n, n, 1},
                                 {nullptr, m, n, n}, avx2);
  };
  const auto aliasing = plan_col_major_a(1024), spread = plan_col_major_a(1056);
  check(!aliasing.z_is_ct && aliasing.pack_p,
        ("A with a 4 KiB leading dimension is packed: " + tpp::describe(aliasing)).c_str());
  check(!spread.pack_p && !spread.p_main.packed && spread.p_main.lda == 1056,
        ("A with a 4.1 KiB leading dimension is read in place: " + tpp::describe(spread)).c_str());
  auto pick = [&rng](int64_t n) { return 1 + int64_t(rng() % uint64_t(n)); };
  for (int rep = 0; rep < 400; ++rep) {
    const int64_t m = pick(300), n = pick(300), k = pick(300);
    tpp::Options options;
    options.avx512_plan = rep % 2;
    const auto plan = tpp::make_plan<float>({nothing, m, k, k, 1}, {nothing, k, n, 1, k},
                                            {nullptr, m, n, n}, options);
    const int64_t vector = 8;  // floats per AVX2 vector
    const bool ok = plan.M == (plan.z_is_ct ? n : m) && plan.N == (plan.z_is_ct ? m : n) &&
                    plan.K == k && (plan.m_blocks - 1) * plan.bm + plan.m_last == plan.M &&
                    plan.m_last > 0 && plan.m_last <= plan.bm &&
                    (plan.m_last_pad == plan.bm || plan.m_last_pad % vector == 0) &&
                    plan.m_last_pad >= plan.m_last && plan.n_blocks * plan.bn >= plan.N &&
                    (plan.n_blocks - 1) * plan.bn < plan.N &&
                    plan.k_full * plan.bk + plan.k_tail == plan.K && plan.k_tail < plan.bk &&
                    plan.chunk_blocks >= 1 && plan.cost > 0 &&
                    plan.last_to_tile == (!plan.z_is_ct || plan.pads_last_m_block()) &&
                    plan.p_last.packed == (plan.pack_p || plan.pack_p_last);
    check(ok, ("plan invariants: m=" + std::to_string(m) + " n=" + std::to_string(n) +
               " k=" + std::to_string(k) + ": " + tpp::describe(plan))
                  .c_str());
  }
  std::printf("plan of 64x256x256, A column-major, lda 1024: %s\n",
              tpp::describe(aliasing).c_str());
}

// Mismatched shapes throw std::invalid_argument, as in every GEMM of the library; false
// is only for a kernel that cannot be dispatched.
void test_bad_shapes() {
  const float a[6] = {}, b[6] = {};
  float c[6] = {};
  const Threading serial;
  auto throws = [&](ConstMatrixView<float> av, ConstMatrixView<float> bv, OutputMatrix<float> cv) {
    try {
      tpp_gemm<float>(av, bv, cv, {}, serial);
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  check(throws({a, 2, 3, 3, 1}, {b, 2, 3, 3, 1}, {c, 2, 3, 3}), "A's k differs from B's");
  check(throws({a, 2, 3, 3, 1}, {b, 3, 2, 2, 1}, {c, 3, 2, 2}), "C's rows differ from A's");
  check(throws({a, 2, 3, 3, 1}, {b, 3, 2, 2, 1}, {c, 2, 2, 1}), "C's ld below its columns");
  check(throws({a, -1, 3, 3, 1}, {b, 3, 2, 2, 1}, {c, -1, 2, 2}), "a negative size");
}

// ---------------------------------------------------------------- the sweep
int run_tests() {
  if (!tpp_available()) {
    std::printf("FAIL: tpp_available() is false (LIBXSMM JIT unavailable?)\n");
    return 1;
  }
  std::mt19937 rng(12345);
  auto pick = [&rng](int64_t n) { return int64_t(rng() % uint64_t(n)); };
  const int64_t sizes[] = {0,  1,  2,  3,  5,  7,   8,   13,  16,  17,  31,  32,  33,
                           47, 63, 64, 65, 97, 127, 128, 129, 131, 200, 257, 293, 300};
  const int64_t n_sizes = int64_t(sizeof sizes / sizeof sizes[0]);

  // 1. The linear layer's three products on random odd shapes, default options.
  //    forward: A = X (row), B = W^T (col); grad_input: A = G (row), B = W (row);
  //    grad_weight: A = G^T (col), B = X (row).
  const int layer[3][2] = {{kRowMajor, kColMajor}, {kRowMajor, kRowMajor}, {kColMajor, kRowMajor}};
  for (int rep = 0; rep < 300; ++rep) {
    Case cs{};
    cs.m = sizes[pick(n_sizes)];
    cs.n = sizes[pick(n_sizes)];
    cs.k = sizes[pick(n_sizes)];
    const int which = int(pick(3));
    cs.layout_a = layer[which][0];
    cs.layout_b = layer[which][1];
    cs.bias = pick(2);
    cs.row_sums = pick(2);
    cs.threads = 1 + int(pick(2));
    cs.opt.min_parallel_flops = 0;
    cs.use_public_api = pick(4) == 0;
    run_typed(cs, rng);
  }
  // 2. Every pair of layouts x orientation x forced packing, on small odd shapes and
  //    degenerate ones (0, 1, remainders).
  const int64_t shapes[][3] = {{1, 1, 1},  {7, 5, 3},   {0, 5, 3},  {5, 0, 3},   {5, 3, 0},
                               {1, 67, 1}, {67, 1, 1},  {1, 1, 67}, {33, 65, 17}, {40, 37, 71},
                               {2, 3, 1},  {65, 97, 129}};
  for (const auto& s : shapes)
    for (int la = 0; la < kNumLayouts; ++la)
      for (int lb = 0; lb < kNumLayouts; ++lb)
        for (int orient = -1; orient <= 1; ++orient)
          for (int packs = 0; packs < 4; ++packs) {
            if (s[0] * s[1] * s[2] > 100000 && (packs == 1 || packs == 2)) continue;
            Case cs{};
            cs.m = s[0];
            cs.n = s[1];
            cs.k = s[2];
            cs.layout_a = la;
            cs.layout_b = lb;
            cs.bias = (la + lb + packs) % 2;
            cs.row_sums = (la + orient + 1) % 2 == 0;
            cs.threads = 1 + (la + lb + orient + packs) % 2;
            cs.opt.orientation = orient;
            cs.opt.force_pack_p = packs & 1;
            cs.opt.force_pack_q = packs & 2;
            cs.opt.avx512_plan = (la + 2 * lb + packs) % 3 - 1;  // both ISAs' plans anywhere
            cs.opt.min_parallel_flops = 0;
            run_typed(cs, rng);
          }
  // 3. Odd block sizes: K tails (bk not dividing k), M and N remainders, 1-wide blocks.
  // {bm, bn, bk, chunk_k}
  const int64_t blocks[][4] = {{8, 1, 5, 0},    {16, 3, 7, 15},  {24, 7, 64, 64},   {40, 13, 1, 3},
                               {1, 5, 100, 0},  {32, 64, 37, 1}, {8, 8, 8, 40},     {64, 128, 256, 0},
                               {32, 64, 64, 128}, {16, 16, 32, 1000}};
  for (const auto& bl : blocks)
    for (int rep = 0; rep < 24; ++rep) {
      Case cs{};
      cs.m = 1 + pick(150);
      cs.n = 1 + pick(150);
      cs.k = 1 + pick(300);
      cs.layout_a = int(pick(kNumLayouts));
      cs.layout_b = int(pick(kNumLayouts));
      cs.bias = pick(2);
      cs.row_sums = pick(2);
      cs.threads = 1 + int(pick(2));
      cs.opt.orientation = int(pick(3)) - 1;
      cs.opt.force_pack_p = pick(2);
      cs.opt.force_pack_q = pick(2);
      cs.opt.block_m = bl[0];
      cs.opt.block_n = bl[1];
      cs.opt.block_k = bl[2];
      cs.opt.chunk_k = bl[3];
      cs.opt.tile_order = int(pick(3)) - 1;
      cs.opt.avx512_plan = int(pick(3)) - 1;
      if (pick(2)) cs.opt.max_panel_bytes = size_t(1 + pick(64 * 1024));  // 1 or more panels
      cs.opt.min_parallel_flops = 0;
      run_typed(cs, rng);
    }
  // 4. Larger shapes through the public entry point, 1 and 2 threads.
  const int64_t big[][3] = {{300, 293, 257}, {128, 512, 512}, {257, 300, 1}, {3, 511, 509}};
  for (const auto& s : big)
    for (int which = 0; which < 3; ++which)
      for (int threads = 1; threads <= 2; ++threads) {
        Case cs{};
        cs.m = s[0];
        cs.n = s[1];
        cs.k = s[2];
        cs.layout_a = layer[which][0];
        cs.layout_b = layer[which][1];
        cs.bias = true;
        cs.row_sums = true;
        cs.threads = threads;
        cs.use_public_api = true;
        run_typed(cs, rng);
      }
  // 4b. Power-of-two leading dimensions (operands read in place, their columns aliasing
  //     in L1: narrower N blocks in the AVX-512 plan), both ISAs' plans.
  for (int which = 0; which < 3; ++which)
    for (int avx512 = 0; avx512 <= 1; ++avx512) {
      Case cs{};
      cs.m = 16;
      cs.n = 300;
      cs.k = 1024;
      cs.layout_a = layer[which][0];
      cs.layout_b = layer[which][1];
      cs.bias = which == 0;
      cs.row_sums = which == 2;
      cs.threads = 1 + avx512;
      cs.opt.avx512_plan = avx512;
      cs.opt.min_parallel_flops = 0;
      run_typed(cs, rng);
    }
  // 5. Concurrent callers: a shared kernel cache, per-thread scratch memory.
  {
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t)
      callers.emplace_back([t, &sizes, n_sizes] {
        std::mt19937 local(1000 + t);
        for (int rep = 0; rep < 40; ++rep) {
          Case cs{};
          cs.m = sizes[local() % n_sizes];
          cs.n = sizes[local() % n_sizes];
          cs.k = sizes[local() % n_sizes];
          cs.layout_a = int(local() % kNumLayouts);
          cs.layout_b = int(local() % kNumLayouts);
          cs.bias = local() % 2;
          cs.row_sums = local() % 2;
          cs.threads = 1;
          cs.use_public_api = true;
          run_typed(cs, local);
        }
      });
    for (auto& c : callers) c.join();
  }
  // 6. Bounded packing buffers. (a) An operand larger than max_panel_bytes is packed
  // panel by panel, the other one block at a time: the scratch stays near a panel plus a
  // block (a 1024 x 512 packed P alone is 2 MiB). (b) Buffers larger than
  // max_kept_scratch_bytes are freed at the end of the call, smaller ones kept and reused.
  {
    auto kept_after = [&rng](int64_t m, int64_t n, int64_t k, size_t max_panel, size_t max_kept,
                             int tile_order) {
      Case cs{};
      cs.m = m;
      cs.n = n;
      cs.k = k;
      cs.threads = 1;
      cs.bias = true;
      cs.row_sums = true;
      cs.opt.force_pack_p = cs.opt.force_pack_q = true;
      cs.opt.tile_order = tile_order;
      cs.opt.max_panel_bytes = max_panel;
      cs.opt.max_kept_scratch_bytes = max_kept;
      run_case<float>(cs, rng);  // also checks the result
      return tpp::kept_scratch_bytes();
    };
    constexpr size_t kMiB = size_t{1} << 20, kKiB = size_t{1} << 10;
    auto clear = [&] { kept_after(8, 8, 8, 32 * kMiB, 0, -1); };  // frees both buffers
    // blocks of 1024 x 300 x 512: P 32 x 512, Q 512 x 60 floats (at most 128 KiB)
    for (int tile_order = 0; tile_order <= 1; ++tile_order) {
      clear();
      const size_t kept = kept_after(1024, 300, 512, 256 * kKiB, 64 * kMiB, tile_order);
      if (kept == 0 || kept > 256 * kKiB + 128 * kKiB) {
        std::printf("FAIL: %zu bytes of packing buffers with 256 KiB panels (tile order %d)\n",
                    kept, tile_order);
        ++g_failures;
      }
    }
    clear();
    const size_t used = kept_after(1024, 256, 512, 32 * kMiB, 64 * kMiB, -1);
    clear();
    const size_t large = kept_after(1024, 256, 512, 32 * kMiB, 64 * kKiB, -1);
    clear();
    const size_t small = kept_after(64, 64, 64, 32 * kMiB, 64 * kKiB, -1);  // 2 x 16 KiB packed
    const size_t small_again = kept_after(48, 64, 64, 32 * kMiB, 64 * kKiB, -1);
    if (used <= 2 * 64 * kKiB || large > 2 * 64 * kKiB || small == 0 || small_again != small) {
      std::printf("FAIL: kept packing buffers %zu (no cap), %zu (64 KiB cap), then %zu, %zu "
                  "bytes (small, smaller calls)\n", used, large, small, small_again);
      ++g_failures;
    }
  }
  // 7. A failed dispatch is retried, but not on every lookup.
  test_dispatch_retry(rng);
  // 8. Plans, and the shape contract.
  test_plans(rng);
  test_bad_shapes();
  // 9. The hand-over of small forward products to the blocked GEMM.
  test_kernel_wins();
  if (g_failures) {
    std::printf("test_tpp: %d of %d cases FAILED\n", g_failures.load(), g_cases.load());
    return 1;
  }
  std::printf("test_tpp: all %d cases passed\n", g_cases.load());
  return 0;
}

// ---------------------------------------------------------------- timing
template <typename T>
void bench(int threads) {
  const int64_t shapes[][3] = {  // batch, in_features, out_features
      {16, 64, 64},   {16, 256, 256}, {16, 512, 512}, {32, 512, 512}, {64, 128, 128},
      {64, 256, 512}, {128, 64, 64},  {128, 256, 256}, {128, 512, 512}, {100, 300, 200}};
  const char* names[] = {"fwd", "grad_in", "grad_w"};
  std::mt19937 rng(7);
  const Threading th = std_threading(threads);
  std::printf("%s, %d thread(s): GFLOP/s, median/best of 9 (wall clock)\n",
              sizeof(T) == 4 ? "float32" : "float64", threads);
  for (const auto& s : shapes) {
    const int64_t batch = s[0], in = s[1], out = s[2];
    const auto X = make_matrix<T>(batch, in, kRowMajor, rng);
    const auto W = make_matrix<T>(out, in, kRowMajor, rng);
    const auto G = make_matrix<T>(batch, out, kRowMajor, rng);
    std::vector<T> bias(static_cast<size_t>(out), T(0.5));
    std::vector<T> gb(static_cast<size_t>(out));
    std::vector<T> y(size_t(batch * out)), gx(size_t(batch * in)), gw(size_t(out * in));
    std::printf("  batch %3lld in %3lld out %3lld:", (long long)batch, (long long)in, (long long)out);
    for (int which = 0; which < 3; ++which) {
      ConstMatrixView<T> a, b;
      OutputMatrix<T> c;
      Epilogue<T> ep;
      if (which == 0) {
        a = X->view; b = W->view.transposed(); c = {y.data(), batch, out, out}; ep.bias = bias.data();
      } else if (which == 1) {
        a = G->view; b = W->view; c = {gx.data(), batch, in, in};
      } else {
        a = G->view.transposed(); b = X->view; c = {gw.data(), out, in, in}; ep.a_row_sums = gb.data();
      }
      const double flops = 2.0 * double(c.rows) * double(c.cols) * double(a.cols);
      const int reps = std::max(3, int(1e8 / flops));
      std::vector<double> rates;
      for (int trial = 0; trial < 9; ++trial) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r)
          if (!tpp_gemm<T>(a, b, c, ep, th)) std::printf(" (tpp_gemm returned false)");
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rates.push_back(flops * reps / sec * 1e-9);
      }
      std::sort(rates.begin(), rates.end());
      std::printf("  %s %5.1f/%5.1f", names[which], rates[4], rates[8]);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool do_bench = false;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bench")) do_bench = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
  }
  if (do_bench) {
    if (!tpp_available()) {
      std::printf("tpp_available() is false\n");
      return 1;
    }
    bench<float>(threads);
    bench<double>(threads);
    return 0;
  }
  return run_tests();
}
