// The GEMM library of eml_ops: C = A·B (+ bias), on strided views of memory.
//
// Torch-free on purpose: it builds in seconds, is testable on its own, and its
// callers (csrc/ops/cpu, csrc/course) translate tensors into views.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "half.h"

namespace eml::gemm {

// A read-only rows x cols matrix; element (i, j) is data[i*row_stride + j*col_stride].
// Any strides are allowed, including 0 (expanded tensors) and transposes.
template <typename T>
struct ConstMatrixView {
  const T* data;
  int64_t rows;
  int64_t cols;
  int64_t row_stride;
  int64_t col_stride;

  const T& operator()(int64_t row, int64_t col) const {
    return data[row * row_stride + col * col_stride];
  }
  // The same memory seen as the transposed matrix: no copy.
  ConstMatrixView transposed() const { return {data, cols, rows, col_stride, row_stride}; }
};

// A writable row-major rows x cols matrix with leading dimension `ld` (>= cols).
template <typename T>
struct OutputMatrix {
  T* data;
  int64_t rows;
  int64_t cols;
  int64_t ld;

  T& operator()(int64_t row, int64_t col) const { return data[row * ld + col]; }
};

// What a GEMM adds to A·B, and what it collects on the way.
template <typename T>
struct Epilogue {
  // If set: bias[j] (contiguous, length C.cols) is added to every row of C.
  const T* bias = nullptr;
  // If set: receives sum_k A(i, k) for every row i (length A.rows). With A = G^T this
  // is the bias gradient, computed while A is read anyway.
  T* a_row_sums = nullptr;
  // C is written once and read again only later (dL/dW, which the optimizer reads after the
  // backward pass): a GEMM whose C it writes in one pass, beyond the thread's
  // tuning().stream_c_bytes, may write it past the caches instead of reading each line in
  // first. A hint: the results are the same either way.
  bool stream_c = false;
};

// How a GEMM may use threads. The library owns no thread pool; the caller passes
// one in (the op layer passes at::parallel_for, honouring torch.set_num_threads).
struct Threading {
  int num_threads = 1;
  // Calls body(chunk_begin, chunk_end) on disjoint chunks covering [begin, end),
  // possibly concurrently. Empty means: run serially on the calling thread.
  std::function<void(int64_t begin, int64_t end,
                     const std::function<void(int64_t, int64_t)>& body)>
      parallel_for;

  void run(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& body) const {
    if (begin >= end) return;
    if (parallel_for && num_threads > 1) {
      parallel_for(begin, end, body);
    } else {
      body(begin, end);
    }
  }
};

// Every GEMM here computes C = A·B (+ epilogue) for A: m x k, B: k x n, C: m x n.
// C is overwritten (beta = 0); k == 0 gives C = bias (or zeros).

// The shape contract every GEMM here checks first: std::invalid_argument, starting with
// `gemm`'s name, for a negative size, A, B and C that do not chain, or C.ld < C.cols.
template <typename T>
void check_gemm_shapes(const char* gemm, ConstMatrixView<T> a, ConstMatrixView<T> b,
                       OutputMatrix<T> c) {
  if (a.rows < 0 || a.cols < 0 || b.rows < 0 || b.cols < 0 || c.rows < 0 || c.cols < 0) {
    throw std::invalid_argument(std::string(gemm) + ": negative matrix size");
  }
  if (a.rows != c.rows || b.cols != c.cols || a.cols != b.rows) {
    throw std::invalid_argument(std::string(gemm) +
                                ": shapes of A (m x k), B (k x n), C (m x n) differ");
  }
  if (c.rows > 1 && c.ld < c.cols) {
    throw std::invalid_argument(std::string(gemm) +
                                ": C's leading dimension is below its column count");
  }
}

// The seed's "C++-only" version: three plain loops, accumulating in T (in float for
// bfloat16_t and float16_t, each result and row sum rounded once). Checks shapes as
// check_gemm_shapes does.
template <typename T>
void reference_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                    const Epilogue<T>& epilogue = {});

}  // namespace eml::gemm
