#include "run.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "blocked/blocked_gemm.h"
#ifdef EML_OPS_WITH_LIBXSMM
#include "tpp/tpp_gemm.h"
#endif

namespace eml::gemm {
namespace {

// True when tpp computed C; false leaves the call to blocked. The 16-bit types always
// take blocked: LIBXSMM 1.17's bfloat16 kernels need AVX-512, and it has none for float16.
template <typename T>
bool ran_on_tpp([[maybe_unused]] ConstMatrixView<T> a, [[maybe_unused]] ConstMatrixView<T> b,
                [[maybe_unused]] OutputMatrix<T> c,
                [[maybe_unused]] const Epilogue<T>& epilogue,
                [[maybe_unused]] const Threading& threading) {
#ifdef EML_OPS_WITH_LIBXSMM
  if constexpr (!is_half_v<T>) {
    return std::min(c.rows, c.cols) >= kTppMinRowsAndCols &&
           tpp_gemm(a, b, c, epilogue, threading);
  }
#endif
  return false;
}

}  // namespace

bool runs_on_own_gemm(Backend backend, Element element) {
  if (backend == Backend::aten) return false;
  return element != Element::bfloat16 || bf16_on_own_gemm();
}

template <typename T>
void run(Backend backend, ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
         const Epilogue<T>& epilogue, const Threading& threading) {
  switch (backend) {
    case Backend::reference:
      reference_gemm(a, b, c, epilogue);
      return;
    case Backend::tpp:
      if (ran_on_tpp(a, b, c, epilogue, threading)) return;
      [[fallthrough]];  // no JIT kernel for this shape or type: our blocked GEMM instead
    case Backend::blocked:
      blocked_gemm(a, b, c, epilogue, threading);
      return;
    case Backend::aten:
      break;
  }
  throw std::invalid_argument(std::string("gemm::run: backend '") + backend_name(backend) +
                              "' is not one of the GEMM library's");
}

#define EML_GEMM_INSTANTIATE_RUN(T)                                                        \
  template void run<T>(Backend, ConstMatrixView<T>, ConstMatrixView<T>, OutputMatrix<T>, \
                       const Epilogue<T>&, const Threading&);
EML_GEMM_INSTANTIATE_RUN(float)
EML_GEMM_INSTANTIATE_RUN(double)
EML_GEMM_INSTANTIATE_RUN(bfloat16_t)
EML_GEMM_INSTANTIATE_RUN(float16_t)
#undef EML_GEMM_INSTANTIATE_RUN

}  // namespace eml::gemm
