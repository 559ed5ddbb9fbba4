// The TPP GEMM driver, in steps: the plan (orientation, blocking, how each operand is
// accessed, the estimated cost), the kernels it needs (dispatched up front), then per
// panel of the inner operand a packing pass and an output-block pass. The inner operand
// (walked inside the loop over output blocks) is packed by all threads before the output
// blocks of its panel; each thread packs the blocks of the outer operand as it reaches them.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../aligned_buffer.h"
#include "../bias_fill.h"
#include "../int_math.h"
#include "../isa.h"
#include "../row_sums.h"
#include "tpp_internal.h"

namespace eml::gemm::tpp {
namespace {

constexpr int64_t kInt32Max = 2147483647;

// Elements per AVX2 vector. LIBXSMM 1.17 runs the rows of an M block that do not fill
// a whole vector at near-scalar speed, so the last M block is zero-padded to this.
template <typename T>
constexpr int64_t kVector = 32 / int64_t(sizeof(T));

// ---------------------------------------------------------------- cache model

// Relative speed of a kernel whose M block has `rows` rows (padded to whole vectors):
// padding lanes are wasted.
template <typename T>
double m_efficiency(const Tuning& tuning, int64_t rows) {
  const int64_t vectors = ceil_div(rows, kVector<T>);
  return tuning.m_speed_by_vectors[std::min<int64_t>(vectors, 4)] * double(rows) /
         double(vectors * kVector<T>);
}

// How many set positions addresses `stride_bytes` apart cycle through (1: they all
// start in the same set).
int64_t l1_spread(const Tuning& tuning, int64_t stride_bytes) {
  const int64_t period = tuning.l1_line_bytes * tuning.l1_sets;
  int64_t divisor = period, rest = stride_bytes % period;  // gcd(period, stride)
  while (rest) {
    const int64_t next = divisor % rest;
    divisor = rest;
    rest = next;
  }
  return period / divisor;
}

enum class Conflict { none, some, severe };

// Reading an operand in place can be slow when its leading dimension is a multiple of
// a large power of two: `count` slices of `slice_bytes` each, `stride_bytes` apart,
// then crowd into a few sets of the L1 data cache and evict each other before they are
// re-read, where a packed copy spreads over all sets.
Conflict l1_conflicts(const Tuning& tuning, int64_t stride_bytes, int64_t slice_bytes,
                      int64_t count) {
  const int64_t lines_per_slice = ceil_div(slice_bytes, tuning.l1_line_bytes) + 1;  // unaligned
  const int64_t sets_used =
      std::min(tuning.l1_sets, l1_spread(tuning, stride_bytes) * lines_per_slice);
  if (sets_used >= tuning.l1_sets || count * lines_per_slice <= sets_used * tuning.l1_ways / 2) {
    return Conflict::none;
  }
  return sets_used <= tuning.l1_severe_sets ? Conflict::severe : Conflict::some;
}

// How many columns `stride_bytes` apart a kernel can read side by side, one cache line
// of each at a time, before their lines evict each other from L1.
int64_t l1_columns(const Tuning& tuning, int64_t stride_bytes) {
  return tuning.l1_ways * std::min(tuning.l1_sets, l1_spread(tuning, stride_bytes));
}

// Packing what could be read in place pays off only when it is re-read often enough.
bool worth_packing(const Tuning& tuning, Conflict conflict, int64_t reuse) {
  return (conflict == Conflict::some && reuse >= tuning.pack_reuse_conflict) ||
         (conflict == Conflict::severe && reuse >= tuning.pack_reuse_severe);
}

// ---------------------------------------------------------------- the plan

// The orientation's operands and sizes: Z = C^T reads P = B^T, Q = A^T; Z = C reads A, B.
template <typename T>
Plan<T> oriented(bool z_is_ct, ConstMatrixView<T> a, ConstMatrixView<T> b, const Options& options) {
  Plan<T> plan;
  plan.tuning = options.tuning;
  plan.avx512 = options.avx512_plan >= 0 ? options.avx512_plan == 1 : jit_avx512();
  plan.z_is_ct = z_is_ct;
  plan.p = z_is_ct ? b.transposed() : a;
  plan.q = z_is_ct ? a.transposed() : b;
  plan.M = plan.p.rows;
  plan.N = plan.q.cols;
  plan.K = plan.p.cols;
  return plan;
}

template <typename T>
int64_t default_block_m(const Tuning& tuning, bool avx512) {
  if constexpr (sizeof(T) == 4) {
    return avx512 ? tuning.float_block_m_avx512 : tuning.float_block_m;
  } else {
    return avx512 ? tuning.double_block_m_avx512 : tuning.double_block_m;
  }
}

// Block sizes and counts. N and K blocks are balanced (no thin tail); M blocks are whole
// vectors, the last one zero-padded.
template <typename T>
void choose_blocks(Plan<T>& plan, const Options& options) {
  const Tuning& tuning = plan.tuning;
  const int64_t block_m = options.block_m > 0 ? options.block_m : default_block_m<T>(tuning, plan.avx512);
  plan.bm = std::min(block_m, round_up(plan.M, kVector<T>));
  const int64_t block_n = options.block_n > 0 ? options.block_n : tuning.block_n;
  plan.bn = ceil_div(plan.N, ceil_div(plan.N, block_n));
  const int64_t block_k = options.block_k > 0 ? options.block_k : tuning.block_k;
  plan.bk = ceil_div(plan.K, ceil_div(plan.K, block_k));
  plan.m_blocks = ceil_div(plan.M, plan.bm);
  plan.n_blocks = ceil_div(plan.N, plan.bn);
  plan.k_full = plan.K / plan.bk;
  plan.k_tail = plan.K - plan.k_full * plan.bk;
  plan.k_blocks = plan.k_full + (plan.k_tail > 0 ? 1 : 0);
  plan.m_last = plan.M - (plan.m_blocks - 1) * plan.bm;
  plan.m_last_pad = std::max(plan.m_last, std::min(plan.bm, round_up(plan.m_last, kVector<T>)));
  // One kernel call reduces as many K blocks as keep its bm x chunk slice of P in L1
  // while it is re-read for every few columns of Z.
  plan.chunk_k = options.chunk_k > 0 ? options.chunk_k
                                     : tuning.chunk_bytes / (plan.bm * int64_t(sizeof(T)));
  plan.chunk_blocks = std::max<int64_t>(1, plan.chunk_k / plan.bk);
}

// P packed: [M blocks][K][bm], the rows of a short last block zero-padded.
template <typename T>
PAccess packed_p_access(const Plan<T>& plan) {
  const int64_t element_bytes = int64_t(sizeof(T));
  PAccess access;
  access.packed = true;
  access.lda = plan.bm;
  access.stride_a = plan.many_k_blocks() ? plan.bk * plan.bm * element_bytes : 0;
  access.k_step = plan.bk * plan.bm;
  access.tail_offset = plan.k_full * plan.bk * plan.bm;
  return access;
}

// P read in place (column-major M x K, lda >= bm) or packed. Possible is not always best:
// the kernel re-reads a P block for every few columns of Z, and when lda is a multiple of
// a large power of two the block's columns collide in a few L1 sets.
template <typename T>
void choose_p_access(Plan<T>& plan, const Options& options) {
  const int64_t element_bytes = int64_t(sizeof(T));
  const ConstMatrixView<T>& p = plan.p;
  const PAccess packed = packed_p_access(plan);
  plan.p_block_elems = plan.bm * plan.K;
  const int64_t lda = plan.K == 1 ? plan.bm : p.col_stride;
  const bool in_place =
      !options.force_pack_p && (p.row_stride == 1 || plan.M == 1) && lda >= plan.bm &&
      lda <= kInt32Max && (!plan.many_k_blocks() || plan.bk * lda * element_bytes <= kInt32Max) &&
      !worth_packing(plan.tuning,
                     l1_conflicts(plan.tuning, lda * element_bytes, plan.bm * element_bytes,
                                  std::min(plan.K, plan.chunk_k)),
                     plan.N);
  if (!in_place) {
    plan.pack_p = true;
    plan.p_main = plan.p_last = packed;
    return;
  }
  plan.p_main.lda = lda;
  plan.p_main.stride_a = plan.many_k_blocks() ? plan.bk * lda * element_bytes : 0;
  plan.p_main.k_step = plan.bk * p.col_stride;
  plan.p_main.tail_offset = plan.k_full * plan.bk * p.col_stride;
  plan.pack_p_last = plan.pads_last_m_block();
  plan.p_last = plan.pack_p_last ? packed : plan.p_main;
}

// Q read in place: column-major K x N (ldb >= bk), or stored N x K (TRANS_B, ldb >= bn);
// else packed.
template <typename T>
void choose_q_access(Plan<T>& plan, const Options& options) {
  const int64_t element_bytes = int64_t(sizeof(T));
  const Tuning& tuning = plan.tuning;
  const ConstMatrixView<T>& q = plan.q;
  const bool many_k = plan.many_k_blocks();
  const int64_t ldb_plain = plan.N == 1 ? plan.bk : q.col_stride;
  const int64_t ldb_trans = plan.K == 1 ? plan.bn : q.row_stride;
  const bool plain_ok =
      (q.row_stride == 1 || plan.K == 1) && ldb_plain >= plan.bk && ldb_plain <= kInt32Max;
  // TRANS_B reads Q row by row (one row per k), each cache line of a row once per few
  // columns of Z within one kernel call: rows that alias in L1 are evicted in between,
  // so with AVX2 kernels any conflict makes packing worth it. LIBXSMM's AVX-512 kernels
  // (measured on Zen 5) read such rows in place faster than a packed copy is made,
  // unless the copy stays in L2 for many M blocks.
  const bool q_fits_l2 = double(plan.K) * double(plan.N) * double(element_bytes) <= tuning.l2_bytes;
  const bool trans_ok =
      (q.col_stride == 1 || plan.N == 1) && ldb_trans >= plan.bn && ldb_trans <= kInt32Max &&
      (!many_k || plan.bk * ldb_trans * element_bytes <= kInt32Max) &&
      ((plan.avx512 && !(q_fits_l2 && plan.m_blocks >= 8)) ||
       l1_conflicts(tuning, ldb_trans * element_bytes, plan.bn * element_bytes,
                    std::min(plan.K, plan.chunk_k)) == Conflict::none);
  QAccess& access = plan.q_access;
  if (options.force_pack_q || !(plain_ok || trans_ok)) {
    access.packed = true;
    access.ldb = plan.bk;
    access.stride_b = many_k ? plan.bn * plan.bk * element_bytes : 0;
    access.k_step = plan.bn * plan.bk;
    access.tail_offset = plan.k_full * plan.bn * plan.bk;
    plan.q_block_elems = plan.k_blocks * plan.bn * plan.bk;
    return;
  }
  access.trans = !plain_ok;
  access.ldb = plain_ok ? ldb_plain : ldb_trans;
  // An AVX-512 kernel reads up to ~30 columns of Q side by side (one vector of Z's
  // column each): columns whose lines alias in L1 evict each other before they are
  // re-read for the next k. Fewer columns per block fit (16x2048x2048: 2.7x faster).
  const int64_t columns = l1_columns(tuning, ldb_plain * element_bytes);
  if (plain_ok && plan.avx512 && plan.N > 1 && columns < plan.bn) {
    plan.bn = ceil_div(plan.N, ceil_div(plan.N, columns));
    plan.n_blocks = ceil_div(plan.N, plan.bn);
  }
  access.stride_b = !many_k ? 0 : (plain_ok ? plan.bk * element_bytes : plan.bk * ldb_trans * element_bytes);
  access.k_step = plan.bk * q.row_stride;
  access.tail_offset = plan.k_full * plan.bk * q.row_stride;
}

// Z = C^T is written straight into C, except a padded last M block, whose extra rows
// would land past C's columns: it goes through the tile like every block of Z = C.
template <typename T>
void choose_output(Plan<T>& plan, OutputMatrix<T> c) {
  plan.last_to_tile = !plan.z_is_ct || plan.pads_last_m_block();
  if (plan.z_is_ct) {
    plan.ldc = plan.N == 1 ? std::max(c.ld, plan.M) : c.ld;  // one column: ldc is never used
  } else {
    plan.ldc = plan.bm;
  }
}

// Estimated time, in flops: the kernels' flops scaled by how well each M block fills
// AVX2 vectors, plus the copies (a transposing copy is strided on one side).
template <typename T>
double estimated_cost(const Plan<T>& plan) {
  const Tuning& tuning = plan.tuning;
  const double speed = plan.avx512 ? tuning.avx512_copy_factor : 1.0;
  const double copy = tuning.copy_flops * speed, transpose = tuning.transpose_flops * speed;
  const double m_cost = double(plan.m_blocks - 1) * double(plan.bm) / m_efficiency<T>(tuning, plan.bm) +
                        double(plan.m_last_pad) / m_efficiency<T>(tuning, plan.m_last_pad);
  const double p_copy = plan.p.row_stride == 1 ? copy : transpose;
  const double q_copy = plan.q.row_stride == 1 ? copy : transpose;
  const double p_packed_rows = plan.pack_p        ? double(plan.M)
                               : plan.pack_p_last ? double(plan.m_last)
                                                  : 0.0;
  const double kernels = 2.0 * double(plan.N) * double(plan.K) * m_cost;
  const double packing = p_copy * p_packed_rows * double(plan.K) +
                         (plan.q_access.packed ? q_copy * double(plan.K) * double(plan.N) : 0.0);
  const double output = plan.z_is_ct ? (plan.pads_last_m_block()
                                            ? copy * double(plan.m_last) * double(plan.N)
                                            : 0.0)
                                     : transpose * double(plan.M) * double(plan.N);
  return kernels + packing + output;
}

template <typename T>
Plan<T> plan_for(bool z_is_ct, ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                 const Options& options) {
  Plan<T> plan = oriented(z_is_ct, a, b, options);
  choose_blocks(plan, options);
  choose_p_access(plan, options);
  choose_q_access(plan, options);
  choose_output(plan, c);
  plan.cost = estimated_cost(plan);
  return plan;
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

// Whether walking M blocks in the outer loop (re-reading Q) moves fewer bytes from
// beyond L2 than walking N blocks outside (re-reading P).
template <typename T>
bool m_blocks_outer(const Plan<T>& plan) {
  const double half_l2 = plan.tuning.l2_bytes / 2;
  const double p_bytes = double(plan.M) * double(plan.K) * sizeof(T);
  const double q_bytes = double(plan.K) * double(plan.N) * sizeof(T);
  const double m_outer = p_bytes + (q_bytes <= half_l2 ? q_bytes : double(plan.m_blocks) * q_bytes);
  const double n_outer = q_bytes + (p_bytes <= half_l2 ? p_bytes : double(plan.n_blocks) * p_bytes);
  return m_outer <= n_outer;
}

// Which blocks are packed when: the operand of the inner loop is re-read for every block
// of the outer one, so its blocks are packed before the GEMMs, by all threads, into the
// calling thread's buffer: in panels of at most max_panel_bytes, which is the whole
// operand unless it is larger. The operand of the outer loop is packed one block at a
// time by the thread that uses it, just before, into a buffer of one block per thread.
// The scratch is so bounded by a panel plus a block (bm x K or K x bn) per thread,
// whatever M and N are. Trade-off: every panel after the first packs the blocks of the
// outer operand again (only operands beyond max_panel_bytes have a second panel).
struct Packing {
  bool m_outer = true;        // M blocks in the outer loop (Q inner), else N blocks
  int64_t inner_blocks = 0, outer_blocks = 0;
  bool inner_packed = false;  // some block of the inner operand is packed
  bool only_last_p = false;   // the inner operand is P, and only its (padded) last block is packed
  int64_t panel_blocks = 0;   // inner blocks packed at a time
  int64_t inner_block_elems = 0, outer_block_elems = 0;
};

template <typename T>
Packing plan_packing(const Plan<T>& plan, const Options& options) {
  Packing packing;
  const bool m_outer = options.tile_order >= 0 ? options.tile_order == 0 : m_blocks_outer(plan);
  packing.m_outer = m_outer;
  packing.inner_blocks = m_outer ? plan.n_blocks : plan.m_blocks;
  packing.outer_blocks = m_outer ? plan.m_blocks : plan.n_blocks;
  packing.inner_packed = m_outer ? plan.q_access.packed : plan.pack_p || plan.pack_p_last;
  packing.only_last_p = !m_outer && !plan.pack_p && plan.pack_p_last;
  packing.inner_block_elems = m_outer ? plan.q_block_elems : plan.p_block_elems;
  packing.outer_block_elems = m_outer ? plan.p_block_elems : plan.q_block_elems;
  const int64_t block_bytes =
      std::max<int64_t>(1, packing.inner_block_elems * int64_t(sizeof(T)));
  packing.panel_blocks =
      packing.inner_packed && !packing.only_last_p
          ? std::clamp<int64_t>(int64_t(options.max_panel_bytes) / block_bytes, 1,
                                packing.inner_blocks)
          : packing.inner_blocks;
  return packing;
}

// The batch-reduce kernels one plan runs, [last M block][last N block].
template <typename T>
struct BrgemmKernels {
  BrgemmKernel<T> first[2][2] = {};  // the first K chunk, beta = 0
  BrgemmKernel<T> more[2][2] = {};   // later K chunks (or onto a bias), beta = 1
  BrgemmKernel<T> tail[2][2] = {};   // the K tail, beta = 1
};

// False when LIBXSMM cannot generate one of them. `need_more`: also the accumulating
// variant of the full-K-block kernels.
template <typename T>
bool dispatch_kernels(const Plan<T>& plan, bool need_more, BrgemmKernels<T>& kernels) {
  const int64_t n_last = plan.N - (plan.n_blocks - 1) * plan.bn;
  for (int last_m = plan.m_blocks > 1 ? 0 : 1; last_m < 2; ++last_m) {
    for (int last_n = plan.n_blocks > 1 ? 0 : 1; last_n < 2; ++last_n) {
      const PAccess& p_access = last_m ? plan.p_last : plan.p_main;
      KernelKey key;
      key.m = int32_t(last_m ? plan.m_last_pad : plan.bm);
      key.n = int32_t(last_n ? n_last : plan.bn);
      key.lda = int32_t(p_access.lda);
      key.ldb = int32_t(plan.q_access.ldb);
      key.ldc = int32_t(last_m && plan.last_to_tile ? plan.bm : plan.ldc);
      key.trans_b = plan.q_access.trans;
      key.k = int32_t(plan.bk);
      key.stride_a = int32_t(p_access.stride_a);
      key.stride_b = int32_t(plan.q_access.stride_b);
      key.accumulate = false;
      if (!(kernels.first[last_m][last_n] = get_kernel<T>(key))) return false;
      if (need_more) {
        key.accumulate = true;
        if (!(kernels.more[last_m][last_n] = get_kernel<T>(key))) return false;
      }
      if (plan.k_tail > 0) {
        key.k = int32_t(plan.k_tail);
        key.stride_a = key.stride_b = 0;
        key.accumulate = true;
        if (!(kernels.tail[last_m][last_n] = get_kernel<T>(key))) return false;
      }
    }
  }
  return true;
}

// Rows of A summed per work item of the packing pass.
constexpr int64_t kRowSumChunk = 256;

// One call of tpp::gemm once planned and its kernels dispatched: the packing pass and
// the output-block pass of each panel of the inner operand.
template <typename T>
class Driver {
 public:
  Driver(const Plan<T>& plan, const Packing& packing, const BrgemmKernels<T>& kernels,
         ConstMatrixView<T> a, OutputMatrix<T> c, const Epilogue<T>& epilogue,
         const Threading& threading, bool parallel, bool prefill_bias,
         size_t max_kept_scratch_bytes)
      : plan_(plan), packing_(packing), kernels_(kernels), a_(a), c_(c), epilogue_(epilogue),
        threading_(threading), parallel_(parallel), prefill_bias_(prefill_bias),
        max_kept_scratch_bytes_(max_kept_scratch_bytes) {}

  void run() {
    for (int64_t first = 0; first < packing_.inner_blocks; first += packing_.panel_blocks) {
      const int64_t last = std::min(packing_.inner_blocks, first + packing_.panel_blocks);
      pack_panel(first, last);
      output_block_pass(first, last);
    }
  }

 private:
  void in_parallel(int64_t begin, int64_t end,
                   const std::function<void(int64_t, int64_t)>& body) const {
    if (begin >= end) return;
    if (parallel_) {
      threading_.run(begin, end, body);
    } else {
      body(begin, end);
    }
  }

  bool p_block_packed(int64_t m_block) const {
    return plan_.pack_p || (plan_.pack_p_last && m_block == plan_.m_blocks - 1);
  }

  void pack_p(int64_t m_block, T* dst) const {
    const bool last = m_block == plan_.m_blocks - 1;
    pack_p_block(plan_.p, m_block * plan_.bm, last ? plan_.m_last : plan_.bm,
                 last ? plan_.m_last_pad : plan_.bm, plan_.bm, dst);
  }

  void pack_q(int64_t n_block, T* dst) const {
    const int64_t first_col = n_block * plan_.bn;
    pack_q_block(plan_.q, first_col, std::min(plan_.bn, plan_.N - first_col), plan_.bn,
                 plan_.bk, dst);
  }

  void pack_outer(int64_t outer_block, T* dst) const {
    if (packing_.m_outer) {
      pack_p(outer_block, dst);
    } else {
      pack_q(outer_block, dst);
    }
  }

  void pack_inner(int64_t inner_block, T* dst) const {
    if (packing_.m_outer) {
      pack_q(inner_block, dst);
    } else {
      pack_p(inner_block, dst);
    }
  }

  // sum_k A(i, k) for the rows of one work item.
  void sum_rows_of(int64_t item) const {
    const int64_t first_row = item * kRowSumChunk;
    const int64_t rows = std::min(a_.rows, first_row + kRowSumChunk) - first_row;
    sum_rows(ConstMatrixView<T>{a_.data + first_row * a_.row_stride, rows, a_.cols,
                                a_.row_stride, a_.col_stride},
             epilogue_.a_row_sums + first_row);
  }

  // Packs inner blocks [first, last) (or only P's last block), with the first panel also
  // summing the rows of A: one parallel loop over both kinds of work item. Inner block b
  // is packed into slot b - first, or slot 0 when only P's last block is.
  void pack_panel(int64_t first, int64_t last) {
    panel_first_ = first;
    const int64_t pack_first = packing_.only_last_p ? plan_.m_blocks - 1 : first;
    const int64_t pack_items =
        packing_.inner_packed ? (packing_.only_last_p ? 1 : last - first) : 0;
    panel_ = nullptr;
    if (pack_items > 0) {
      panel_ = static_cast<T*>(t_pack_scratch.reserve(
          size_t(pack_items * packing_.inner_block_elems) * sizeof(T)));
    }
    const int64_t sum_items =
        first == 0 && epilogue_.a_row_sums ? ceil_div(a_.rows, kRowSumChunk) : 0;
    in_parallel(0, pack_items + sum_items, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        if (item < pack_items) {
          pack_inner(pack_first + item, panel_ + item * packing_.inner_block_elems);
        } else {
          sum_rows_of(item - pack_items);
        }
      }
    });
  }

  const T* packed_inner_block(int64_t inner_block) const {
    return panel_ + (packing_.only_last_p ? 0 : inner_block - panel_first_) *
                        packing_.inner_block_elems;
  }

  // Every output block of this panel's inner blocks, split over threads.
  void output_block_pass(int64_t first, int64_t last) {
    const int64_t panel_len = last - first;
    in_parallel(0, packing_.outer_blocks * panel_len, [&](int64_t begin, int64_t end) {
      T* tile = nullptr;
      if (plan_.last_to_tile) {
        tile = static_cast<T*>(t_tile_scratch.reserve(size_t(plan_.bm * plan_.bn) * sizeof(T)));
      }
      T* outer_pack = nullptr;
      int64_t outer_in_pack = -1;  // the outer block now in outer_pack
      for (int64_t item = begin; item < end; ++item) {
        const int64_t outer_block = item / panel_len, inner_block = first + item % panel_len;
        const int64_t m_block = packing_.m_outer ? outer_block : inner_block;
        const int64_t n_block = packing_.m_outer ? inner_block : outer_block;
        const bool outer_packed =
            packing_.m_outer ? p_block_packed(m_block) : plan_.q_access.packed;
        if (outer_packed && outer_block != outer_in_pack) {
          if (outer_pack == nullptr) {
            outer_pack = static_cast<T*>(
                t_block_scratch.reserve(size_t(packing_.outer_block_elems) * sizeof(T)));
          }
          pack_outer(outer_block, outer_pack);
          outer_in_pack = outer_block;
        }
        compute_block(m_block, n_block, outer_pack, tile);
      }
      if (t_block_scratch.capacity() > max_kept_scratch_bytes_) t_block_scratch.release();
    });
  }

  // One bm x bn block of Z: its kernel calls, then (for a tile) the store into C.
  void compute_block(int64_t m_block, int64_t n_block, const T* outer_pack, T* tile) const {
    const int64_t first_row = m_block * plan_.bm, first_col = n_block * plan_.bn;
    const int64_t rows = std::min(plan_.bm, plan_.M - first_row);
    const int64_t cols = std::min(plan_.bn, plan_.N - first_col);
    const int last_m = m_block == plan_.m_blocks - 1 ? 1 : 0;
    const int last_n = n_block == plan_.n_blocks - 1 ? 1 : 0;
    const PAccess& p_access = last_m ? plan_.p_last : plan_.p_main;
    const QAccess& q_access = plan_.q_access;
    const T* p_block = !p_access.packed   ? plan_.p.data + first_row * plan_.p.row_stride
                       : packing_.m_outer ? outer_pack
                                          : packed_inner_block(m_block);
    const T* q_block = !q_access.packed   ? plan_.q.data + first_col * plan_.q.col_stride
                       : packing_.m_outer ? packed_inner_block(n_block)
                                          : outer_pack;
    const bool to_tile = !plan_.z_is_ct || (last_m && plan_.last_to_tile);
    T* z = to_tile ? tile : c_.data + first_col * c_.ld + first_row;
    const bool onto_bias = prefill_bias_ && !to_tile;
    if (onto_bias) {
      for (int64_t col = 0; col < cols; ++col) {
        std::memcpy(z + col * c_.ld, epilogue_.bias + first_row, size_t(rows) * sizeof(T));
      }
    }
    for (int64_t k_block = 0; k_block < plan_.k_full; k_block += plan_.chunk_blocks) {
      const auto count =
          static_cast<unsigned long long>(std::min(plan_.chunk_blocks, plan_.k_full - k_block));
      const auto& kernel = k_block == 0 && !onto_bias ? kernels_.first : kernels_.more;
      kernel[last_m][last_n](p_block + k_block * p_access.k_step,
                             q_block + k_block * q_access.k_step, z, &count);
    }
    if (plan_.k_tail > 0) {
      const unsigned long long one = 1;
      kernels_.tail[last_m][last_n](p_block + p_access.tail_offset,
                                    q_block + q_access.tail_offset, z, &one);
    }
    if (!plan_.z_is_ct) {
      store_transposed(tile, plan_.bm, rows, cols, c_, first_row, first_col, epilogue_.bias);
    } else if (to_tile) {
      store_columns(tile, plan_.bm, rows, cols, c_, first_col, first_row, epilogue_.bias);
    }
  }

  const Plan<T>& plan_;
  const Packing& packing_;
  const BrgemmKernels<T>& kernels_;
  ConstMatrixView<T> a_;
  OutputMatrix<T> c_;
  const Epilogue<T>& epilogue_;
  const Threading& threading_;
  const bool parallel_;
  const bool prefill_bias_;
  const size_t max_kept_scratch_bytes_;
  T* panel_ = nullptr;          // the packed blocks of the current panel
  int64_t panel_first_ = 0;     // the panel's first inner block
};

}  // namespace

template <typename T>
Plan<T> make_plan(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                  const Options& options) {
  // Z = C^T writes into C with ldc = c.ld: a kernel's ldc is 32-bit and at least its M.
  const bool ct_possible = c.ld <= kInt32Max && (a.rows == 1 || c.ld >= b.cols);
  if (options.orientation == Options::kZIsCT && ct_possible) {
    return plan_for(true, a, b, c, options);
  }
  if (options.orientation == Options::kZIsC || !ct_possible) {
    return plan_for(false, a, b, c, options);
  }
  Plan<T> z_is_ct = plan_for(true, a, b, c, options);
  Plan<T> z_is_c = plan_for(false, a, b, c, options);
  return z_is_c.cost < z_is_ct.cost ? z_is_c : z_is_ct;
}

template <typename T>
std::string describe(const Plan<T>& plan) {
  char line[400];
  std::snprintf(line, sizeof line,
                "%s M=%lld N=%lld K=%lld bm=%lld bn=%lld bk=%lld chunk_blocks=%lld "
                "P=%s Q=%s%s last_to_tile=%d cost=%.4g%s",
                plan.z_is_ct ? "Z=C^T" : "Z=C", (long long)plan.M, (long long)plan.N,
                (long long)plan.K, (long long)plan.bm, (long long)plan.bn, (long long)plan.bk,
                (long long)plan.chunk_blocks,
                plan.pack_p ? "packed" : plan.pack_p_last ? "in-place+packed-last" : "in-place",
                plan.q_access.packed ? "packed" : "in-place",
                plan.q_access.trans ? "(trans)" : "", plan.last_to_tile, plan.cost,
                plan.avx512 ? " avx512" : "");
  return line;
}

template <typename T>
bool gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
          const Epilogue<T>& epilogue, const Threading& threading, const Options& options) {
  check_gemm_shapes("tpp_gemm", a, b, c);
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  if (!init()) return false;
  if (m == 0 || n == 0 || k == 0) {
    if (k == 0) fill_with_bias(c, epilogue.bias);
    if (epilogue.a_row_sums) sum_rows(a, epilogue.a_row_sums);
    return true;
  }
  const Plan<T> plan = make_plan(a, b, c, options);
  // A block of Z = C^T written straight into C gets the bias first and the kernels
  // accumulate onto it (cheaper than a second pass over the block after them). Tile
  // blocks get the bias while being copied out.
  const bool prefill_bias = plan.z_is_ct && epilogue.bias != nullptr;
  BrgemmKernels<T> kernels;
  if (!dispatch_kernels(plan, prefill_bias || plan.k_full > plan.chunk_blocks, kernels)) {
    return false;
  }
  const bool parallel = threading.num_threads > 1 &&
                        2.0 * double(m) * double(n) * double(k) >= options.min_parallel_flops;
  const Packing packing = plan_packing(plan, options);
  const ScratchCap cap(options.max_kept_scratch_bytes);
  Driver<T>(plan, packing, kernels, a, c, epilogue, threading, parallel, prefill_bias,
            options.max_kept_scratch_bytes)
      .run();
  return true;
}

size_t kept_scratch_bytes() { return t_pack_scratch.capacity() + t_block_scratch.capacity(); }

#define EML_TPP_INSTANTIATE(T)                                                                 \
  template bool gemm<T>(ConstMatrixView<T>, ConstMatrixView<T>, OutputMatrix<T>,              \
                        const Epilogue<T>&, const Threading&, const Options&);                 \
  template Plan<T> make_plan<T>(ConstMatrixView<T>, ConstMatrixView<T>, OutputMatrix<T>,      \
                                const Options&);                                               \
  template std::string describe<T>(const Plan<T>&);
EML_TPP_INSTANTIATE(float)
EML_TPP_INSTANTIATE(double)
#undef EML_TPP_INSTANTIATE

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

template <typename T>
bool tpp_kernel_wins(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  const bool forward = (a.col_stride == 1 || a.cols == 1) && (b.row_stride == 1 || b.rows == 1);
  const double flops = 2.0 * double(a.rows) * double(a.cols) * double(b.cols);
  if (!forward || flops > kTppSmallForwardMaxFlops) return true;
  const bool full_width_avx512 = tpp::jit_avx512() && !cpu_splits_avx512();
  return full_width_avx512 && a.rows <= kTppAvx512ForwardMaxRows &&
         a.cols >= kTppAvx512ForwardMinDepth;
}

template bool tpp_kernel_wins<float>(ConstMatrixView<float>, ConstMatrixView<float>);
template bool tpp_kernel_wins<double>(ConstMatrixView<double>, ConstMatrixView<double>);

}  // namespace eml::gemm
