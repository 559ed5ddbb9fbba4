// The reference GEMM: the course's "own C++-only implementation" (seed 6.3),
// three plain loops over strided views. Slow and obviously right; the other
// backends are tested against float64 references, this one is their baseline.
#include <algorithm>
#include <vector>

#include "gemm/gemm.h"
#include "gemm/row_sums.h"

namespace eml::gemm {

template <typename T>
void reference_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                    const Epilogue<T>& epilogue) {
  using Acc = accumulator_t<T>;
  check_gemm_shapes("reference_gemm", a, b, c);
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      Acc sum = epilogue.bias ? widen(epilogue.bias[j]) : Acc(0);  // the first addend
      // In blocks, as row_sums.h explains: a long k is no single running sum. The first
      // block adds onto the bias, in order, as three plain loops would.
      for (int64_t first = 0; first < k; first += kSumBlock) {
        const int64_t last = std::min(k, first + kSumBlock);
        Acc partial = first == 0 ? sum : Acc(0);
        for (int64_t p = first; p < last; ++p) partial += widen(a(i, p)) * widen(b(p, j));
        sum = first == 0 ? partial : sum + partial;
      }
      c(i, j) = narrow<T>(sum);
    }
  }
  if (epilogue.a_row_sums) {
    std::vector<Acc> sums(static_cast<size_t>(a.rows));
    sum_rows(a, sums.data());
    for (int64_t i = 0; i < a.rows; ++i) epilogue.a_row_sums[i] = narrow<T>(sums[i]);
  }
}

template void reference_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>,
                                    OutputMatrix<float>, const Epilogue<float>&);
template void reference_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                                     OutputMatrix<double>, const Epilogue<double>&);
template void reference_gemm<bfloat16_t>(ConstMatrixView<bfloat16_t>, ConstMatrixView<bfloat16_t>,
                                         OutputMatrix<bfloat16_t>, const Epilogue<bfloat16_t>&);
template void reference_gemm<float16_t>(ConstMatrixView<float16_t>, ConstMatrixView<float16_t>,
                                        OutputMatrix<float16_t>, const Epilogue<float16_t>&);

}  // namespace eml::gemm
