// The reference GEMM: the course's "own C++-only implementation" (seed 6.3),
// three plain loops over strided views. Slow and obviously right; the other
// backends are tested against float64 references, this one is their baseline.
#include "gemm/gemm.h"

namespace eml::gemm {

template <typename T>
void reference_gemm(ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
                    const Epilogue<T>& epilogue) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T sum = epilogue.bias ? epilogue.bias[j] : T(0);
      for (int64_t p = 0; p < k; ++p) sum += a(i, p) * b(p, j);
      c(i, j) = sum;
    }
  }
  if (epilogue.a_row_sums) {
    for (int64_t i = 0; i < a.rows; ++i) {
      T sum = T(0);
      for (int64_t p = 0; p < k; ++p) sum += a(i, p);
      epilogue.a_row_sums[i] = sum;
    }
  }
}

template void reference_gemm<float>(ConstMatrixView<float>, ConstMatrixView<float>,
                                    OutputMatrix<float>, const Epilogue<float>&);
template void reference_gemm<double>(ConstMatrixView<double>, ConstMatrixView<double>,
                                     OutputMatrix<double>, const Epilogue<double>&);

}  // namespace eml::gemm
