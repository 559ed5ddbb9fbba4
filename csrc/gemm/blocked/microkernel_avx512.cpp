// The packed path's AVX-512F register kernels: two adjacent 6 x 16 float (6 x 8 double)
// tiles at once, each row of a tile one 512-bit vector; single tiles (edges, an odd last
// tile) stay with the AVX2 kernel, so the packing is the same for both ISAs.
//
// Per step of k: two loads of B and six broadcasts of A feed twelve independent FMAs,
// enough to cover the FMA latency times the two FMA pipes (as the AVX2 kernel's 6 x 2
// vectors do), at twice the width. On Zen 5 the forward runs 1.5x the AVX2 kernel's speed.
#include "kernels.h"

#if EML_GEMM_X86

#include "simd_avx512.h"

#define EML_MICRO_KERNEL_TARGET EML_TARGET_AVX512
#define EML_MICRO_KERNEL_INLINE EML_AVX512_INLINE
#include "microkernel_impl.h"

namespace eml::gemm::blocked {

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair() {
  using VT = avx512::Vec<T>;
  static_assert(BlockSizes<T>::nr == VT::lanes, "one vector per row of a tile");
  return &register_kernel<VT, static_cast<int>(BlockSizes<T>::mr), 1, /*TILES=*/2>;
}

template MicroKernel<float> avx512_micro_kernel_pair<float>();
template MicroKernel<double> avx512_micro_kernel_pair<double>();

}  // namespace eml::gemm::blocked

#endif
