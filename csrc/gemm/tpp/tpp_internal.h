// Internals of the TPP backend, shared by its .cpp files and its standalone test.
//
// Vocabulary. LIBXSMM kernels are column-major: a kernel computes
//     Z (M x N) = sum_{i < count} P_i (M x K) · Q_i (K x N)
// with Z, P, Q column-major (Q may instead be stored transposed: TRANS_B). Our
// row-major C = A·B is mapped onto that in one of two orientations:
//   kZIsCT: Z = C^T (written straight into C, ldc = c.ld, onto the bias written
//           there first); P = B^T, Q = A^T; M = n, N = m.
//   kZIsC:  Z = C (a column-major tile in a scratch buffer, then transposed into
//           C together with the bias); P = A, Q = B; M = m, N = n.
// The planner picks the orientation with the lower estimated cost (kernel efficiency
// of the M blocking + copies). Each of P and Q is either read in place (when its
// strides already are what a kernel needs and its leading dimension does not thrash
// L1) or packed into a blocked layout (the missing TRANS_A is absorbed here):
//   P: [M blocks][K][bM]                (= [M blocks][K blocks][bk][bM], lda = bM)
//   Q: [N blocks][K blocks][bN][bk]     (ldb = bk)
// Every bM x bN block of Z is a few batch-reduce GEMM calls, each over the bk-deep
// K blocks of one K chunk (~16 KiB of P, kept in L1): beta = 0 for the first chunk
// (beta = 1 onto a bias), 1 after; when bk does not divide K one more call adds the
// K tail. N remainders get their own kernels; the last M block is zero-padded to
// whole AVX2 vectors (LIBXSMM 1.17 runs partial vectors near scalar speed) and its Z
// block goes through a scratch tile. Output blocks are split over threads. The packed
// operand walked in the inner loop over output blocks is packed before them (panel by
// panel beyond Options::max_panel_bytes), the other one a block at a time by the thread
// that uses it: the scratch does not grow with M and N.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tpp_gemm.h"

namespace eml::gemm::tpp {

// ---- LIBXSMM set-up and kernels (tpp_kernels.cpp) ----

// libxsmm_init() once; true when a probe kernel dispatches.
bool init();

// True when LIBXSMM generates AVX-512 kernels here (its target, LIBXSMM_TARGET included).
bool jit_avx512();

// One batch-reduce kernel: Z (m x n, ldc) (= or +=) sum_i P_i (m x k, lda) · Q_i (k x n, ldb),
// P_i = P_0 + i*stride_a bytes, Q_i = Q_0 + i*stride_b bytes.
struct KernelKey {
  int32_t m = 0, n = 0, k = 0;
  int32_t lda = 0, ldb = 0, ldc = 0;
  int32_t stride_a = 0, stride_b = 0;  // bytes
  bool trans_b = false;                // Q stored as an n x k column-major matrix
  bool accumulate = false;             // beta = 1 (else beta = 0)
  bool operator==(const KernelKey& o) const;
};

template <typename T>
using BrgemmKernel = void (*)(const T* p, const T* q, T* z, const unsigned long long* count, ...);

// A cached kernel for the key, or nullptr when LIBXSMM cannot generate it (a failed key
// is dispatched again after a number of lookups). Thread-safe; hits take no lock.
template <typename T>
BrgemmKernel<T> get_kernel(const KernelKey& key);

// A key whose dispatch failed is answered nullptr, without dispatching, by the next
// kLookupsBetweenRetries - 1 lookups (from any thread); the one after them dispatches it
// again: a failure is neither retried on every call nor remembered forever.
constexpr int kLookupsBetweenRetries = 64;

// Test seam of the kernel cache (for tests/cpp/test_tpp.cpp; nothing else calls it).
namespace testing {
// Dispatches the cache has asked LIBXSMM for so far, all threads together.
int64_t dispatch_attempts();
// The cache's next `count` dispatches fail as if LIBXSMM could not generate the kernel.
void fail_next_dispatches(int count);
}  // namespace testing

// ---- Packing and the other memory passes (tpp_pack.cpp) ----

// dst[o*ld_dst + i] = src[o*s_outer + i*s_inner] for o < n_outer, i < n_inner.
template <typename T>
void copy_2d(T* dst, int64_t ld_dst, const T* src, int64_t s_outer, int64_t s_inner,
             int64_t n_outer, int64_t n_inner);

// P block: dst[kk*bm + r] = p(r0 + r, kk) for r < rows, kk < p.cols; rows up to
// pad_rows (<= bm) are zeros.
template <typename T>
void pack_p_block(ConstMatrixView<T> p, int64_t r0, int64_t rows, int64_t pad_rows, int64_t bm,
                  T* dst);

// Q block: K blocks of bn x bk, dst[(kb*bn + col)*bk + kk] = q(kb*bk + kk, c0 + col)
// for col < cols; the K tail block keeps the bn x bk footprint.
template <typename T>
void pack_q_block(ConstMatrixView<T> q, int64_t c0, int64_t cols, int64_t bn, int64_t bk, T* dst);

// C(i0 + col, j0 + r) = z[r + col*ldz] (+ bias[j0 + r]) for r < rows, col < cols.
template <typename T>
void store_columns(const T* z, int64_t ldz, int64_t rows, int64_t cols, OutputMatrix<T> c,
                   int64_t i0, int64_t j0, const T* bias);

// C(i0 + r, j0 + col) = z[r + col*ldz] (+ bias[j0 + col]) for r < rows, col < cols.
template <typename T>
void store_transposed(const T* z, int64_t ldz, int64_t rows, int64_t cols, OutputMatrix<T> c,
                      int64_t i0, int64_t j0, const T* bias);

// ---- The driver (tpp_gemm.cpp) ----

// The planner's tunable numbers, in one place. Measured on Zen 3 (AVX2: 32 KiB L1d, 8-way,
// 64 B lines; 512 KiB L2 per core) with tests/cpp/run_tpp.sh --bench, and on Zen 5 for
// LIBXSMM's AVX-512 kernels.
struct Tuning {
  // Kernel M (the vector dimension), N and K block sizes. M = 4 AVX2 vectors fills
  // LIBXSMM's register blocking; N from 64 up and K from 32 up hardly matter. With
  // AVX-512 kernels float takes M = 64 (4 AVX-512 vectors): longer runs of C per Z column,
  // up to 2x faster where K is small and writing C dominates (dL/dW of a small batch).
  int64_t float_block_m = 32, float_block_m_avx512 = 64;
  int64_t double_block_m = 16, double_block_m_avx512 = 16;
  int64_t block_n = 64, block_k = 64;
  // Bytes of a P block one kernel call streams over (Plan::chunk_blocks): kept in L1.
  int64_t chunk_bytes = 16 * 1024;
  // L2 per core: an operand up to half of it is re-read from L2 (Plan::m_outer), up to
  // all of it an AVX-512 kernel's TRANS_B operand is worth packing for 8 M blocks or more.
  double l2_bytes = 512 * 1024;
  // The L1 data cache: the set pattern repeats every line_bytes * sets.
  int64_t l1_line_bytes = 64, l1_sets = 64, l1_ways = 8;
  // An L1 conflict is severe when at most this many sets are in use.
  int64_t l1_severe_sets = 8;
  // Packing what could be read in place pays off when a block is re-read this often
  // (a P block once per few columns of Z, a Q block once per M block).
  int64_t pack_reuse_conflict = 32, pack_reuse_severe = 8;
  // Relative speed of a kernel by the AVX2 vectors in its M block (0 to 4 and more):
  // LIBXSMM keeps up to 4 in registers per column and fewer run slower.
  double m_speed_by_vectors[5] = {1.0, 0.45, 0.8, 0.95, 1.0};
  // The cost of copying one element, in kernel flops: plain and transposing (strided on
  // one side). AVX-512 kernels run about twice as many flops in the time of one copy.
  double copy_flops = 8, transpose_flops = 20, avx512_copy_factor = 2;
};

// Knobs for tests and tuning; the defaults are what tpp_gemm() uses.
struct Options {
  enum Orientation { kAuto = -1, kZIsCT = 0, kZIsC = 1 };
  int orientation = kAuto;
  bool force_pack_p = false;  // pack P even where it could be read in place
  bool force_pack_q = false;
  int64_t block_m = 0;  // kernel M block (0: default for T)
  int64_t block_n = 0;  // kernel N block
  int64_t block_k = 0;  // K block target (0: default)
  int tile_order = -1;  // -1: auto, 0: M blocks outer, 1: N blocks outer
  int64_t chunk_k = 0;  // K depth reduced by one kernel call (0: default, ~16 KiB of P)
  // Plan for LIBXSMM's AVX-512 kernels (1) or its AVX2 ones (0); -1: for the kernels it
  // generates here. Only the speed depends on it (tests plan both ways on any machine).
  int avx512_plan = -1;
  Tuning tuning;  // the planner's numbers
  // Below this many flops (2*m*n*k, ~15 us on one core) the work runs on the calling
  // thread only: a fork/join would cost more than it saves.
  double min_parallel_flops = 1 << 20;
  // An operand re-read for every block of the other one is packed whole up to this
  // size, beyond it panel by panel (each panel re-packs the blocks of the other operand,
  // which are packed one block per thread at a time): a 32768 x 4096 operand would
  // otherwise need 512 MiB. Panels that stay in L3 more than pay for the re-packing
  // (4096^3 forward with a packed W: 8 MiB panels 12% faster than 32 MiB ones).
  size_t max_panel_bytes = size_t{8} << 20;
  // A thread's packing buffers are kept for its next call up to this size each, and
  // freed after the call beyond it.
  size_t max_kept_scratch_bytes = size_t{64} << 20;
};

// Bytes of packing buffers the calling thread holds between calls (for tests).
size_t kept_scratch_bytes();

// ---- The plan of one GEMM (tpp_gemm.cpp) ----

// Where the kernels find the M blocks of P: in place or packed ([K][bm], lda = bm).
struct PAccess {
  bool packed = false;
  int64_t lda = 0;
  int64_t stride_a = 0;     // bytes between the K blocks of one kernel call
  int64_t k_step = 0;       // elements between consecutive K blocks
  int64_t tail_offset = 0;  // elements to the K tail block
};

// Where the kernels find the N blocks of Q: in place (column-major K x N, or stored
// N x K and read TRANS_B) or packed ([N blocks][K blocks][bn][bk], ldb = bk).
struct QAccess {
  bool packed = false;
  bool trans = false;
  int64_t ldb = 0;
  int64_t stride_b = 0;     // bytes between the K blocks of one kernel call
  int64_t k_step = 0;       // elements between consecutive K blocks
  int64_t tail_offset = 0;  // elements to the K tail block
};

// Everything decided about one C = A·B before a kernel runs (see the vocabulary above).
template <typename T>
struct Plan {
  Tuning tuning;  // Options::tuning
  bool avx512 = false;               // planned for LIBXSMM's AVX-512 kernels
  bool z_is_ct = true;               // the orientation: Z = C^T (else Z = C)
  ConstMatrixView<T> p{}, q{};       // P: M x K, Q: K x N (logical, before any packing)
  int64_t M = 0, N = 0, K = 0;
  int64_t bm = 0, bn = 0, bk = 0;    // kernel block sizes
  int64_t m_blocks = 0, n_blocks = 0, k_full = 0, k_tail = 0, k_blocks = 0;
  int64_t m_last = 0, m_last_pad = 0;  // rows of the last M block, and its kernel's M
  int64_t chunk_k = 0;                 // K depth whose P slice stays in L1
  int64_t chunk_blocks = 0;            // K blocks reduced per kernel call
  bool pack_p = false;                 // every P block packed
  bool pack_p_last = false;            // only the last one (padded), the rest in place
  PAccess p_main, p_last;              // M blocks before the last one, and the last one
  QAccess q_access;
  bool last_to_tile = false;           // the last M block goes through the Z tile
  int64_t ldc = 0;                     // of Z where it is written straight into C
  int64_t p_block_elems = 0, q_block_elems = 0;  // packed elements per M / N block
  double cost = 0;                     // estimated time, in kernel flops

  bool pads_last_m_block() const { return m_last_pad != m_last; }
  bool many_k_blocks() const { return k_full > 1; }  // else the K-block strides are unused
};

// The plan of tpp::gemm for shapes check_gemm_shapes accepts, with m, n, k > 0: the
// orientation with the lower estimated cost unless options.orientation fixes it.
template <typename T>
Plan<T> make_plan(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                  const Options& options);

// One line naming the plan's choices, for tests and tuning.
template <typename T>
std::string describe(const Plan<T>& plan);

template <typename T>
bool gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
          const Epilogue<T>& epilogue, const Threading& threading, const Options& options);

}  // namespace eml::gemm::tpp
