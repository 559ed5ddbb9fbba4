// Register and cache block sizes of the packed GEMM, per element type.
//
// MR x NR is the micro-kernel's register tile (packing and kernels must agree).
// KC: depth of one packed block; an MR x KC sliver of A and a KC x NR sliver of B
//     stay in L1 (32 KiB) while a micro-kernel runs.
// MC: rows of A packed at once; the MC x KC block stays in L2 (512 KiB per core).
// NC: columns of B packed at once; the KC x NC panel lives in L2/L3.
// Values measured on AMD EPYC Zen 3 (see tests/cpp/run.sh tune).
#pragma once

#include <cstdint>
#ifdef EML_GEMM_TUNABLE_BLOCKS
#include <cstdlib>
#endif

namespace eml::gemm::blocked {

#ifdef EML_GEMM_TUNABLE_BLOCKS
// Tuning builds only: the cache blocks come from the environment.
inline int64_t block_from_env(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  const int64_t parsed = value != nullptr ? std::atoll(value) : 0;
  return parsed > 0 ? parsed : fallback;
}
#define EML_GEMM_BLOCK(name, env, value) static inline const int64_t name = block_from_env(env, value)
#else
#define EML_GEMM_BLOCK(name, env, value) static constexpr int64_t name = value
#endif

template <typename T>
struct BlockSizes;

template <>
struct BlockSizes<float> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 16;
  EML_GEMM_BLOCK(mc, "EML_GEMM_MC_F32", 144);
  EML_GEMM_BLOCK(kc, "EML_GEMM_KC_F32", 256);
  EML_GEMM_BLOCK(nc, "EML_GEMM_NC_F32", 4080);
};

template <>
struct BlockSizes<double> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 8;
  EML_GEMM_BLOCK(mc, "EML_GEMM_MC_F64", 72);
  EML_GEMM_BLOCK(kc, "EML_GEMM_KC_F64", 256);
  EML_GEMM_BLOCK(nc, "EML_GEMM_NC_F64", 4080);
};

#undef EML_GEMM_BLOCK

}  // namespace eml::gemm::blocked
