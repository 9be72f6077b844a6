// The all-ranks pipeline simulation.
#include "bumblebee/runtime/pipeline_simulation.h"

#include <algorithm>
#include <map>

namespace bb {

namespace {

struct Posted {
  PipelineMessage message;
  double time;
};

// The messages of one ordered pair of ranks, in issue order.
struct Channel {
  std::vector<Posted> sends, recvs;
};

}  // namespace

PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& programs, double forward_cost,
                                     double backward_cost) {
  PipelineSimulation sim;
  const int pp = int(programs.size());
  sim.ranks = pp;
  std::map<std::pair<int, int>, Channel> channels;   // (src, dst)
  std::vector<size_t> pc(size_t(pp), 0);
  std::vector<double> clock(size_t(pp), 0.0);
  // For a posted Exchange: the index of each of its messages in its channel's list.
  std::vector<std::vector<size_t>> slots(static_cast<size_t>(pp));
  std::vector<bool> posted(size_t(pp), false);
  auto fail = [&](const std::string& why) {
    sim.error = why;
    return sim;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const std::vector<PipelineAction>& prog = programs[size_t(r)];
      while (pc[size_t(r)] < prog.size()) {
        const PipelineAction& a = prog[pc[size_t(r)]];
        if (a.kind != PipelineAction::Kind::Exchange) {
          const double cost = a.kind == PipelineAction::Kind::Forward ? forward_cost : backward_cost;
          clock[size_t(r)] += cost;
          sim.busy += cost;
          ++pc[size_t(r)];
          progress = true;
          continue;
        }
        if (!posted[size_t(r)]) {
          slots[size_t(r)].clear();
          for (const PipelineMessage& m : a.messages) {
            Channel& ch = m.send ? channels[{r, m.peer}] : channels[{m.peer, r}];
            std::vector<Posted>& list = m.send ? ch.sends : ch.recvs;
            slots[size_t(r)].push_back(list.size());
            list.push_back({m, clock[size_t(r)]});
          }
          posted[size_t(r)] = true;
          progress = true;
        }
        double done = clock[size_t(r)];
        bool complete = true;
        for (size_t i = 0; i < a.messages.size() && complete; ++i) {
          const PipelineMessage& m = a.messages[i];
          Channel& ch = m.send ? channels[{r, m.peer}] : channels[{m.peer, r}];
          const std::vector<Posted>& other = m.send ? ch.recvs : ch.sends;
          if (other.size() <= slots[size_t(r)][i]) {
            complete = false;
            break;
          }
          const PipelineMessage& o = other[slots[size_t(r)][i]].message;
          if (o.forward != m.forward || o.microbatch != m.microbatch || o.from_stage != m.from_stage)
            return fail("rank " + std::to_string(r) + "'s " + describe(a) + " message " + std::to_string(i) +
                        " meets rank " + std::to_string(m.peer) + "'s " + (o.send ? "send" : "receive") + " of " +
                        (o.forward ? "F" : "B") + std::to_string(o.microbatch) + "@" + std::to_string(o.from_stage));
          done = std::max(done, other[slots[size_t(r)][i]].time);
        }
        if (!complete) break;
        clock[size_t(r)] = done;
        posted[size_t(r)] = false;
        ++pc[size_t(r)];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < pp; ++r)
    if (pc[size_t(r)] < programs[size_t(r)].size())
      blocked += " rank " + std::to_string(r) + " at action " + std::to_string(pc[size_t(r)]) + " " +
                 describe(programs[size_t(r)][pc[size_t(r)]]) + ";";
  if (!blocked.empty()) return fail("deadlock:" + blocked);
  for (const auto& [pair, ch] : channels) {
    if (ch.sends.size() != ch.recvs.size())
      return fail("rank " + std::to_string(pair.first) + " sends " + std::to_string(ch.sends.size()) +
                  " messages to rank " + std::to_string(pair.second) + ", which receives " +
                  std::to_string(ch.recvs.size()));
    sim.messages += int(ch.sends.size());
  }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  sim.ok = true;
  return sim;
}

}  // namespace bb
