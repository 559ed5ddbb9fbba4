// The TPP GEMM driver: plans the orientation, blocking and packing of one C = A·B,
// dispatches its few kernels up front, packs in parallel, then runs one batch-reduce
// GEMM per output block, output blocks split over threads.
#include <algorithm>
#include <cstdlib>
#include <new>

#include "tpp_internal.h"

namespace eml::gemm::tpp {
namespace {

constexpr int64_t kInt32Max = 2147483647;

// Kernel M (the vector dimension), N and K-block sizes. M = 4 AVX2 vectors keeps
// LIBXSMM's register blocking full; see the README of the tests for the timings.
template <typename T>
struct Defaults;
template <>
struct Defaults<float> {
  static constexpr int64_t block_m = 32, block_n = 64, block_k = 64;
};
template <>
struct Defaults<double> {
  static constexpr int64_t block_m = 16, block_n = 64, block_k = 64;
};

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Packing an operand that could be read in place only pays off when it is re-read
// often: for P, once per few columns of Z.
constexpr int64_t kMinReuseToPack = 32;

// Whether `k` columns of `col_bytes` each, `stride_bytes` apart, crowd into so few
// sets of the L1 data cache (32 KiB, 8-way, 64 B lines: the set repeats every 4 KiB)
// that they cannot stay resident, while a contiguous copy would spread over all sets.
bool l1_conflicts(int64_t stride_bytes, int64_t col_bytes, int64_t k) {
  constexpr int64_t kLine = 64, kSets = 64, kWays = 8, kPeriod = kLine * kSets;
  const int64_t lines_per_col = (col_bytes + kLine - 1) / kLine + 1;  // +1: unaligned
  int64_t g = kPeriod, s = stride_bytes % kPeriod;  // gcd(stride, period)
  while (s) {
    const int64_t t = g % s;
    g = s;
    s = t;
  }
  const int64_t sets_used = std::min(kSets, (kPeriod / g) * lines_per_col);
  if (sets_used >= kSets) return false;  // spread over the whole cache already
  return k * lines_per_col > sets_used * kWays / 2;
}

// Per-thread, grown-as-needed, 64-byte aligned scratch memory.
class Scratch {
 public:
  ~Scratch() { std::free(ptr_); }
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      std::free(ptr_);
      bytes_ = (bytes + 4095) / 4096 * 4096;
      ptr_ = std::aligned_alloc(64, bytes_);
      if (!ptr_) bytes_ = 0;
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

thread_local Scratch t_pack_scratch;  // packed P and Q of the call made on this thread
thread_local Scratch t_tile_scratch;  // one Z tile (orientation kZIsC)

template <typename T>
struct Plan {
  bool z_is_ct = true;
  ConstMatrixView<T> p{}, q{};  // P: M x K, Q: K x N (logical, before any packing)
  int64_t M = 0, N = 0, K = 0;
  int64_t bm = 0, bn = 0, bk = 0;
  int64_t m_blocks = 0, n_blocks = 0, k_full = 0, k_tail = 0, k_blocks = 0;
  bool pack_p = false, pack_q = false, q_trans = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0;  // bytes between consecutive K blocks
  int64_t p_tail_offset = 0, q_tail_offset = 0;  // elements to the K tail block
  int64_t p_block_elems = 0, q_block_elems = 0;  // packed elements per M / N block
  double cost = 0;
};

template <typename T>
Plan<T> make_plan(bool z_is_ct, ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                  const Options& opt) {
  Plan<T> pl;
  pl.z_is_ct = z_is_ct;
  pl.p = z_is_ct ? b.transposed() : a;
  pl.q = z_is_ct ? a.transposed() : b;
  const auto& p = pl.p;
  const auto& q = pl.q;
  pl.M = p.rows;
  pl.N = q.cols;
  pl.K = p.cols;
  pl.bm = std::min(pl.M, opt.block_m > 0 ? opt.block_m : Defaults<T>::block_m);
  pl.bn = std::min(pl.N, opt.block_n > 0 ? opt.block_n : Defaults<T>::block_n);
  const int64_t bk_target = opt.block_k > 0 ? opt.block_k : Defaults<T>::block_k;
  pl.bk = ceil_div(pl.K, ceil_div(pl.K, bk_target));  // balanced K blocks
  pl.m_blocks = ceil_div(pl.M, pl.bm);
  pl.n_blocks = ceil_div(pl.N, pl.bn);
  pl.k_full = pl.K / pl.bk;
  pl.k_tail = pl.K - pl.k_full * pl.bk;
  pl.k_blocks = pl.k_full + (pl.k_tail > 0 ? 1 : 0);
  const int64_t sz = int64_t(sizeof(T));
  const bool many_k = pl.k_full > 1;  // else the K-block strides are never used

  // P read in place: column-major M x K, lda >= bm. Possible is not always best: the
  // kernel re-reads a P block for every few columns of Z, and when lda is a multiple
  // of a large power of two the block's columns collide in a few L1 sets.
  {
    const int64_t lda = pl.K == 1 ? pl.bm : p.col_stride;
    const bool ok = !opt.force_pack_p && (p.row_stride == 1 || pl.M == 1) && lda >= pl.bm &&
                    lda <= kInt32Max && (!many_k || pl.bk * lda * sz <= kInt32Max) &&
                    !(pl.N >= kMinReuseToPack && l1_conflicts(lda * sz, pl.bm * sz, pl.K));
    if (ok) {
      pl.lda = lda;
      pl.stride_a = many_k ? pl.bk * lda * sz : 0;
      pl.p_tail_offset = pl.k_full * pl.bk * p.col_stride;
    } else {
      pl.pack_p = true;
      pl.lda = pl.bm;
      pl.stride_a = many_k ? pl.bk * pl.bm * sz : 0;
      pl.p_tail_offset = pl.k_full * pl.bk * pl.bm;
      pl.p_block_elems = pl.bm * pl.K;
    }
  }
  // Q read in place: column-major K x N (ldb >= bk), or stored N x K (TRANS_B, ldb >= bn).
  {
    const int64_t ldb_n = pl.N == 1 ? pl.bk : q.col_stride;
    const int64_t ldb_t = pl.K == 1 ? pl.bn : q.row_stride;
    const bool ok_n = (q.row_stride == 1 || pl.K == 1) && ldb_n >= pl.bk && ldb_n <= kInt32Max;
    const bool ok_t = (q.col_stride == 1 || pl.N == 1) && ldb_t >= pl.bn && ldb_t <= kInt32Max &&
                      (!many_k || pl.bk * ldb_t * sz <= kInt32Max);
    if (!opt.force_pack_q && (ok_n || ok_t)) {
      pl.q_trans = !ok_n;
      pl.ldb = ok_n ? ldb_n : ldb_t;
      pl.stride_b = !many_k ? 0 : (ok_n ? pl.bk * sz : pl.bk * ldb_t * sz);
      pl.q_tail_offset = pl.k_full * pl.bk * q.row_stride;
    } else {
      pl.pack_q = true;
      pl.ldb = pl.bk;
      pl.stride_b = many_k ? pl.bn * pl.bk * sz : 0;
      pl.q_tail_offset = pl.k_full * pl.bn * pl.bk;
      pl.q_block_elems = pl.k_blocks * pl.bn * pl.bk;
    }
  }
  if (z_is_ct) {
    pl.ldc = pl.N == 1 ? std::max(c.ld, pl.M) : c.ld;  // one column: ldc is never used
  } else {
    pl.ldc = pl.bm;
  }
  // Cost in elements moved besides the kernels' own reads; a transposing copy counts
  // twice (strided on one side).
  const double p_copy = p.row_stride == 1 ? 1.0 : 2.0;
  const double q_copy = q.row_stride == 1 ? 1.0 : 2.0;
  pl.cost = (pl.pack_p ? p_copy * double(pl.M) * double(pl.K) : 0.0) +
            (pl.pack_q ? q_copy * double(pl.K) * double(pl.N) : 0.0) +
            (z_is_ct ? 0.0 : 1.5 * double(pl.M) * double(pl.N));  // tile is in L1
  return pl;
}

template <typename T>
struct Kernels {
  BrgemmKernel<T> main[2][2] = {};  // [last M block][last N block]
  BrgemmKernel<T> tail[2][2] = {};  // the K tail, accumulating
};

template <typename T>
bool dispatch_kernels(const Plan<T>& pl, Kernels<T>& ks) {
  const int64_t m_last = pl.M - (pl.m_blocks - 1) * pl.bm;
  const int64_t n_last = pl.N - (pl.n_blocks - 1) * pl.bn;
  for (int im = 0; im < 2; ++im) {
    for (int in = 0; in < 2; ++in) {
      KernelKey key;
      key.m = int32_t(im ? m_last : pl.bm);
      key.n = int32_t(in ? n_last : pl.bn);
      key.lda = int32_t(pl.lda);
      key.ldb = int32_t(pl.ldb);
      key.ldc = int32_t(pl.ldc);
      key.trans_b = pl.q_trans;
      key.k = int32_t(pl.bk);
      key.stride_a = int32_t(pl.stride_a);
      key.stride_b = int32_t(pl.stride_b);
      key.accumulate = false;
      if (!(ks.main[im][in] = get_kernel<T>(key))) return false;
      if (pl.k_tail > 0) {
        key.k = int32_t(pl.k_tail);
        key.stride_a = key.stride_b = 0;
        key.accumulate = true;
        if (!(ks.tail[im][in] = get_kernel<T>(key))) return false;
      }
    }
  }
  return true;
}

template <typename T>
void run_parallel(const Threading& threading, bool parallel, int64_t begin, int64_t end,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (begin >= end) return;
  if (parallel)
    threading.run(begin, end, body);
  else
    body(begin, end);
}

}  // namespace

template <typename T>
bool gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
          const Epilogue<T>& epilogue, const Threading& threading, const Options& opt) {
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  if (b.rows != k || c.rows != m || c.cols != n || m < 0 || n < 0 || k < 0) return false;
  if (!init()) return false;
  if (m == 0 || n == 0 || k == 0) {
    if (k == 0) fill_rows(c, 0, m, epilogue.bias);
    if (epilogue.a_row_sums) row_sums(a, 0, m, epilogue.a_row_sums);
    return true;
  }

  // ---- plan: the orientation that moves the fewest extra elements ----
  const bool ct_ok = c.ld <= kInt32Max && (m == 1 || c.ld >= n);
  Plan<T> pl;
  if (opt.orientation == Options::kZIsCT && ct_ok) {
    pl = make_plan(true, a, b, c, opt);
  } else if (opt.orientation == Options::kZIsC || !ct_ok) {
    pl = make_plan(false, a, b, c, opt);
  } else {
    Plan<T> p1 = make_plan(true, a, b, c, opt);
    Plan<T> p2 = make_plan(false, a, b, c, opt);
    pl = p2.cost < p1.cost ? p2 : p1;
  }
  Kernels<T> ks;
  if (!dispatch_kernels(pl, ks)) return false;

  T* pack = nullptr;
  const int64_t p_elems = pl.pack_p ? pl.m_blocks * pl.p_block_elems : 0;
  const int64_t q_elems = pl.pack_q ? pl.n_blocks * pl.q_block_elems : 0;
  if (p_elems + q_elems > 0) {
    pack = static_cast<T*>(t_pack_scratch.get(size_t(p_elems + q_elems + 16) * sizeof(T)));
    if (!pack) return false;
  }
  T* p_pack = pack;
  T* q_pack = pack ? pack + ((p_elems + 15) / 16) * 16 : nullptr;

  const bool parallel =
      threading.num_threads > 1 && 2.0 * double(m) * double(n) * double(k) >= opt.min_parallel_flops;

  // ---- pass 1: pack P and Q blocks, sum the rows of A ----
  constexpr int64_t kRowSumChunk = 256;
  const int64_t p_items = pl.pack_p ? pl.m_blocks : 0;
  const int64_t q_items = pl.pack_q ? pl.n_blocks : 0;
  const int64_t s_items = epilogue.a_row_sums ? ceil_div(m, kRowSumChunk) : 0;
  run_parallel<T>(threading, parallel, 0, p_items + q_items + s_items,
                  [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      if (it < p_items) {
        const int64_t r0 = it * pl.bm;
        pack_p_block(pl.p, r0, std::min(pl.bm, pl.M - r0), pl.bm,
                     p_pack + it * pl.p_block_elems);
      } else if (it < p_items + q_items) {
        const int64_t nb = it - p_items;
        const int64_t c0 = nb * pl.bn;
        pack_q_block(pl.q, c0, std::min(pl.bn, pl.N - c0), pl.bn, pl.bk,
                     q_pack + nb * pl.q_block_elems);
      } else {
        const int64_t r0 = (it - p_items - q_items) * kRowSumChunk;
        const int64_t r1 = std::min(m, r0 + kRowSumChunk);
        row_sums(a, r0, r1, epilogue.a_row_sums + r0);
      }
    }
  });

  // ---- pass 2: one batch-reduce GEMM per output block ----
  // The operand with the larger footprint is walked once (outer loop); the other is
  // re-read from cache.
  const bool m_outer = pl.M * pl.K >= pl.K * pl.N;
  const int64_t tiles = pl.m_blocks * pl.n_blocks;
  const unsigned long long k_count = static_cast<unsigned long long>(pl.k_full);
  const T* bias = epilogue.bias;
  run_parallel<T>(threading, parallel, 0, tiles, [&](int64_t begin, int64_t end) {
    T* tile = nullptr;
    if (!pl.z_is_ct) {
      tile = static_cast<T*>(t_tile_scratch.get(size_t(pl.bm * pl.bn) * sizeof(T)));
      if (!tile) throw std::bad_alloc();
    }
    for (int64_t t = begin; t < end; ++t) {
      const int64_t mb = m_outer ? t / pl.n_blocks : t % pl.m_blocks;
      const int64_t nb = m_outer ? t % pl.n_blocks : t / pl.m_blocks;
      const int64_t r0 = mb * pl.bm, c0 = nb * pl.bn;
      const int64_t mi = std::min(pl.bm, pl.M - r0), ni = std::min(pl.bn, pl.N - c0);
      const int im = mb == pl.m_blocks - 1 ? 1 : 0;
      const int in = nb == pl.n_blocks - 1 ? 1 : 0;
      const T* pp = pl.pack_p ? p_pack + mb * pl.p_block_elems : pl.p.data + r0 * pl.p.row_stride;
      const T* qq = pl.pack_q ? q_pack + nb * pl.q_block_elems : pl.q.data + c0 * pl.q.col_stride;
      T* z = pl.z_is_ct ? c.data + c0 * c.ld + r0 : tile;
      ks.main[im][in](pp, qq, z, &k_count);
      if (pl.k_tail > 0) {
        const unsigned long long one = 1;
        ks.tail[im][in](pp + pl.p_tail_offset, qq + pl.q_tail_offset, z, &one);
      }
      if (pl.z_is_ct) {
        if (bias) {
          const T* bj = bias + r0;
          for (int64_t col = 0; col < ni; ++col) {
            T* row = z + col * c.ld;
            for (int64_t r = 0; r < mi; ++r) row[r] += bj[r];
          }
        }
      } else {
        store_transposed(tile, pl.bm, mi, ni, c, r0, c0, bias);
      }
    }
  });
  return true;
}

template bool gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>, OutputMatrix<float>,
                          const Epilogue<float>&, const Threading&, const Options&);
template bool gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>, OutputMatrix<double>,
                           const Epilogue<double>&, const Threading&, const Options&);

}  // namespace eml::gemm::tpp

namespace eml::gemm {

template <typename T>
bool tpp_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
              const Epilogue<T>& epilogue, const Threading& threading) {
  return tpp::gemm(a, b, c, epilogue, threading, tpp::Options{});
}

template bool tpp_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>, OutputMatrix<float>,
                              const Epilogue<float>&, const Threading&);
template bool tpp_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                               OutputMatrix<double>, const Epilogue<double>&, const Threading&);

}  // namespace eml::gemm
