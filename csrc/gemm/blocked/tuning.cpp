#include "tuning.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <sstream>

namespace eml::gemm::blocked {
namespace {

// One value of Tuning: its name, variable, place and how the model gets it.
struct Field {
  const char* name;
  const char* env;
  int64_t Tuning::*scalar;    // a threshold, or
  CacheBlocks Tuning::*type;  // the blocks of one type, and
  int64_t CacheBlocks::*block;
  const char* note;
  // The least value an override may set: 1, or 0 where 0 turns a path or tiles off.
  int64_t least = 1;
};

constexpr const char* kKcNote = "L1d: A and B micro-panels in whole ways, one way free";
constexpr const char* kMcNote =
    "L2: ways left after one and B's micro-panel (half of them in an L2 of 2 MiB or more)";
constexpr const char* kNcNote = "L3 share: ways left after one and the A block";
constexpr const char* kOnePassNote = "L1d: the depth whose B micro-panel fills it, at least kc";

const std::array<Field, 24> kFields = {{
    {"mc", "EML_OPS_MC", nullptr, &Tuning::f32, &CacheBlocks::mc, kMcNote},
    {"kc", "EML_OPS_KC", nullptr, &Tuning::f32, &CacheBlocks::kc, kKcNote},
    {"nc", "EML_OPS_NC", nullptr, &Tuning::f32, &CacheBlocks::nc, kNcNote},
    {"mc_f64", "EML_OPS_MC_F64", nullptr, &Tuning::f64, &CacheBlocks::mc, kMcNote},
    {"kc_f64", "EML_OPS_KC_F64", nullptr, &Tuning::f64, &CacheBlocks::kc, kKcNote},
    {"nc_f64", "EML_OPS_NC_F64", nullptr, &Tuning::f64, &CacheBlocks::nc, kNcNote},
    {"one_pass_kc", "EML_OPS_ONE_PASS_KC", nullptr, &Tuning::f32, &CacheBlocks::one_pass_kc,
     kOnePassNote},
    {"one_pass_kc_f64", "EML_OPS_ONE_PASS_KC_F64", nullptr, &Tuning::f64,
     &CacheBlocks::one_pass_kc, kOnePassNote},
    {"shallow_block_bytes", "EML_OPS_SHALLOW_BLOCK_BYTES", &Tuning::shallow_block_bytes, nullptr,
     nullptr, "L1d size"},
    {"stream_b_bytes", "EML_OPS_STREAM_B_BYTES", &Tuning::stream_b_bytes, nullptr, nullptr,
     "L2 size"},
    {"write_bound_depth", "EML_OPS_WRITE_BOUND_DEPTH", &Tuning::write_bound_depth, nullptr,
     nullptr, "measured: 64 with AVX-512's whole-FMA pair blocks, else 32", 0},
    {"l3_share_bytes", "EML_OPS_L3_SHARE_BYTES", &Tuning::l3_share_bytes, nullptr, nullptr,
     "L3 size / CPUs sharing it"},
    {"column_block_l2_bytes", "EML_OPS_COLUMN_BLOCK_L2_BYTES", &Tuning::column_block_l2_bytes,
     nullptr, nullptr, "L2: half of it where it is 2 MiB or more, else 0 (NC from L3)", 0},
    {"stream_c_bytes", "EML_OPS_STREAM_C_BYTES", &Tuning::stream_c_bytes, nullptr, nullptr,
     "L2 size with AVX-512's whole-FMA pair blocks, else 0 (C through the caches)", 0},
    {"min_parallel_flops", "EML_OPS_MIN_PARALLEL_FLOPS", &Tuning::min_parallel_flops, nullptr,
     nullptr, "2048 cycles (a fork/join) x the ISA's flops per cycle"},
    {"dot_max_rows", "EML_OPS_DOT_MAX_ROWS", &Tuning::dot_max_rows, nullptr, nullptr,
     "measured crossover of the dot and the packed tiles"},
    {"aliasing_row_bytes", "EML_OPS_ALIASING_ROW_BYTES", &Tuning::aliasing_row_bytes, nullptr,
     nullptr, "L1d: half a way (rows a multiple apart share one or two sets)"},
    {"narrow_tiles", "EML_OPS_NARROW_TILES", &Tuning::narrow_tiles, nullptr, nullptr,
     "1: AVX2-width tiles at the ISA's FMA rate (AVX2; AVX-512 split into 256-bit halves)", 0},
    {"few_rows_tiles", "EML_OPS_FEW_ROWS_TILES", &Tuning::few_rows_tiles, nullptr, nullptr,
     "1: AVX-512's 12-row tiles read B in place for few rows (whole 512-bit FMAs)", 0},
    {"prefetch_next_min_rows", "EML_OPS_PREFETCH_NEXT_MIN_ROWS",
     &Tuning::prefetch_next_min_rows, nullptr, nullptr,
     "measured: 4 with AVX2, 5 with AVX-512's whole FMAs, 1 split into halves"},
    {"transposed_max_rows", "EML_OPS_TRANSPOSED_MAX_ROWS", &Tuning::transposed_max_rows,
     nullptr, nullptr, "measured: 64 with narrow tiles (AVX2, split AVX-512), else 0", 0},
    {"interleaved_max_rows", "EML_OPS_INTERLEAVED_MAX_ROWS", &Tuning::interleaved_max_rows,
     nullptr, nullptr, "AVX-512: 128 split into halves, 32 whole (fewer at shallow k), else 0",
     0},
    {"aliased_tile_rows", "EML_OPS_ALIASED_TILE_ROWS", &Tuning::aliased_tile_rows, nullptr,
     nullptr, "L1d: W's rows in one set beside 2 lines of X^T: 8 with 10 ways or more, else 6"},
    {"strip_max_cols", "EML_OPS_STRIP_MAX_COLS", &Tuning::strip_max_cols, nullptr, nullptr,
     "measured: 768 with AVX-512's whole FMAs (8 x 48 strip tiles), else 0", 0},
}};

int64_t& slot(Tuning& tuning, const Field& field) {
  return field.scalar != nullptr ? tuning.*field.scalar : (tuning.*field.type).*field.block;
}

// A decimal integer of at least `least`, or nothing.
std::optional<int64_t> parse_at_least(const char* text, int64_t least) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < least) return std::nullopt;
  return value;
}

struct IsaTuning {
  Tuning used;
  std::vector<TuningEntry> entries;
};

IsaTuning build(Isa isa) {
  IsaTuning result;
  const Tuning model = model_tuning(cache_info(), isa, cpu_splits_avx512());
  result.used = model;
  for (const Field& field : kFields) {
    TuningEntry entry{field.name, field.env, slot(result.used, field), 0, false, field.note};
    if (const char* text = std::getenv(field.env)) {
      if (const std::optional<int64_t> value = parse_at_least(text, field.least)) {
        slot(result.used, field) = *value;
        entry.overridden = true;
      } else {
        entry.note = std::string(field.env) + "='" + text +
                     "' ignored: not an integer of at least " + std::to_string(field.least);
      }
    }
    entry.value = slot(result.used, field);
    result.entries.push_back(entry);
  }
  return result;
}

const IsaTuning& isa_tuning(Isa isa) {
  static const std::array<IsaTuning, 3> all = {build(Isa::generic), build(Isa::avx2),
                                               build(Isa::avx512)};
  return all[static_cast<int>(isa)];
}

std::atomic<const Tuning*> g_testing_tuning{nullptr};

}  // namespace

const Tuning& tuning_for(Isa isa) { return isa_tuning(isa).used; }

const Tuning& tuning() {
  const Tuning* testing = g_testing_tuning.load(std::memory_order_relaxed);
  return testing != nullptr ? *testing : tuning_for(active_isa());
}

void set_tuning_for_testing(const Tuning* tuning) {
  g_testing_tuning.store(tuning, std::memory_order_relaxed);
}

const std::vector<TuningEntry>& tuning_entries(Isa isa) { return isa_tuning(isa).entries; }

std::string tuning_report(Isa isa) {
  const CacheInfo& caches = cache_info();
  std::ostringstream text;
  text << "caches (from " << caches.source << "):\n";
  const auto level = [&](const char* name, const CacheLevel& seen, const CacheLevel& assumed) {
    text << "  " << name << ": " << describe(seen);
    if (!seen.known()) text << " (assumed " << describe(assumed) << ")";
    text << "\n";
  };
  level("L1d", caches.l1d, kAssumedL1);
  level("L2 ", caches.l2, kAssumedL2);
  level("L3 ", caches.l3, kAssumedL3);
  const RegisterTile f32 = register_tile(isa, 4), f64 = register_tile(isa, 8);
  text << "ISA " << isa_name(isa) << ", register tile float " << f32.mr << "x" << f32.nr
       << ", double " << f64.mr << "x" << f64.nr;
  if (isa == Isa::avx512) {
    text << "; 512-bit FMAs split into 256-bit halves: " << (cpu_splits_avx512() ? "yes" : "no");
  }
  text << "\n";
  text << "values (model: Low et al., TOMS 2016; overrides: environment):\n";
  for (const TuningEntry& entry : isa_tuning(isa).entries) {
    text << "  " << entry.name << " = " << entry.value;
    if (entry.overridden) text << " (" << entry.env << "; model " << entry.model << ")";
    text << "  [" << entry.note << "]\n";
  }
  return text.str();
}

}  // namespace eml::gemm::blocked
