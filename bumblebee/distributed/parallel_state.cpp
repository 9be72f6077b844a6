// ParallelState construction: agree on the sizes, lay out the ranks, split the world.
#include "bumblebee/distributed/parallel_state.h"

#include <array>

#include "bumblebee/core/error.h"
#include "bumblebee/distributed/world.h"

namespace bb::dist {

namespace {

// Every rank must ask for the same grid; a rank that disagrees would split
// differently and wait forever. One all-reduce finds the largest and smallest
// value of each size, so every rank sees the same disagreement and throws.
void check_sizes_agree(Communicator& world, const GroupSizes& s) {
  const std::array<const char*, 5> names = {"tp", "cp", "ep", "etp", "pp"};
  const std::array<int, 5> mine = {s.tp, s.cp, s.ep, s.etp, s.pp};
  Tensor range = Tensor::empty({2 * int64_t(mine.size())}, DType::I64);
  int64_t* r = range.data<int64_t>();
  for (size_t i = 0; i < mine.size(); ++i) {
    r[i] = mine[i];
    r[mine.size() + i] = -int64_t(mine[i]);
  }
  world.all_reduce(range, ReduceOp::Max);
  for (size_t i = 0; i < mine.size(); ++i)
    BB_CHECK(r[i] == -r[mine.size() + i], "ranks disagree on the parallel sizes: ", names[i], " ranges from ",
             -r[mine.size() + i], " to ", r[i], " across the ", world.size(), " ranks; every rank must pass the same ",
             "sizes");
}

}  // namespace

class ParallelStateBuilder {
 public:
  static std::shared_ptr<ParallelState> build(World& world, const GroupSizes& sizes) {
    check_sizes_agree(world.comm(), sizes);
    auto ps = std::make_shared<ParallelState>();
    ps->layout_ = resolve_layout(world.size(), sizes);
    ps->world_rank_ = world.rank();
    ps->world_size_ = world.size();
    ps->world_ = world.communicator();
    // Every rank runs the same splits in the same order: MPI_Comm_split is
    // collective over the world.
    ps->tp_ = group(world, ps->layout_, GroupKind::TP);
    ps->cp_ = group(world, ps->layout_, GroupKind::CP);
    ps->dp_ = group(world, ps->layout_, GroupKind::DP);
    ps->dp_cp_ = group(world, ps->layout_, GroupKind::DP_CP);
    ps->pp_ = group(world, ps->layout_, GroupKind::PP);
    ps->tp_cp_ = group(world, ps->layout_, GroupKind::TP_CP);
    ps->ep_ = group(world, ps->layout_, GroupKind::EP);
    ps->etp_ = group(world, ps->layout_, GroupKind::ETP);
    ps->edp_ = group(world, ps->layout_, GroupKind::EDP);
    return ps;
  }

  static std::shared_ptr<ParallelState> single() {
    auto ps = std::make_shared<ParallelState>();
    ps->world_ = make_single_rank_communicator("world");
    ps->tp_ = make_single_rank_communicator("tp");
    ps->cp_ = make_single_rank_communicator("cp");
    ps->dp_ = make_single_rank_communicator("dp");
    ps->dp_cp_ = make_single_rank_communicator("dp_cp");
    ps->pp_ = make_single_rank_communicator("pp");
    ps->tp_cp_ = make_single_rank_communicator("tp_cp");
    ps->ep_ = make_single_rank_communicator("ep");
    ps->etp_ = make_single_rank_communicator("etp");
    ps->edp_ = make_single_rank_communicator("edp");
    return ps;
  }

 private:
  static std::shared_ptr<Communicator> group(World& world, const ParallelLayout& layout, GroupKind kind) {
    const char* name = group_kind_name(kind);
    std::vector<std::vector<int>> groups = group_ranks(layout, kind);
    // Group sizes are the same on every rank, so skipping the split for
    // groups of one is a decision all ranks make together.
    if (groups.front().size() == 1) return make_single_rank_communicator(name);
    GroupPlace place = find_group(groups, world.rank());
    std::shared_ptr<Communicator> comm = world.split(place.group_index, place.rank_in_group, name);
    BB_CHECK(comm->size() == int(groups.front().size()) && comm->rank() == place.rank_in_group, "group ", name,
             ": split gave rank ", comm->rank(), " of ", comm->size(), ", layout says rank ", place.rank_in_group,
             " of ", groups.front().size());
    return comm;
  }
};

std::shared_ptr<ParallelState> ParallelState::single_rank() { return ParallelStateBuilder::single(); }

std::shared_ptr<ParallelState> ParallelState::create(World& world, const GroupSizes& sizes) {
  return ParallelStateBuilder::build(world, sizes);
}

void check_divisible(const std::string& what, int64_t value, const std::string& by_what, int64_t by) {
  BB_CHECK(by > 0, by_what, " must be positive, got ", by);
  BB_CHECK(value % by == 0, what, " ", value, " is not divisible by ", by_what, " ", by);
}

}  // namespace bb::dist
