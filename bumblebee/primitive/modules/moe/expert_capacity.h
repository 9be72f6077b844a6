// Expert capacity with token dropping (Megatron's moe_expert_capacity_factor
// with moe_token_drop_policy = probs, no padding to capacity).
//
// Each expert takes at most capacity = ceil(T k / E x factor) rows of a
// microbatch; beyond that, the rows with the lowest routing weight are
// dropped (equal weights: the later row goes). A dropped row keeps its place
// in the sorted rows but gets weight 0, so its expert output adds nothing to
// its token and no gradient flows through it; the token keeps its other
// choices. The counts that the auxiliary loss and the load metrics see are
// those before dropping, as in Megatron.
#pragma once

#include <cstdint>
#include <vector>

namespace bb {

int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t num_experts, double capacity_factor);

// row_weights [N] of rows sorted by expert (rows_per_expert [E] each): 1 for
// a kept row, 0 for a dropped one.
std::vector<double> capacity_keep_mask(const std::vector<double>& row_weights,
                                       const std::vector<int64_t>& rows_per_expert, int64_t capacity);

}  // namespace bb
