// The packed path's AVX-512F register kernels: two adjacent 6 x 16 float (6 x 8 double)
// tiles at once, each row of a tile one 512-bit vector, and their first 1 to 5 rows (the
// last row tile); each also with the next column step's panels prefetched
// (RegisterKernels::pair_next). Single tiles (an odd last tile, narrow edges) stay with the
// AVX2 kernel, so the packing is the same for both ISAs.
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

namespace {

// The pair kernel of the first `rows` rows (1 to MR) of two adjacent tiles.
template <typename T, bool PREFETCH_NEXT>
MicroKernel<T> pair_kernel(int rows) {
  using VT = avx512::Vec<T>;
  constexpr int kMr = static_cast<int>(BlockSizes<T>::mr);
  static_assert(BlockSizes<T>::nr == VT::lanes, "one vector per row of a tile");
  // Prefetching B costs the compute-bound products nothing here (B in L1; measured on Zen 5,
  // where it cost the AVX2 kernel 1-2%) and speeds up those that stream a prepacked B from
  // memory (Zen 5, 4 to 24 rows times four 4096 x 1024 weights: 1536 bytes ahead 1.16-1.27x
  // no prefetch, 3072 bytes another 1.06-1.3x; 4096 as fast, 768 and 6144 slower).
  constexpr bool kPrefetchB = true;
  return row_kernel<VT, kMr, 1, /*TILES=*/2, kPrefetchB, PREFETCH_NEXT>(rows);
}

// The kernel of two row tiles (two packed A panels) by two adjacent tiles, 2 MR x 2 NR. No
// prefetch of B: the first row tiles of each column step bring its panels into L1
// (macro_kernel.cpp), and prefetching them again cost this kernel 4-5% on the Xeon (A and B
// in cache: 218 against 228 GFLOP/s). PREFETCH_C: whether it asks for C's lines first;
// STREAM_C: whether it writes them past the caches.
template <typename T, bool PREFETCH_C, bool STREAM_C = false>
MicroKernel<T> pair_block_kernel() {
  using VT = avx512::Vec<T>;
  constexpr int kMr = static_cast<int>(BlockSizes<T>::mr);
  return &register_kernel<VT, kMr, 1, /*TILES=*/2, 2 * kMr, /*PREFETCH_B=*/false, false,
                          /*PANELS=*/2, PREFETCH_C, STREAM_C>;
}

}  // namespace

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_block() {
  return pair_block_kernel<T, true>();
}

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_block_store() {
  return pair_block_kernel<T, false>();
}

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_block_stream() {
  return pair_block_kernel<T, false, true>();
}

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair() {
  return pair_kernel<T, false>(static_cast<int>(BlockSizes<T>::mr));
}

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_rows(int rows) {
  return rows < static_cast<int>(BlockSizes<T>::mr) ? pair_kernel<T, false>(rows) : nullptr;
}

template <typename T>
MicroKernel<T> avx512_micro_kernel_pair_next(int rows) {
  return pair_kernel<T, true>(rows);
}

template MicroKernel<float> avx512_micro_kernel_pair<float>();
template MicroKernel<double> avx512_micro_kernel_pair<double>();
template MicroKernel<float> avx512_micro_kernel_pair_rows<float>(int);
template MicroKernel<double> avx512_micro_kernel_pair_rows<double>(int);
template MicroKernel<float> avx512_micro_kernel_pair_block<float>();
template MicroKernel<double> avx512_micro_kernel_pair_block<double>();
template MicroKernel<float> avx512_micro_kernel_pair_block_store<float>();
template MicroKernel<double> avx512_micro_kernel_pair_block_store<double>();
template MicroKernel<float> avx512_micro_kernel_pair_block_stream<float>();
template MicroKernel<double> avx512_micro_kernel_pair_block_stream<double>();
template MicroKernel<float> avx512_micro_kernel_pair_next<float>(int);
template MicroKernel<double> avx512_micro_kernel_pair_next<double>(int);

}  // namespace eml::gemm::blocked

#endif
