// Register and cache block sizes of the packed GEMM, per element type.
//
// MR x NR is the micro-kernel's register tile (packing and kernels must agree).
// KC: depth of one packed block; an MR x KC sliver of A and a KC x NR sliver of B
//     stay in L1 while a micro-kernel runs.
// MC: rows of A packed at once; the MC x KC block stays in L2 (512 KiB per core).
// NC: columns of B packed at once; the KC x NC panel lives in L3.
// The EML_GEMM_* macros exist for tuning runs only (tests/cpp/run.sh tune).
#pragma once

#include <cstdint>

namespace eml::gemm::blocked {

template <typename T>
struct BlockSizes;

template <>
struct BlockSizes<float> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 16;
#ifdef EML_GEMM_MC_F32
  static constexpr int64_t mc = EML_GEMM_MC_F32;
  static constexpr int64_t kc = EML_GEMM_KC_F32;
  static constexpr int64_t nc = EML_GEMM_NC_F32;
#else
  static constexpr int64_t mc = 144;
  static constexpr int64_t kc = 256;
  static constexpr int64_t nc = 4080;
#endif
};

template <>
struct BlockSizes<double> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 8;
#ifdef EML_GEMM_MC_F64
  static constexpr int64_t mc = EML_GEMM_MC_F64;
  static constexpr int64_t kc = EML_GEMM_KC_F64;
  static constexpr int64_t nc = EML_GEMM_NC_F64;
#else
  static constexpr int64_t mc = 72;
  static constexpr int64_t kc = 256;
  static constexpr int64_t nc = 4080;
#endif
};

}  // namespace eml::gemm::blocked
