// Rank layout arithmetic: world ranks as mixed-radix numbers over the parallel dimensions.
#include "bumblebee/distributed/rank_layout.h"

#include "bumblebee/core/error.h"

namespace bb::dist {

namespace {

// One dimension of the rank grid; `in_group` marks the dimensions a group spans.
struct Dim {
  int size;
  bool in_group;
};

// A world rank is sum(index[d] * stride[d]) with stride[d] the product of the
// sizes before d. A group fixes the indices of the dimensions it does not span
// (enumerated first-dimension-fastest to number the groups) and runs over the
// ones it spans (first-dimension-fastest to number ranks inside the group).
std::vector<std::vector<int>> orthogonal_groups(const std::vector<Dim>& dims) {
  std::vector<int> stride(dims.size());
  int world = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    stride[d] = world;
    world *= dims[d].size;
  }
  auto offset_of = [&](int index, bool in_group) {
    int offset = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].in_group != in_group) continue;
      offset += (index % dims[d].size) * stride[d];
      index /= dims[d].size;
    }
    return offset;
  };
  int group_size = 1;
  for (const Dim& d : dims)
    if (d.in_group) group_size *= d.size;
  std::vector<std::vector<int>> groups(size_t(world / group_size));
  for (int g = 0; g < int(groups.size()); ++g) {
    int base = offset_of(g, false);
    groups[size_t(g)].reserve(size_t(group_size));
    for (int r = 0; r < group_size; ++r) groups[size_t(g)].push_back(base + offset_of(r, true));
  }
  return groups;
}

}  // namespace

ParallelLayout resolve_layout(int world_size, const GroupSizes& sizes) {
  BB_CHECK(world_size >= 1, "world size must be at least 1, got ", world_size);
  BB_CHECK(sizes.tp >= 1 && sizes.cp >= 1 && sizes.ep >= 1 && sizes.pp >= 1 && sizes.etp >= 0,
           "parallel sizes must be positive: tp ", sizes.tp, ", cp ", sizes.cp, ", ep ", sizes.ep, ", pp ", sizes.pp,
           ", etp ", sizes.etp, " (etp 0 means same as tp)");
  ParallelLayout l;
  l.world_size = world_size;
  l.tp = sizes.tp;
  l.cp = sizes.cp;
  l.pp = sizes.pp;
  l.ep = sizes.ep;
  l.etp = sizes.etp == 0 ? sizes.tp : sizes.etp;
  const int model = l.tp * l.cp * l.pp;
  BB_CHECK(world_size % model == 0, "world size ", world_size, " is not divisible by tp*cp*pp = ", model, " (tp ",
           l.tp, ", cp ", l.cp, ", pp ", l.pp, ")");
  l.dp = world_size / model;
  const int stage = l.tp * l.cp * l.dp;
  const int expert_model = l.etp * l.ep;
  BB_CHECK(stage % expert_model == 0, "tp*cp*dp = ", stage, " (tp ", l.tp, ", cp ", l.cp, ", dp ", l.dp,
           ") is not divisible by etp*ep = ", expert_model, " (etp ", l.etp, ", ep ", l.ep, ")");
  l.edp = stage / expert_model;
  return l;
}

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return "tp";
    case GroupKind::CP: return "cp";
    case GroupKind::DP: return "dp";
    case GroupKind::DP_CP: return "dp_cp";
    case GroupKind::PP: return "pp";
    case GroupKind::TP_CP: return "tp_cp";
    case GroupKind::EP: return "ep";
    case GroupKind::ETP: return "etp";
    case GroupKind::EDP: return "edp";
  }
  return "?";
}

std::vector<std::vector<int>> group_ranks(const ParallelLayout& l, GroupKind kind) {
  // Dense order tp-cp-dp-pp (ep is 1 there); expert order etp-ep-edp-pp (cp is 1 there).
  auto dense = [&](bool tp, bool cp, bool dp, bool pp) {
    return orthogonal_groups({{l.tp, tp}, {l.cp, cp}, {l.dp, dp}, {l.pp, pp}});
  };
  auto expert = [&](bool etp, bool ep, bool edp, bool pp) {
    return orthogonal_groups({{l.etp, etp}, {l.ep, ep}, {l.edp, edp}, {l.pp, pp}});
  };
  switch (kind) {
    case GroupKind::TP: return dense(true, false, false, false);
    case GroupKind::CP: return dense(false, true, false, false);
    case GroupKind::DP: return dense(false, false, true, false);
    case GroupKind::DP_CP: return dense(false, true, true, false);
    case GroupKind::PP: return dense(false, false, false, true);
    case GroupKind::TP_CP: return dense(true, true, false, false);
    case GroupKind::EP: return expert(false, true, false, false);
    case GroupKind::ETP: return expert(true, false, false, false);
    case GroupKind::EDP: return expert(false, false, true, false);
  }
  BB_FAIL("unknown group kind ", int(kind));
}

GroupPlace find_group(const std::vector<std::vector<int>>& groups, int world_rank) {
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t r = 0; r < groups[g].size(); ++r)
      if (groups[g][r] == world_rank) return {int(g), int(r)};
  BB_FAIL("world rank ", world_rank, " is in none of the ", groups.size(), " groups");
}

}  // namespace bb::dist
