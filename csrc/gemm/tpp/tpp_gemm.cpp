// The TPP GEMM driver: plans the orientation, blocking and packing of one C = A·B,
// dispatches its few kernels up front, packs one operand in parallel (panel by panel
// when large), then runs batch-reduce GEMMs per output block, output blocks split over
// threads, each thread packing the blocks of the other operand as it reaches them.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "../aligned_buffer.h"
#include "../bias_fill.h"
#include "../cache_info.h"
#include "../int_math.h"
#include "../row_sums.h"
#include "tpp_internal.h"

namespace eml::gemm::tpp {
namespace {

constexpr int64_t kInt32Max = 2147483647;

// Kernel M (the vector dimension), N and K-block sizes, tuned on AVX2 (Zen 3) with
// tests/cpp/run_tpp.sh --bench: M = 4 AVX2 vectors fills LIBXSMM's register blocking;
// N from 64 up and bk from 32 up hardly matter. With AVX-512 kernels (Zen 5) float takes
// M = 64 (4 AVX-512 vectors): longer runs of C per Z column, up to 2x faster where K is
// small and writing C dominates (dL/dW of a small batch), about even elsewhere.
template <typename T>
struct Defaults;
template <>
struct Defaults<float> {
  static constexpr int64_t block_m = 32, block_m_avx512 = 64, block_n = 64, block_k = 64;
};
template <>
struct Defaults<double> {
  static constexpr int64_t block_m = 16, block_m_avx512 = 16, block_n = 64, block_k = 64;
};

// Elements per AVX2 vector. LIBXSMM 1.17 runs the rows of an M block that do not fill
// a whole vector at near-scalar speed, so the last M block is zero-padded to this.
template <typename T>
constexpr int64_t kVector = 32 / int64_t(sizeof(T));

// Bytes of a P block one kernel call streams over (see Plan::chunk_blocks).
constexpr int64_t kChunkBytes = 16 * 1024;

// Relative speed of a kernel whose M block has `rows` rows (padded to whole vectors):
// LIBXSMM keeps up to 4 AVX2 vectors of a column in registers and fewer run slower
// (measured on Zen 3); padding lanes are wasted.
template <typename T>
double m_efficiency(int64_t rows) {
  static constexpr double kByVectors[5] = {1.0, 0.45, 0.8, 0.95, 1.0};
  const int64_t vectors = ceil_div(rows, kVector<T>);
  return kByVectors[std::min<int64_t>(vectors, 4)] * double(rows) / double(vectors * kVector<T>);
}

// This CPU's caches (cache_info.h; assumed where it reports none), fixed for the process:
// L2 per core, L1 data (e.g. 32 KiB, 8-way, 64 B lines: the set pattern repeats every 4 KiB).
const CacheInfo kCaches = or_assumed(cache_info());
const double kL2Bytes = double(kCaches.l2.size_bytes);
const int64_t kL1Line = kCaches.l1d.line_bytes, kL1Sets = kCaches.l1d.sets(),
              kL1Ways = kCaches.l1d.ways, kL1Period = kL1Line * kL1Sets;

// How many set positions addresses `stride_bytes` apart cycle through (1: they all
// start in the same set).
int64_t l1_spread(int64_t stride_bytes) {
  int64_t g = kL1Period, s = stride_bytes % kL1Period;  // gcd
  while (s) {
    const int64_t t = g % s;
    g = s;
    s = t;
  }
  return kL1Period / g;
}

// Reading an operand in place can be slow when its leading dimension is a multiple of
// a large power of two: `count` slices of `slice_bytes` each, `stride_bytes` apart,
// then crowd into a few sets of the L1 data cache and evict each other before they are
// re-read, where a packed copy spreads over all sets. Returns 0 (no conflict),
// 1 (conflict) or 2 (severe: at most 8 sets in use).
int l1_conflicts(int64_t stride_bytes, int64_t slice_bytes, int64_t count) {
  const int64_t lines_per_slice = (slice_bytes + kL1Line - 1) / kL1Line + 1;  // +1: unaligned
  const int64_t sets_used = std::min(kL1Sets, l1_spread(stride_bytes) * lines_per_slice);
  if (sets_used >= kL1Sets || count * lines_per_slice <= sets_used * kL1Ways / 2) return 0;
  return sets_used <= 8 ? 2 : 1;
}

// How many columns `stride_bytes` apart a kernel can read side by side, one cache line
// of each at a time, before their lines evict each other from L1.
int64_t l1_columns(int64_t stride_bytes) {
  return kL1Ways * std::min(kL1Sets, l1_spread(stride_bytes));
}

// Packing what could be read in place pays off only when it is re-read often enough:
// a P block once per few columns of Z (N of them), a Q block once per M block.
bool worth_packing(int conflict, int64_t reuse) {
  return (conflict == 1 && reuse >= 32) || (conflict == 2 && reuse >= 8);
}

thread_local AlignedBuffer t_pack_scratch;   // a panel of the inner operand (calling thread)
thread_local AlignedBuffer t_block_scratch;  // one block of the outer operand (each thread)
thread_local AlignedBuffer t_tile_scratch;   // one Z tile

// Frees the calling thread's packing buffers at the end of a call when they are larger
// than the options allow to keep (also when the call ends by an exception).
class ScratchCap {
 public:
  explicit ScratchCap(size_t max_kept_bytes) : max_kept_bytes_(max_kept_bytes) {}
  ~ScratchCap() {
    if (t_pack_scratch.capacity() > max_kept_bytes_) t_pack_scratch.release();
    if (t_block_scratch.capacity() > max_kept_bytes_) t_block_scratch.release();
  }
  ScratchCap(const ScratchCap&) = delete;
  ScratchCap& operator=(const ScratchCap&) = delete;

 private:
  size_t max_kept_bytes_;
};

// Where the kernels find the M blocks of P: in place or packed ([K][bm], lda = bm).
struct PAccess {
  bool packed = false;
  int64_t lda = 0;
  int64_t stride_a = 0;     // bytes between the K blocks of one kernel call
  int64_t k_step = 0;       // elements between consecutive K blocks
  int64_t tail_offset = 0;  // elements to the K tail block
};

template <typename T>
struct Plan {
  bool z_is_ct = true;
  ConstMatrixView<T> p{}, q{};  // P: M x K, Q: K x N (logical, before any packing)
  int64_t M = 0, N = 0, K = 0;
  int64_t bm = 0, bn = 0, bk = 0;
  int64_t m_blocks = 0, n_blocks = 0, k_full = 0, k_tail = 0, k_blocks = 0;
  int64_t m_last = 0, m_last_pad = 0;  // rows of the last M block, and its kernel's M
  int64_t chunk_blocks = 0;            // K blocks reduced per kernel call
  bool pack_p = false;                 // every P block packed
  bool pack_p_last = false;            // only the last one (padded), the rest in place
  PAccess p_main, p_last;              // M blocks before the last one, and the last one
  bool last_to_tile = false;           // the last M block goes through the Z tile
  bool pack_q = false, q_trans = false;
  int64_t ldb = 0, ldc = 0;
  int64_t stride_b = 0, q_k_step = 0, q_tail_offset = 0;
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
  const int64_t sz = int64_t(sizeof(T));
  const bool avx512 = opt.avx512_plan >= 0 ? opt.avx512_plan == 1 : jit_avx512();
  pl.M = p.rows;
  pl.N = q.cols;
  pl.K = p.cols;
  const int64_t bm_default = avx512 ? Defaults<T>::block_m_avx512 : Defaults<T>::block_m;
  pl.bm = std::min(opt.block_m > 0 ? opt.block_m : bm_default,
                   round_up(pl.M, kVector<T>));
  // N (the broadcast dimension) has no vector granularity: balanced blocks, no thin tail
  const int64_t bn_target = opt.block_n > 0 ? opt.block_n : Defaults<T>::block_n;
  pl.bn = ceil_div(pl.N, ceil_div(pl.N, bn_target));
  const int64_t bk_target = opt.block_k > 0 ? opt.block_k : Defaults<T>::block_k;
  pl.bk = ceil_div(pl.K, ceil_div(pl.K, bk_target));  // balanced K blocks
  pl.m_blocks = ceil_div(pl.M, pl.bm);
  pl.n_blocks = ceil_div(pl.N, pl.bn);
  pl.k_full = pl.K / pl.bk;
  pl.k_tail = pl.K - pl.k_full * pl.bk;
  pl.k_blocks = pl.k_full + (pl.k_tail > 0 ? 1 : 0);
  pl.m_last = pl.M - (pl.m_blocks - 1) * pl.bm;
  pl.m_last_pad = std::max(pl.m_last, std::min(pl.bm, round_up(pl.m_last, kVector<T>)));
  const bool pad_last = pl.m_last_pad != pl.m_last;
  // One kernel call reduces as many K blocks as keep its bm x chunk slice of P in L1
  // while it is re-read for every few columns of Z.
  const int64_t chunk_k = opt.chunk_k > 0 ? opt.chunk_k : kChunkBytes / (pl.bm * sz);
  pl.chunk_blocks = std::max<int64_t>(1, chunk_k / pl.bk);
  const bool many_k = pl.k_full > 1;  // else the K-block strides are never used

  // P packed: [M blocks][K][bm], the rows of a short last block zero-padded.
  PAccess packed;
  packed.packed = true;
  packed.lda = pl.bm;
  packed.stride_a = many_k ? pl.bk * pl.bm * sz : 0;
  packed.k_step = pl.bk * pl.bm;
  packed.tail_offset = pl.k_full * pl.bk * pl.bm;
  pl.p_block_elems = pl.bm * pl.K;
  // P read in place: column-major M x K, lda >= bm. Possible is not always best: the
  // kernel re-reads a P block for every few columns of Z, and when lda is a multiple
  // of a large power of two the block's columns collide in a few L1 sets.
  const int64_t lda = pl.K == 1 ? pl.bm : p.col_stride;
  const bool direct = !opt.force_pack_p && (p.row_stride == 1 || pl.M == 1) && lda >= pl.bm &&
                      lda <= kInt32Max && (!many_k || pl.bk * lda * sz <= kInt32Max) &&
                      !worth_packing(l1_conflicts(lda * sz, pl.bm * sz, std::min(pl.K, chunk_k)),
                                     pl.N);
  if (direct) {
    pl.p_main.lda = lda;
    pl.p_main.stride_a = many_k ? pl.bk * lda * sz : 0;  // K-block strides are bytes
    pl.p_main.k_step = pl.bk * p.col_stride;
    pl.p_main.tail_offset = pl.k_full * pl.bk * p.col_stride;
    pl.pack_p_last = pad_last;
    pl.p_last = pad_last ? packed : pl.p_main;
  } else {
    pl.pack_p = true;
    pl.p_main = pl.p_last = packed;
  }
  // Q read in place: column-major K x N (ldb >= bk), or stored N x K (TRANS_B, ldb >= bn).
  {
    const int64_t ldb_n = pl.N == 1 ? pl.bk : q.col_stride;
    const int64_t ldb_t = pl.K == 1 ? pl.bn : q.row_stride;
    const bool ok_n = (q.row_stride == 1 || pl.K == 1) && ldb_n >= pl.bk && ldb_n <= kInt32Max;
    // TRANS_B reads Q row by row (one row per k), each cache line of a row once per
    // few columns of Z within one kernel call: rows that alias in L1 are evicted in
    // between, so with AVX2 kernels any conflict makes packing worth it. LIBXSMM's
    // AVX-512 kernels (measured on Zen 5) read such rows in place faster than a packed
    // copy is made, unless the copy stays in L2 for many M blocks.
    const bool q_fits_l2 = double(pl.K) * double(pl.N) * double(sz) <= kL2Bytes;
    const bool ok_t = (q.col_stride == 1 || pl.N == 1) && ldb_t >= pl.bn && ldb_t <= kInt32Max &&
                      (!many_k || pl.bk * ldb_t * sz <= kInt32Max) &&
                      ((avx512 && !(q_fits_l2 && pl.m_blocks >= 8)) ||
                       l1_conflicts(ldb_t * sz, pl.bn * sz, std::min(pl.K, chunk_k)) == 0);
    if (!opt.force_pack_q && (ok_n || ok_t)) {
      pl.q_trans = !ok_n;
      pl.ldb = ok_n ? ldb_n : ldb_t;
      // An AVX-512 kernel reads up to ~30 columns of Q side by side (one vector of Z's
      // column each): columns whose lines alias in L1 evict each other before they are
      // re-read for the next k. Fewer columns per block fit (16x2048x2048: 2.7x faster).
      if (ok_n && avx512 && pl.N > 1 && l1_columns(ldb_n * sz) < pl.bn) {
        pl.bn = ceil_div(pl.N, ceil_div(pl.N, l1_columns(ldb_n * sz)));
        pl.n_blocks = ceil_div(pl.N, pl.bn);
      }
      pl.stride_b = !many_k ? 0 : (ok_n ? pl.bk * sz : pl.bk * ldb_t * sz);
      pl.q_k_step = pl.bk * q.row_stride;
      pl.q_tail_offset = pl.k_full * pl.bk * q.row_stride;
    } else {
      pl.pack_q = true;
      pl.ldb = pl.bk;
      pl.stride_b = many_k ? pl.bn * pl.bk * sz : 0;
      pl.q_k_step = pl.bn * pl.bk;
      pl.q_tail_offset = pl.k_full * pl.bn * pl.bk;
      pl.q_block_elems = pl.k_blocks * pl.bn * pl.bk;
    }
  }
  // Z = C^T is written straight into C, except a padded last M block, whose extra rows
  // would land past C's columns: it goes through the tile like every block of Z = C.
  pl.last_to_tile = !z_is_ct || pad_last;
  if (z_is_ct) {
    pl.ldc = pl.N == 1 ? std::max(c.ld, pl.M) : c.ld;  // one column: ldc is never used
  } else {
    pl.ldc = pl.bm;
  }
  // Estimated time, in flops: the kernels' flops scaled by how well each M block fills
  // AVX2 vectors, plus the copies (a transposing copy is strided on one side). AVX-512
  // kernels run about twice as many flops in the time of one copied element.
  const double kCopyFlops = avx512 ? 16 : 8, kTransposeFlops = avx512 ? 40 : 20;
  const double m_cost = double(pl.m_blocks - 1) * double(pl.bm) / m_efficiency<T>(pl.bm) +
                        double(pl.m_last_pad) / m_efficiency<T>(pl.m_last_pad);
  const double p_copy = p.row_stride == 1 ? kCopyFlops : kTransposeFlops;
  const double q_copy = q.row_stride == 1 ? kCopyFlops : kTransposeFlops;
  const double p_packed_rows = pl.pack_p ? double(pl.M) : pl.pack_p_last ? double(pl.m_last) : 0;
  pl.cost = 2.0 * double(pl.N) * double(pl.K) * m_cost + p_copy * p_packed_rows * double(pl.K) +
            (pl.pack_q ? q_copy * double(pl.K) * double(pl.N) : 0.0) +
            (z_is_ct ? (pad_last ? kCopyFlops * double(pl.m_last) * double(pl.N) : 0.0)
                     : kTransposeFlops * double(pl.M) * double(pl.N));
  return pl;
}

// Whether walking M blocks in the outer loop (re-reading Q) moves fewer bytes from
// beyond L2 than walking N blocks outside (re-reading P).
template <typename T>
bool m_blocks_outer(const Plan<T>& pl) {
  const double p_bytes = double(pl.M) * double(pl.K) * sizeof(T);
  const double q_bytes = double(pl.K) * double(pl.N) * sizeof(T);
  const double m_outer = p_bytes + (q_bytes <= kL2Bytes / 2 ? q_bytes : double(pl.m_blocks) * q_bytes);
  const double n_outer = q_bytes + (p_bytes <= kL2Bytes / 2 ? p_bytes : double(pl.n_blocks) * p_bytes);
  return m_outer <= n_outer;
}

// Which blocks are packed when (see gemm()): the operand of the inner loop is re-read
// for every block of the outer one, so its blocks are packed before the GEMMs, by all
// threads, into the calling thread's buffer: in panels of at most max_panel_bytes, which
// is the whole operand unless it is larger. The operand of the outer loop is packed one
// block at a time by the thread that uses it, just before, into a buffer of one block
// per thread. The scratch is so bounded by a panel plus a block (bm x K or K x bn) per
// thread, whatever M and N are. Trade-off: every panel after the first packs the blocks
// of the outer operand again (only operands beyond max_panel_bytes have a second panel).
struct Packing {
  int64_t inner_blocks = 0, outer_blocks = 0;
  bool inner_packed = false;  // some block of the inner operand is packed
  bool only_last_p = false;   // the inner operand is P, and only its (padded) last block is packed
  int64_t panel_blocks = 0;   // inner blocks packed at a time
};

template <typename T>
Packing plan_packing(const Plan<T>& pl, bool m_outer, size_t max_panel_bytes) {
  Packing pk;
  pk.inner_blocks = m_outer ? pl.n_blocks : pl.m_blocks;
  pk.outer_blocks = m_outer ? pl.m_blocks : pl.n_blocks;
  pk.inner_packed = m_outer ? pl.pack_q : pl.pack_p || pl.pack_p_last;
  pk.only_last_p = !m_outer && !pl.pack_p && pl.pack_p_last;
  const int64_t block_bytes =
      std::max<int64_t>(1, (m_outer ? pl.q_block_elems : pl.p_block_elems) * int64_t(sizeof(T)));
  pk.panel_blocks =
      pk.inner_packed && !pk.only_last_p
          ? std::clamp<int64_t>(int64_t(max_panel_bytes) / block_bytes, 1, pk.inner_blocks)
          : pk.inner_blocks;
  return pk;
}

// The batch-reduce kernels one plan runs.
template <typename T>
struct BrgemmKernels {
  // [last M block][last N block]
  BrgemmKernel<T> first[2][2] = {};  // the first K chunk, beta = 0
  BrgemmKernel<T> more[2][2] = {};   // later K chunks (or onto a bias), beta = 1
  BrgemmKernel<T> tail[2][2] = {};   // the K tail, beta = 1
};

// `need_more`: also the accumulating variant of the full-K-block kernels.
template <typename T>
bool dispatch_kernels(const Plan<T>& pl, bool need_more, BrgemmKernels<T>& ks) {
  const int64_t n_last = pl.N - (pl.n_blocks - 1) * pl.bn;
  for (int im = pl.m_blocks > 1 ? 0 : 1; im < 2; ++im) {
    for (int in = pl.n_blocks > 1 ? 0 : 1; in < 2; ++in) {
      const PAccess& pa = im ? pl.p_last : pl.p_main;
      KernelKey key;
      key.m = int32_t(im ? pl.m_last_pad : pl.bm);
      key.n = int32_t(in ? n_last : pl.bn);
      key.lda = int32_t(pa.lda);
      key.ldb = int32_t(pl.ldb);
      key.ldc = int32_t(im && pl.last_to_tile ? pl.bm : pl.ldc);
      key.trans_b = pl.q_trans;
      key.k = int32_t(pl.bk);
      key.stride_a = int32_t(pa.stride_a);
      key.stride_b = int32_t(pl.stride_b);
      key.accumulate = false;
      if (!(ks.first[im][in] = get_kernel<T>(key))) return false;
      if (need_more) {
        key.accumulate = true;
        if (!(ks.more[im][in] = get_kernel<T>(key))) return false;
      }
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
    if (k == 0) fill_with_bias(c, epilogue.bias);
    if (epilogue.a_row_sums) sum_rows(a, epilogue.a_row_sums);
    return true;
  }

  // ---- plan: the orientation with the lower estimated cost ----
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
  // A block of Z = C^T written straight into C gets the bias first and the kernels
  // accumulate onto it (cheaper than a second pass over the block after them). Tile
  // blocks get the bias while being copied out.
  const bool prefill_bias = pl.z_is_ct && epilogue.bias != nullptr;
  BrgemmKernels<T> ks;
  if (!dispatch_kernels(pl, prefill_bias || pl.k_full > pl.chunk_blocks, ks)) return false;

  const bool parallel = threading.num_threads > 1 &&
                        2.0 * double(m) * double(n) * double(k) >= opt.min_parallel_flops;
  // Blocks of the operand of the outer loop are read once, those of the inner one
  // once per outer block: cheap while all of it stays in L2.
  const bool m_outer = opt.tile_order >= 0 ? opt.tile_order == 0 : m_blocks_outer(pl);
  const Packing pk = plan_packing(pl, m_outer, opt.max_panel_bytes);
  const ScratchCap cap(opt.max_kept_scratch_bytes);

  auto p_packed = [&](int64_t mb) {
    return pl.pack_p || (pl.pack_p_last && mb == pl.m_blocks - 1);
  };
  auto pack_p = [&](int64_t mb, T* dst) {
    const bool last = mb == pl.m_blocks - 1;
    pack_p_block(pl.p, mb * pl.bm, last ? pl.m_last : pl.bm, last ? pl.m_last_pad : pl.bm,
                 pl.bm, dst);
  };
  auto pack_q = [&](int64_t nb, T* dst) {
    const int64_t c0 = nb * pl.bn;
    pack_q_block(pl.q, c0, std::min(pl.bn, pl.N - c0), pl.bn, pl.bk, dst);
  };
  const int64_t outer_block_elems = m_outer ? pl.p_block_elems : pl.q_block_elems;
  const int64_t inner_block_elems = m_outer ? pl.q_block_elems : pl.p_block_elems;
  const T* bias = epilogue.bias;
  constexpr int64_t kRowSumChunk = 256;
  const int64_t s_items = epilogue.a_row_sums ? ceil_div(m, kRowSumChunk) : 0;

  for (int64_t i0 = 0; i0 < pk.inner_blocks; i0 += pk.panel_blocks) {
    const int64_t i1 = std::min(pk.inner_blocks, i0 + pk.panel_blocks);
    // ---- pass 1: pack this panel of the inner operand (with the first, sum the rows of A) ----
    // Inner block b is packed into slot b - i0, or slot 0 when only P's last block is.
    const int64_t pack_first = pk.only_last_p ? pl.m_blocks - 1 : i0;
    const int64_t pack_items = pk.inner_packed ? (pk.only_last_p ? 1 : i1 - i0) : 0;
    T* inner_pack = nullptr;
    if (pack_items > 0) {
      inner_pack = static_cast<T*>(
          t_pack_scratch.reserve(size_t(pack_items * inner_block_elems) * sizeof(T)));
    }
    const int64_t sums_now = i0 == 0 ? s_items : 0;
    run_parallel(threading, parallel, 0, pack_items + sums_now, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) {
        if (it < pack_items) {
          T* dst = inner_pack + it * inner_block_elems;
          if (m_outer)
            pack_q(pack_first + it, dst);
          else
            pack_p(pack_first + it, dst);
        } else {
          const int64_t r0 = (it - pack_items) * kRowSumChunk;
          const int64_t r1 = std::min(m, r0 + kRowSumChunk);
          sum_rows(ConstMatrixView<T>{a.data + r0 * a.row_stride, r1 - r0, k, a.row_stride,
                                      a.col_stride},
                   epilogue.a_row_sums + r0);
        }
      }
    });
    auto inner_packed_block = [&](int64_t b) {
      return inner_pack + (pk.only_last_p ? 0 : b - i0) * inner_block_elems;
    };

    // ---- pass 2: batch-reduce GEMMs over this panel's output blocks ----
    const int64_t panel_len = i1 - i0;
    run_parallel(threading, parallel, 0, pk.outer_blocks * panel_len,
                 [&](int64_t begin, int64_t end) {
      T* tile = nullptr;
      if (pl.last_to_tile) {
        tile = static_cast<T*>(t_tile_scratch.reserve(size_t(pl.bm * pl.bn) * sizeof(T)));
      }
      T* outer_pack = nullptr;
      int64_t outer_packed = -1;  // the outer block now in outer_pack
      for (int64_t t = begin; t < end; ++t) {
        const int64_t ob = t / panel_len, ib = i0 + t % panel_len;
        const int64_t mb = m_outer ? ob : ib;
        const int64_t nb = m_outer ? ib : ob;
        const bool ob_packed = m_outer ? p_packed(mb) : pl.pack_q;
        if (ob_packed && ob != outer_packed) {
          if (outer_pack == nullptr) {
            outer_pack = static_cast<T*>(
                t_block_scratch.reserve(size_t(outer_block_elems) * sizeof(T)));
          }
          if (m_outer)
            pack_p(mb, outer_pack);
          else
            pack_q(nb, outer_pack);
          outer_packed = ob;
        }
        const int64_t r0 = mb * pl.bm, c0 = nb * pl.bn;
        const int64_t mi = std::min(pl.bm, pl.M - r0), ni = std::min(pl.bn, pl.N - c0);
        const int im = mb == pl.m_blocks - 1 ? 1 : 0;
        const int in = nb == pl.n_blocks - 1 ? 1 : 0;
        const PAccess& pa = im ? pl.p_last : pl.p_main;
        const T* pp = !pa.packed ? pl.p.data + r0 * pl.p.row_stride
                      : m_outer  ? outer_pack
                                 : inner_packed_block(mb);
        const T* qq = !pl.pack_q ? pl.q.data + c0 * pl.q.col_stride
                      : m_outer  ? inner_packed_block(nb)
                                 : outer_pack;
        const bool to_tile = !pl.z_is_ct || (im && pl.last_to_tile);
        T* z = to_tile ? tile : c.data + c0 * c.ld + r0;
        const bool onto_bias = prefill_bias && !to_tile;
        if (onto_bias) {
          for (int64_t col = 0; col < ni; ++col)
            std::memcpy(z + col * c.ld, bias + r0, size_t(mi) * sizeof(T));
        }
        for (int64_t kb = 0; kb < pl.k_full; kb += pl.chunk_blocks) {
          const auto count =
              static_cast<unsigned long long>(std::min(pl.chunk_blocks, pl.k_full - kb));
          (kb == 0 && !onto_bias ? ks.first : ks.more)[im][in](pp + kb * pa.k_step,
                                                               qq + kb * pl.q_k_step, z, &count);
        }
        if (pl.k_tail > 0) {
          const unsigned long long one = 1;
          ks.tail[im][in](pp + pa.tail_offset, qq + pl.q_tail_offset, z, &one);
        }
        if (!pl.z_is_ct)
          store_transposed(tile, pl.bm, mi, ni, c, r0, c0, bias);
        else if (to_tile)
          store_columns(tile, pl.bm, mi, ni, c, c0, r0, bias);
      }
      if (t_block_scratch.capacity() > opt.max_kept_scratch_bytes) t_block_scratch.release();
    });
  }
  return true;
}

size_t kept_scratch_bytes() { return t_pack_scratch.capacity() + t_block_scratch.capacity(); }

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

template <typename T>
bool tpp_kernel_wins(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  const bool forward = (a.col_stride == 1 || a.cols == 1) && (b.row_stride == 1 || b.rows == 1);
  const double flops = 2.0 * double(a.rows) * double(a.cols) * double(b.cols);
  return !forward || flops > kTppAvx2ForwardMaxFlops || tpp::jit_avx512();
}

template bool tpp_kernel_wins<float>(ConstMatrixView<float>, ConstMatrixView<float>);
template bool tpp_kernel_wins<double>(ConstMatrixView<double>, ConstMatrixView<double>);
template bool tpp_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                               OutputMatrix<double>, const Epilogue<double>&, const Threading&);

}  // namespace eml::gemm
