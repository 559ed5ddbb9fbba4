#include "cache_info.h"

#include <fstream>
#include <sstream>

#include "isa.h"  // EML_GEMM_X86

#if EML_GEMM_X86
#include <cpuid.h>
#endif

namespace eml::gemm {
namespace {

// The level (1..3) a data or unified cache answers for; other caches are skipped.
CacheLevel* slot_for(CacheInfo& info, int level) {
  switch (level) {
    case 1:
      return &info.l1d;
    case 2:
      return &info.l2;
    case 3:
      return &info.l3;
    default:
      return nullptr;
  }
}

#if EML_GEMM_X86
// Leaf 4 (Intel) and 0x8000001D (AMD) share one layout: one sub-leaf per cache, until
// type 0. EAX: type [4:0] (1 data, 2 instruction, 3 unified), level [7:5], fully
// associative [9], logical CPUs sharing - 1 [25:14]; EBX: line - 1 [11:0], partitions - 1
// [21:12], ways - 1 [31:22]; ECX: sets - 1.
bool read_cpuid_caches(unsigned leaf, CacheInfo& info) {
  bool any = false;
  for (unsigned index = 0; index < 16; ++index) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __cpuid_count(leaf, index, eax, ebx, ecx, edx);
    const unsigned type = eax & 0x1f;
    if (type == 0) break;
    if (type == 2) continue;  // instruction cache
    CacheLevel* slot = slot_for(info, static_cast<int>((eax >> 5) & 7));
    if (slot == nullptr) continue;
    const int64_t line = (ebx & 0xfff) + 1;
    const int64_t partitions = ((ebx >> 12) & 0x3ff) + 1;
    const int64_t sets = int64_t{ecx} + 1;
    int64_t ways = ((ebx >> 22) & 0x3ff) + 1;
    const int64_t size = ways * partitions * line * sets;
    if ((eax >> 9) & 1) ways = size / line;  // fully associative
    *slot = {size, ways, line, ((eax >> 14) & 0xfff) + 1};
    any = true;
  }
  return any;
}

bool detect_cpuid(CacheInfo& info) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const unsigned max_extended = __get_cpuid_max(0x80000000, nullptr);
  if (max_extended >= 0x8000001d && __get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) &&
      ((ecx >> 22) & 1) /* TOPOEXT */ && read_cpuid_caches(0x8000001d, info)) {
    info.source = "cpuid 0x8000001d";
    return true;
  }
  if (__get_cpuid_max(0, nullptr) >= 4 && read_cpuid_caches(4, info)) {
    info.source = "cpuid 4";
    return true;
  }
  return false;
}
#endif

std::string read_line(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

int64_t read_int(const std::string& path) {
  try {
    return std::stoll(read_line(path));
  } catch (const std::exception&) {
    return 0;
  }
}

// "32K", "32768K", "1M", "512" -> bytes (0 if unreadable).
int64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = used < text.size() ? text[used] : ' ';
  if (unit == 'K') return value << 10;
  if (unit == 'M') return value << 20;
  if (unit == 'G') return value << 30;
  return value;
}

// "0-3,8-11" -> 8.
int64_t count_cpus(const std::string& list) {
  int64_t count = 0;
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto dash = item.find('-');
    try {
      count += dash == std::string::npos
                   ? 1
                   : std::stoll(item.substr(dash + 1)) - std::stoll(item.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return 0;
    }
  }
  return count;
}

constexpr const char* kSysfsCaches = "/sys/devices/system/cpu/cpu0/cache/index";

// Reads every level from sysfs; with `sharing_only`, only fills in the sharing counts of
// levels already known (CPUID's count is a power-of-two bound on Intel, sysfs the actual).
bool read_sysfs(CacheInfo& info, bool sharing_only) {
  bool any = false;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = kSysfsCaches + std::to_string(index) + "/";
    const std::string type = read_line(dir + "type");
    if (type.empty()) break;
    if (type == "Instruction") continue;
    CacheLevel* slot = slot_for(info, static_cast<int>(read_int(dir + "level")));
    if (slot == nullptr) continue;
    const int64_t sharing = count_cpus(read_line(dir + "shared_cpu_list"));
    if (sharing_only) {
      if (slot->known() && sharing > 0) slot->sharing = sharing;
      continue;
    }
    CacheLevel level{parse_size(read_line(dir + "size")), read_int(dir + "ways_of_associativity"),
                     read_int(dir + "coherency_line_size"), sharing > 0 ? sharing : 1};
    if (level.known()) {
      *slot = level;
      any = true;
    }
  }
  return any;
}

}  // namespace

CacheInfo detect_cache_info() {
  CacheInfo info;
#if EML_GEMM_X86
  if (detect_cpuid(info)) {
    read_sysfs(info, /*sharing_only=*/true);
    return info;
  }
#endif
  if (read_sysfs(info, /*sharing_only=*/false)) info.source = "sysfs";
  return info;
}

CacheInfo or_assumed(const CacheInfo& caches) {
  CacheInfo known = caches;
  if (!known.l1d.known()) known.l1d = kAssumedL1;
  if (!known.l2.known()) known.l2 = kAssumedL2;
  if (!known.l3.known()) known.l3 = kAssumedL3;
  return known;
}

const CacheInfo& cache_info() {
  static const CacheInfo info = detect_cache_info();
  return info;
}

const CacheInfo& known_cache_info() {
  static const CacheInfo info = or_assumed(cache_info());
  return info;
}

std::string describe(const CacheLevel& level) {
  if (!level.known()) return "not reported";
  std::ostringstream text;
  const int64_t size = level.size_bytes;
  if (size % (1 << 20) == 0) {
    text << (size >> 20) << " MiB";
  } else {
    text << (size >> 10) << " KiB";
  }
  text << " " << level.ways << "-way, " << level.line_bytes << " B lines, shared by "
       << level.sharing;
  return text.str();
}

}  // namespace eml::gemm
