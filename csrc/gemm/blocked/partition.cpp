#include "partition.h"

#include <algorithm>

namespace eml::gemm::blocked {

Grid choose_grid(int64_t m, int64_t n, int64_t k, int threads, int64_t row_unit,
                 int64_t col_unit, int64_t min_part_flops) {
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double part_flops = static_cast<double>(std::max<int64_t>(1, min_part_flops));
  int64_t parts = static_cast<int64_t>(std::min<double>(threads, flops / part_flops));
  const int64_t max_row_parts = (m + row_unit - 1) / row_unit;
  const int64_t max_col_parts = (n + col_unit - 1) / col_unit;
  parts = std::min(parts, max_row_parts * max_col_parts);
  Grid best;
  if (parts <= 1) return best;
  // Among exact factorisations, the one with the smallest part perimeter; a
  // smaller count of parts if no factorisation fits the units.
  for (; parts > 1; --parts) {
    double best_cost = -1;
    for (int64_t rows = 1; rows <= parts; ++rows) {
      if (parts % rows != 0) continue;
      const int64_t cols = parts / rows;
      if (rows > max_row_parts || cols > max_col_parts) continue;
      const double cost = static_cast<double>(m) / rows + static_cast<double>(n) / cols;
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = {rows, cols};
      }
    }
    if (best_cost >= 0) return best;
  }
  return best;
}

Range split_range(int64_t total, int64_t parts, int64_t index, int64_t unit) {
  const int64_t units = (total + unit - 1) / unit;
  const int64_t begin = std::min(total, units * index / parts * unit);
  const int64_t end = std::min(total, units * (index + 1) / parts * unit);
  return {begin, end};
}

}  // namespace eml::gemm::blocked
