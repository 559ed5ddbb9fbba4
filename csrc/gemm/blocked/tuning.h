// The tuning the blocked GEMM runs with: the model's (block_model.h) for this CPU's caches
// (cache_info()) and the active ISA, each value replaceable by an environment variable
// read once at start-up:
//   EML_OPS_MC, EML_OPS_KC, EML_OPS_NC              float (and 16-bit) cache blocks
//   EML_OPS_MC_F64, EML_OPS_KC_F64, EML_OPS_NC_F64  double cache blocks
//   EML_OPS_ONE_PASS_KC, EML_OPS_ONE_PASS_KC_F64    the deepest k done in one block
//   EML_OPS_SHALLOW_BLOCK_BYTES, EML_OPS_STREAM_B_BYTES, EML_OPS_L3_SHARE_BYTES,
//   EML_OPS_COLUMN_BLOCK_L2_BYTES,
//   EML_OPS_MIN_PARALLEL_FLOPS, EML_OPS_DOT_MAX_ROWS, EML_OPS_ALIASING_ROW_BYTES,
//   EML_OPS_NARROW_TILES, EML_OPS_FEW_ROWS_TILES, EML_OPS_TRANSPOSED_MAX_ROWS,
//   EML_OPS_INTERLEAVED_MAX_ROWS, EML_OPS_ALIASED_TILE_ROWS, EML_OPS_PREFETCH_NEXT_MIN_ROWS
//                                                   the thresholds (block_model.h: Tuning)
// A value that is not a positive integer is ignored (the report says so);
// EML_OPS_NARROW_TILES, EML_OPS_FEW_ROWS_TILES, EML_OPS_TRANSPOSED_MAX_ROWS,
// EML_OPS_INTERLEAVED_MAX_ROWS and EML_OPS_COLUMN_BLOCK_L2_BYTES also take 0, which turns
// those tiles, that path or that rule off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../isa.h"
#include "block_model.h"

namespace eml::gemm::blocked {

// The tuning for active_isa() (built once per ISA), or the one set_tuning_for_testing set.
const Tuning& tuning();

// The tuning for `isa`: model plus overrides.
const Tuning& tuning_for(Isa isa);

// Whether an operand of `bytes` streams from memory: beyond this thread's L3 share.
inline bool streams_from_memory(int64_t bytes) { return bytes >= tuning().l3_share_bytes; }

// Whether a block of B `depth` steps deep, of `block_bytes`, is walked rows outer (C written
// in memory order, each page whole while in cache): a block within L1 (shallow_block_bytes),
// or one at most write_bound_depth deep (dL/dW = G^T·X of few rows of G), bound by the writes
// of C, within L2 (stream_b_bytes). Measurements: block_model.cpp.
inline bool writes_rows_outer(int64_t depth, int64_t block_bytes) {
  const Tuning& limits = tuning();
  return block_bytes <= limits.shallow_block_bytes ||
         (depth <= limits.write_bound_depth && block_bytes <= limits.stream_b_bytes);
}

// Tests only: run with `tuning` (nullptr: back to tuning()). Not thread-safe with GEMMs
// running; the caller keeps `tuning` alive.
void set_tuning_for_testing(const Tuning* tuning);

// One value of the tuning, for the report.
struct TuningEntry {
  std::string name;     // "mc", "kc_f64", "min_parallel_flops", ...
  std::string env;      // its environment variable
  int64_t model = 0;    // the model's value
  int64_t value = 0;    // the value used
  bool overridden = false;
  std::string note;     // how the model got it, or why an override was ignored
};

// Every value of tuning_for(isa), in a fixed order (built once, like the tuning).
const std::vector<TuningEntry>& tuning_entries(Isa isa);

// The report: caches seen and their source, the register tile, then one line per value
// (model value, used value, override), for `isa`.
std::string tuning_report(Isa isa);

}  // namespace eml::gemm::blocked
