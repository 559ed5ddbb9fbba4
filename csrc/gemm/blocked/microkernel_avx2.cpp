// The packed-path register kernels with AVX2 + FMA: float 6x16, double 6x8, and their first
// 1 to 5 rows; each also with B's panels prefetched (RegisterKernels::tile_next).
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

namespace {

// The kernel of the first `rows` rows (1 to MR) of a tile; PREFETCH_NEXT: the one that also
// prefetches its own panel of B ahead and the next column step's into L2
// (RegisterKernels::tile_next).
template <typename T, bool PREFETCH_NEXT>
MicroKernel<T> tile_kernel(int rows) {
  using VT = avx2::Vec<T>;
  constexpr int kMr = static_cast<int>(BlockSizes<T>::mr);
  static_assert(BlockSizes<T>::nr % VT::lanes == 0);
  constexpr int kVectorsPerRow = static_cast<int>(BlockSizes<T>::nr) / VT::lanes;
  // B's panel in L1 (the compute-bound products) gains nothing from a prefetch: on Zen 5 it
  // cost this kernel 1-2%, so only the streaming kernels prefetch.
  constexpr bool kPrefetchB = PREFETCH_NEXT;
  return row_kernel<VT, kMr, kVectorsPerRow, /*TILES=*/1, kPrefetchB, PREFETCH_NEXT>(rows);
}

}  // namespace

template <typename T>
MicroKernel<T> avx2_micro_kernel() {
  return tile_kernel<T, false>(static_cast<int>(BlockSizes<T>::mr));
}

template <typename T>
MicroKernel<T> avx2_micro_kernel_rows(int rows) {
  return rows < static_cast<int>(BlockSizes<T>::mr) ? tile_kernel<T, false>(rows) : nullptr;
}

template <typename T>
MicroKernel<T> avx2_micro_kernel_next(int rows) {
  return tile_kernel<T, true>(rows);
}

template MicroKernel<float> avx2_micro_kernel<float>();
template MicroKernel<double> avx2_micro_kernel<double>();
template MicroKernel<float> avx2_micro_kernel_rows<float>(int);
template MicroKernel<double> avx2_micro_kernel_rows<double>(int);
template MicroKernel<float> avx2_micro_kernel_next<float>(int);
template MicroKernel<double> avx2_micro_kernel_next<double>(int);

}  // namespace eml::gemm::blocked

#endif
