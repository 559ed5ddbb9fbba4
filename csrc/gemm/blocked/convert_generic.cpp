// Row conversions between the 16-bit element types and float in portable C++:
// the scalar fallback of the generic ISA (and of float16 without F16C).
#include "kernels.h"
#include "weight_kernels.h"

namespace eml::gemm::blocked {
namespace {

template <typename S>
void narrow_row(const float* src, int64_t count, S* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = narrow<S>(src[i]);
}

template <typename S>
void widen_row(const S* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = widen(src[i]);
}

}  // namespace

template <typename S>
void set_generic_conversions(Kernels<S>& kernels) {
  kernels.narrow = &narrow_row<S>;
  kernels.widen = &widen_row<S>;
}

template void set_generic_conversions<bfloat16_t>(Kernels<bfloat16_t>&);
template void set_generic_conversions<float16_t>(Kernels<float16_t>&);

template <typename W>
void set_generic_weight_widen(WeightKernels<W>& kernels) {
  kernels.widen = &widen_row<W>;
}

template void set_generic_weight_widen<int8_t>(WeightKernels<int8_t>&);
template void set_generic_weight_widen<bfloat16_t>(WeightKernels<bfloat16_t>&);
template void set_generic_weight_widen<float16_t>(WeightKernels<float16_t>&);

}  // namespace eml::gemm::blocked
