// The packed-path register kernels with AVX2 + FMA: float 6x16, double 6x8.
//
// MR x NV vectors of accumulators (12 ymm registers) plus NV vectors of B and one
// broadcast of A fit in the 16 ymm registers; 12 independent FMA chains cover the
// FMA latency (4 cycles) times the 2 FMA pipes of Zen 3 / recent Intel cores.
#include "kernels.h"

#if EML_GEMM_X86

#include "simd_avx2.h"

#define EML_MICRO_KERNEL_TARGET EML_TARGET_AVX2
#define EML_MICRO_KERNEL_INLINE EML_AVX2_INLINE
#include "microkernel_impl.h"

namespace eml::gemm::blocked {

template <typename T>
MicroKernel<T> avx2_micro_kernel() {
  using VT = avx2::Vec<T>;
  static_assert(BlockSizes<T>::nr % VT::lanes == 0);
  constexpr int kVectorsPerRow = static_cast<int>(BlockSizes<T>::nr) / VT::lanes;
  return &register_kernel<VT, static_cast<int>(BlockSizes<T>::mr), kVectorsPerRow, /*TILES=*/1>;
}

template <typename T>
MicroKernel<T> avx2_micro_kernel_rows(int rows) {
  using VT = avx2::Vec<T>;
  constexpr int kMr = static_cast<int>(BlockSizes<T>::mr);
  constexpr int kVectorsPerRow = static_cast<int>(BlockSizes<T>::nr) / VT::lanes;
  static_assert(kMr == 6, "one case per row count below");
  switch (rows) {
    case 1:
      return &register_kernel<VT, kMr, kVectorsPerRow, 1, 1>;
    case 2:
      return &register_kernel<VT, kMr, kVectorsPerRow, 1, 2>;
    case 3:
      return &register_kernel<VT, kMr, kVectorsPerRow, 1, 3>;
    case 4:
      return &register_kernel<VT, kMr, kVectorsPerRow, 1, 4>;
    case 5:
      return &register_kernel<VT, kMr, kVectorsPerRow, 1, 5>;
    default:
      return nullptr;
  }
}

template MicroKernel<float> avx2_micro_kernel<float>();
template MicroKernel<double> avx2_micro_kernel<double>();
template MicroKernel<float> avx2_micro_kernel_rows<float>(int);
template MicroKernel<double> avx2_micro_kernel_rows<double>(int);

}  // namespace eml::gemm::blocked

#endif
