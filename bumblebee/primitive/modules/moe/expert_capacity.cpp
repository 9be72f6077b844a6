// Expert capacity: the capacity and the rows each expert keeps.
#include "bumblebee/primitive/modules/moe/expert_capacity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bumblebee/core/error.h"

namespace bb {

int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t num_experts, double capacity_factor) {
  BB_CHECK(capacity_factor > 0, "moe_expert_capacity_factor must be positive, got ", capacity_factor);
  return int64_t(std::ceil(double(tokens * top_k) / double(num_experts) * capacity_factor));
}

std::vector<double> capacity_keep_mask(const std::vector<double>& row_weights,
                                       const std::vector<int64_t>& rows_per_expert, int64_t capacity) {
  std::vector<double> keep(row_weights.size(), 1.0);
  size_t first = 0;
  for (int64_t count : rows_per_expert) {
    if (count > capacity) {
      std::vector<size_t> rows(static_cast<size_t>(count));
      std::iota(rows.begin(), rows.end(), first);
      std::stable_sort(rows.begin(), rows.end(),
                       [&](size_t a, size_t b) { return row_weights[a] > row_weights[b]; });
      for (size_t i = size_t(capacity); i < rows.size(); ++i) keep[rows[i]] = 0.0;
    }
    first += size_t(count);
  }
  BB_CHECK(first == row_weights.size(), "expert capacity: ", row_weights.size(), " rows but the experts count ",
           first);
  return keep;
}

}  // namespace bb
