// Rank layout: which world ranks form each parallel group, as pure arithmetic.
//
// This follows Megatron-Core's RankGenerator with its default order
// "tp-cp-ep-dp-pp" (fastest varying first). Dense layers use the generator
// (tp, cp, dp, pp) with ep folded to 1; expert layers regroup the same world as
// (etp, ep, edp, pp) with cp folded to 1, so a pipeline stage holds the same
// ranks in both views. Within a group, ranks are listed in group-rank order,
// so a rank's position in its list is its rank in that group.
// Nothing here talks to other processes; ParallelState splits the world with it.
#pragma once

#include <string>
#include <vector>


namespace bb::dist {

// What the user asks for; dp (and edp) follow from the world size.
struct GroupSizes {
  int tp = 1, cp = 1, ep = 1, etp = 0, pp = 1;   // etp = 0 means "same as tp"
};

// The sizes of every dimension once the world is known.
struct ParallelLayout {
  int world_size = 1;
  int tp = 1, cp = 1, dp = 1, pp = 1;   // dense layers: world = tp * cp * dp * pp
  int etp = 1, ep = 1, edp = 1;         // expert layers: world = etp * ep * edp * pp
};

// Derives dp and edp. Throws bb::Error naming the numbers when a size is not
// positive or the world does not factor; the outcome depends only on the
// arguments, so every rank given the same arguments fails the same way.
ParallelLayout resolve_layout(int world_size, const GroupSizes& sizes);

enum class GroupKind { TP, CP, DP, DP_CP, PP, TP_CP, EP, ETP, EDP };
const char* group_kind_name(GroupKind kind);   // "tp", "dp_cp", "edp", ...

// Every group of `kind`, each a list of world ranks in group-rank order; the
// groups partition [0, world_size).
std::vector<std::vector<int>> group_ranks(const ParallelLayout& layout, GroupKind kind);

// Which group of `kind` holds `world_rank`, and its position there.
struct GroupPlace {
  int group_index = 0;
  int rank_in_group = 0;
};
GroupPlace find_group(const std::vector<std::vector<int>>& groups, int world_rank);

}  // namespace bb::dist
