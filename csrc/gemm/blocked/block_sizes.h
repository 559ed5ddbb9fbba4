// Register and cache block sizes of the packed GEMM, per element type.
//
// MR x NR is the micro-kernel's register tile (packing and kernels must agree):
//     6 x 16 floats / 6 x 8 doubles = 12 ymm accumulators, the BLIS Haswell/Zen shape.
// KC: depth of one packed block; the KC x NR sliver of B (16 KiB) stays in L1
//     (32 KiB) while MR x KC slivers of A stream past it.
// MC: rows of A packed at once; the MC x KC block (144 KiB) stays in L2 (512 KiB).
// NC: columns of B packed at once; the KC x NC panel is 2 MiB for both types, a
//     modest share of the L3 that two threads (two panels) and neighbours share.
// Measured on AMD EPYC Zen 3 (1 thread, forward layout, best of interleaved runs):
// MC 72..240 and KC 192..384 were within noise (+-5%) of 144/256 at 480..2048
// cubes; smaller KC or NC = 512 lost 5-10%; 2 MiB panels beat 4 MiB ones at 2048^3
// and 1024x4096x1024 by 5-15% (float NC 4080 -> 2048, double 4080 -> 1024).
// Build with -DEML_GEMM_TUNABLE_BLOCKS to read MC/KC/NC from the environment
// (EML_GEMM_{MC,KC,NC}_{F32,F64}) when tuning for another machine.
#pragma once

#include <cstdint>
#ifdef EML_GEMM_TUNABLE_BLOCKS
#include <cstdlib>
#endif

namespace eml::gemm::blocked {

#ifdef EML_GEMM_TUNABLE_BLOCKS
// Tuning builds only: the cache blocks come from the environment (read once).
inline int64_t block_from_env(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  const int64_t parsed = value != nullptr ? std::atoll(value) : 0;
  return parsed > 0 ? parsed : fallback;
}
#define EML_GEMM_BLOCK(name, env, value) \
  static inline const int64_t name = block_from_env(env, value)
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
  EML_GEMM_BLOCK(nc, "EML_GEMM_NC_F32", 2048);
};

template <>
struct BlockSizes<double> {
  static constexpr int64_t mr = 6;
  static constexpr int64_t nr = 8;
  EML_GEMM_BLOCK(mc, "EML_GEMM_MC_F64", 72);
  EML_GEMM_BLOCK(kc, "EML_GEMM_KC_F64", 256);
  EML_GEMM_BLOCK(nc, "EML_GEMM_NC_F64", 1024);
};

#undef EML_GEMM_BLOCK

// A block of B (kc x all columns of C) of at most this many bytes is shallow: every row of
// tiles reads it whole from L1, so the packed and broadcast paths walk C row by row, in
// memory order. Such products are bound by the writes of C (e.g. the rank-1 dL/dW of a
// batch of one), and on a fresh output each page is then written whole while in cache.
inline constexpr int64_t kShallowBlockBytes = 32 << 10;

}  // namespace eml::gemm::blocked
