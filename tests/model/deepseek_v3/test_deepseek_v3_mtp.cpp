// DeepSeek-V3 multi-token prediction weights: the fixture's MTP layer
// (model.layers.2.*, embedding, norms, eh_proj, MoE decoder layer in the fused
// expert layout, head) loads and exports back bit for bit under its HF names
// (the experts per expert, as every export writes them),
// and a config asking for an MTP layer the checkpoint lacks is an error naming
// the missing tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

TEST(DeepseekV3Mtp, ExportsTheMtpLayerAsLoaded) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("deepseek_v3_mtp");
  cfg.backend_cfg.dtype = "float32";
  cfg.export_cfg.dtype = "param";
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  EXPECT_NE(h.model().params().find("model.layers.2.eh_proj.weight"), nullptr);
  const fs::path dir = fs::path(testing::TempDir()) / ("bb_dsv3_mtp_export_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  rt->save_hf_checkpoint(h, dir.string());
  // The fixture stores its experts fused, and the export follows the source's layout: every tensor comes back.
  const HFCheckpoint in = HFCheckpoint::open(cfg.hf_path), out = HFCheckpoint::open(dir.string());
  std::set<std::string> mtp;
  for (const std::string& n : in.names()) {
    ASSERT_TRUE(out.has(n)) << "the export lacks " << n;
    if (n.rfind("model.layers.2.", 0) == 0) mtp.insert(n);
    EXPECT_EQ(out.get(n).to_doubles(), in.get(n).to_doubles()) << n;
  }
  for (const char* part : {"embed_tokens.weight", "enorm.weight", "hnorm.weight", "eh_proj.weight",
                           "shared_head.norm.weight", "shared_head.head.weight", "self_attn.q_a_proj.weight",
                           "mlp.gate.e_score_correction_bias", "mlp.shared_experts.down_proj.weight",
                           "mlp.experts.gate_up_proj", "mlp.experts.down_proj"})
    EXPECT_TRUE(mtp.count(std::string("model.layers.2.") + part)) << part;
  fs::remove_all(dir);
}

TEST(DeepseekV3Mtp, MissingMtpWeightsNameTheTensor) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("deepseek_v3_mla");   // 3 layers, no MTP layer on disk
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.model_overrides = {{"num_nextn_predict_layers", 1}};
  try {
    auto rt = create_runtime(cfg);
    ModelHandle h = rt->build_model();
    FAIL() << "loaded an MTP layer the checkpoint does not have";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks tensor 'model.layers.3."), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
