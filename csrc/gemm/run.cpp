#include "run.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "blocked/blocked_gemm.h"
#include "blocked/compressed_gemm.h"
#include "blocked/kernels.h"
#include "blocked/path.h"
#include "isa.h"
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
    return std::min(c.rows, c.cols) >= kTppMinRowsAndCols && tpp_kernel_wins(a, b) &&
           tpp_gemm(a, b, c, epilogue, threading);
  }
#endif
  return false;
}

}  // namespace

bool runs_on_own_gemm(Backend backend, Element element, ProductSize size, Pass pass) {
  if (backend == Backend::aten) return false;
  if (element != Element::bfloat16) return true;
  switch (bf16_policy()) {
    case Bf16Policy::own: return true;
    case Bf16Policy::aten: return false;
    case Bf16Policy::automatic: break;
  }
  // In double: m·k·n of a large product overflows int64_t.
  const double volume = static_cast<double>(size.m) * static_cast<double>(size.k) *
                        static_cast<double>(size.n);
  switch (pass) {
    case Pass::forward:
      return size.m <= bf16_own_max_rows(size.k) ||
             volume < static_cast<double>(kBf16OwnForwardVolume);
    case Pass::input_gradient:
      return volume <= static_cast<double>(kBf16OwnBackwardVolume) ||
             size.m <= kBf16OwnInputGradientRows;
    case Pass::weight_gradient:
      return volume <= static_cast<double>(kBf16OwnBackwardVolume);
  }
  return false;
}

int64_t bf16_own_max_rows(int64_t k) {
  return bf16_own_max_rows(k, blocked::active_bf16_dot_tiles_are_native(), cpu_has_amx_bf16());
}

int64_t bf16_own_max_rows(int64_t k, bool dot_tiles_native, bool aten_has_amx) {
  const bool deep_on_dot_tiles = dot_tiles_native && !aten_has_amx && k >= kBf16DotTilesMinDepth;
  return deep_on_dot_tiles ? std::max(kBf16OwnMaxRows, blocked::dot_max_rows_at(k))
                           : kBf16OwnMaxRows;
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

bool runs_compressed_on_own_gemm(Backend backend) { return backend != Backend::aten; }

template <typename W>
void run_compressed(Backend backend, ConstMatrixView<float> a, ConstMatrixView<W> weight,
                    const float* scales, OutputMatrix<float> c, const float* bias,
                    const Threading& threading) {
  if (!runs_compressed_on_own_gemm(backend)) {
    throw std::invalid_argument(std::string("gemm::run_compressed: backend '") +
                                backend_name(backend) + "' is not one of the GEMM library's");
  }
  compressed_gemm(a, weight, scales, c, bias, threading);
}

#define EML_GEMM_INSTANTIATE_RUN_COMPRESSED(W)                                              \
  template void run_compressed<W>(Backend, ConstMatrixView<float>, ConstMatrixView<W>,     \
                                  const float*, OutputMatrix<float>, const float*,         \
                                  const Threading&);
EML_GEMM_INSTANTIATE_RUN_COMPRESSED(int8_t)
EML_GEMM_INSTANTIATE_RUN_COMPRESSED(bfloat16_t)
EML_GEMM_INSTANTIATE_RUN_COMPRESSED(float16_t)
#undef EML_GEMM_INSTANTIATE_RUN_COMPRESSED

}  // namespace eml::gemm
