// Reading format version 4 training checkpoints (checkpoint_v4.h).
#include "bumblebee/runtime/checkpoint_v4.h"

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/peft_adapter.h"
#include "bumblebee/runtime/checkpoint_files.h"

namespace bb {

namespace {

using State = DistributedOptimizer::State;

struct OptimizerPart {
  State state;
  const char* name;   // folder under optimizer/
};
constexpr OptimizerPart kOptimizerParts[] = {
    {State::Master, "master"}, {State::ExpAvg, "exp_avg"}, {State::ExpAvgSq, "exp_avg_sq"}};

// While alive, every trainable group's parameters view a zero buffer of the
// master dtype, laid out as its flat parameters, to be filled by the model's
// import; restores the parameter buffers when it ends.
class StateAsParams {
 public:
  explicit StateAsParams(DistributedOptimizer& opt) : opt_(opt) {
    for (DistributedOptimizer::GroupState& g : opt.groups())
      saved_.push_back(g.group->swap_flat_params(
          Tensor::zeros({g.group->flat_params().numel()}, g.master.dtype(), g.master.device())));
  }
  ~StateAsParams() {
    for (size_t i = 0; i < saved_.size(); ++i) opt_.groups()[i].group->swap_flat_params(std::move(saved_[i]));
  }
  // The buffer group i's parameters view now.
  const Tensor& state(size_t i) { return opt_.groups()[i].group->flat_params(); }

 private:
  DistributedOptimizer& opt_;
  std::vector<Tensor> saved_;
};

// The tensors an optimizer folder must hold, as trainer_state.json records them.
void check_covered(const nlohmann::json& recorded, const HFCheckpoint& ck, const std::string& what) {
  for (const std::string& name : ck.names()) {
    BB_CHECK(recorded.contains(name), "trainer_state.json of ", what, " does not cover tensor '", name, "' of ",
             ck.dir());
    const nlohmann::json& r = recorded.at(name);
    BB_CHECK(r.at("shape").get<Shape>() == ck.shape(name) && r.at("dtype").get<std::string>() ==
                 dtype_name(ck.dtype(name)),
             "tensor '", name, "' of ", ck.dir(), " is ", dtype_name(ck.dtype(name)), shape_str(ck.shape(name)),
             ", trainer_state.json of ", what, " records ", r.dump());
  }
  for (const auto& [name, r] : recorded.items())
    BB_CHECK(ck.has(name), ck.dir(), " lacks tensor '", name, "' that trainer_state.json of ", what, " records");
}

}  // namespace

void load_checkpoint_v4(ModelState& st, const std::string& dir, const nlohmann::json& state) {
  std::vector<std::string> files = checkpoint_files_under(dir, "model/");
  for (const OptimizerPart& part : kOptimizerParts) {
    const std::vector<std::string> f = checkpoint_files_under(dir, std::string("optimizer/") + part.name + "/");
    BB_CHECK(!f.empty(), "checkpoint ", dir, " has no optimizer/", part.name, "/ in its manifest");
    files.insert(files.end(), f.begin(), f.end());
  }
  for (const std::string& f : checkpoint_files_under(dir, "adapter/")) files.push_back(f);
  verify_checkpoint_files(dir, files);

  const HFCheckpoint model = HFCheckpoint::open(dir + "/model");
  for (auto& chunk : st.chunks) {
    st.protocol->load_hf_weights(*chunk, model);
    if (const LoraConfig* lora = chunk->params().lora()) load_peft_adapter(chunk->params(), dir + "/adapter", *lora, chunk->layers());
  }
  DistributedOptimizer& opt = *st.optimizer;
  for (const OptimizerPart& part : kOptimizerParts) {
    const std::string part_dir = dir + "/optimizer/" + part.name;
    StateAsParams view(opt);
    if (const LoraConfig* lora = st.chunks.front()->params().lora()) {
      for (auto& chunk : st.chunks) load_peft_adapter(chunk->params(), part_dir + "/adapter", *lora, chunk->layers());
    } else {
      const HFCheckpoint ck = HFCheckpoint::open(part_dir);
      check_covered(state.at("optimizer_tensors").at(part.name), ck, dir);
      for (auto& chunk : st.chunks) st.protocol->load_hf_weights(*chunk, ck);
    }
    for (size_t i = 0; i < opt.groups().size(); ++i) opt.scatter_state(opt.groups()[i], part.state, view.state(i));
  }
}

}  // namespace bb
