// Frozen parameters through the runtime (BBConfig::frozen_params): the frozen
// embedding has no gradient and keeps its loaded values over AdamW steps,
// while every other parameter gets the same gradient as in a run that trains
// everything.
#include <gtest/gtest.h>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

struct TrainingRun {
  std::unique_ptr<Runtime> rt;
  ModelHandle h;
};

TrainingRun make_run(const std::string& frozen) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("llama3_gqa");
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.frozen_params = frozen;
  cfg.backend_cfg.optimizer.lr = 1e-2;
  TrainingRun r;
  r.rt = create_runtime(cfg);
  r.h = r.rt->build_model();
  return r;
}

TEST(FrozenParams, FrozenEmbeddingKeepsItsValuesAndTheRestTrainAsBefore) {
  TrainingRun all = make_run("");
  TrainingRun part = make_run("model\\.embed_tokens\\.weight");
  const PackedBatch batch = test::fixture_batch("llama3_gqa");
  Parameter& embed = part.h.model().params().get("model.embed_tokens.weight");
  EXPECT_FALSE(embed.requires_grad());
  const std::vector<double> embed_before = embed.value.to_doubles();

  auto mode_all = all.rt->train_mode(all.h);
  auto mode_part = part.rt->train_mode(part.h);
  for (TrainingRun* r : {&all, &part}) {
    r->rt->zero_grad(r->h);
    r->rt->forward_backward(r->h, batch);
  }
  for (Parameter& p : part.h.model().params().params()) {
    if (!p.requires_grad()) continue;
    EXPECT_EQ(p.grad.to_doubles(), all.h.model().params().get(p.name).grad.to_doubles()) << p.name;
  }
  for (int step = 0; step < 2; ++step) {
    part.rt->zero_grad(part.h);
    part.rt->forward_backward(part.h, batch);
    EXPECT_TRUE(part.rt->optimizer_step(part.h).update_successful);
  }
  EXPECT_EQ(embed.value.to_doubles(), embed_before);
  EXPECT_NE(part.h.model().params().get("lm_head.weight").value.to_doubles(),
            all.h.model().params().get("lm_head.weight").value.to_doubles());
}

}  // namespace
}  // namespace bb
