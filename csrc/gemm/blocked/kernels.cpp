#include "kernels.h"

namespace eml::gemm::blocked {

template <typename T>
const Kernels<T>& generic_kernels() {
  static const Kernels<T> kernels = [] {
    Kernels<T> table{};
    table.micro = generic_micro_kernel<T>();
    set_generic_direct_tiles(table);
    return table;
  }();
  return kernels;
}

template const Kernels<float>& generic_kernels<float>();
template const Kernels<double>& generic_kernels<double>();

#if EML_GEMM_X86
template <typename T>
const Kernels<T>& avx2_kernels() {
  static const Kernels<T> kernels = [] {
    Kernels<T> table{};
    table.micro = avx2_micro_kernel<T>();
    set_avx2_direct_tiles(table);
    set_avx2_packing(table);
    return table;
  }();
  return kernels;
}

template const Kernels<float>& avx2_kernels<float>();
template const Kernels<double>& avx2_kernels<double>();
#endif

}  // namespace eml::gemm::blocked
