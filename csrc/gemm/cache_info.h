// The data caches this CPU reports: size, associativity, line and how many logical CPUs
// share each level. The blocked GEMM derives its block sizes from them (blocked/block_model.h),
// the TPP plan its L1 conflict and L2 reuse estimates.
#pragma once

#include <cstdint>
#include <string>

namespace eml::gemm {

struct CacheLevel {
  int64_t size_bytes = 0;  // 0: not reported
  int64_t ways = 0;        // fully associative caches report size / line
  int64_t line_bytes = 0;
  int64_t sharing = 1;     // logical CPUs sharing this cache (each with its own share)

  bool known() const { return size_bytes > 0 && ways > 0 && line_bytes > 0; }
  int64_t sets() const { return known() ? size_bytes / (ways * line_bytes) : 0; }
  // The part of the cache one thread can count on: size / sharing.
  int64_t share_bytes() const { return size_bytes / (sharing > 0 ? sharing : 1); }
};

struct CacheInfo {
  CacheLevel l1d, l2, l3;
  // Where the levels came from: "cpuid 0x8000001d" (AMD), "cpuid 4" (Intel), "sysfs", or
  // "none" (the CPU reported nothing; every level unknown).
  std::string source = "none";
};

// Modest caches that any CPU with AVX2 or a 64-bit Arm core has at least: what the
// tuning assumes for each level the CPU does not report.
inline constexpr CacheLevel kAssumedL1{32 << 10, 8, 64, 1};
inline constexpr CacheLevel kAssumedL2{256 << 10, 8, 64, 1};
inline constexpr CacheLevel kAssumedL3{2 << 20, 16, 64, 1};

// `caches` with each unknown level replaced by the assumed one.
CacheInfo or_assumed(const CacheInfo& caches);

// Queries the CPU now: CPUID (AMD's leaf 0x8000001D, else leaf 4) on x86, else
// /sys/devices/system/cpu/cpu0/cache. Levels nobody reports stay unknown.
CacheInfo detect_cache_info();

// detect_cache_info() of the first call (start-up), kept for the process.
const CacheInfo& cache_info();

// or_assumed(cache_info()), kept likewise.
const CacheInfo& known_cache_info();

// "32 KiB 8-way, 64 B lines, shared by 1" (or "not reported").
std::string describe(const CacheLevel& level);

}  // namespace eml::gemm
