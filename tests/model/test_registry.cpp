// register_model / resolve_model: model_name "auto" through config.json's
// model_type, explicit names, impl keys (the seed's rule: the first impl
// answers to `name`, later ones to `name_impl`), and errors that list what is
// registered. Test models use names no other test resolves.
#include "bumblebee/model/registry.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

namespace {

// A protocol that only needs to be told apart from the others.
class RegistryOnlyProtocol : public bb::ModelProtocol {
 public:
  nlohmann::json build_model_config(const nlohmann::json&, const nlohmann::json&) const override { return {}; }
  std::unique_ptr<bb::ModelChunk> build_model(const nlohmann::json&, const bb::BuildContext&) const override {
    return nullptr;
  }
  void load_hf_weights(bb::ModelChunk&, const bb::HFCheckpoint&) const override {}
  void export_hf_weights(bb::ModelChunk&, bb::ParallelContext&, const bb::WeightSink&) const override {}
};

std::string error_of(const std::string& name, const std::string& impl, const std::string& model_type) {
  try {
    bb::resolve_model(name, impl, model_type);
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

struct TwoImpls {
  std::shared_ptr<bb::ModelProtocol> lite = std::make_shared<RegistryOnlyProtocol>();
  std::shared_ptr<bb::ModelProtocol> fused = std::make_shared<RegistryOnlyProtocol>();
  TwoImpls() { bb::register_model("regtest", {"regtest_type", "regtest_alias"}, {{"lite", lite}, {"fused", fused}}); }
};

}  // namespace

TEST(ModelRegistry, AutoResolvesThroughHfModelType) {
  const TwoImpls m;
  EXPECT_EQ(bb::resolve_model("auto", "", "regtest_type"), m.lite);
  EXPECT_EQ(bb::resolve_model("auto", "auto", "regtest_alias"), m.lite);
  EXPECT_EQ(bb::resolve_model("auto", "fused", "regtest_type"), m.fused);
}

TEST(ModelRegistry, ExplicitNameAndImplKey) {
  const TwoImpls m;
  EXPECT_EQ(bb::resolve_model("regtest", "", ""), m.lite);  // the model_type does not matter with a name
  EXPECT_EQ(bb::resolve_model("regtest", "lite", "llama"), m.lite);
  EXPECT_EQ(bb::resolve_model("regtest", "fused", ""), m.fused);
}

TEST(ModelRegistry, LaterImplsAnswerToNameUnderscoreImpl) {
  const TwoImpls m;
  EXPECT_EQ(bb::resolve_model("regtest_fused", "", ""), m.fused);
  EXPECT_EQ(bb::resolve_model("regtest_fused", "lite", ""), m.fused);  // "lite" is the runtime's default impl
  EXPECT_EQ(bb::resolve_model("regtest_fused", "fused", ""), m.fused);
  EXPECT_NE(error_of("regtest_lite", "", "").find("unknown model_name 'regtest_lite'"), std::string::npos)
      << "the first impl answers to the bare name only";
}

TEST(ModelRegistry, BuiltinsAreRegistered) {
  EXPECT_NE(bb::resolve_model("auto", "", "qwen3"), nullptr);
  EXPECT_NE(bb::resolve_model("llama", "lite", ""), nullptr);
}

TEST(ModelRegistry, RegisteringABuiltinNameReplacesIt) {
  const auto builtin = bb::resolve_model("llama", "", "");
  const auto mine = std::make_shared<RegistryOnlyProtocol>();
  bb::register_model("llama", {"llama"}, {{"lite", mine}});
  EXPECT_EQ(bb::resolve_model("auto", "", "llama"), mine);
  bb::register_model("llama", {"llama"}, {{"lite", builtin}});  // the other tests build the real llama
  EXPECT_EQ(bb::resolve_model("llama", "", ""), builtin);
}

TEST(ModelRegistry, ErrorsNameWhatWasAskedAndWhatExists) {
  const TwoImpls m;
  const std::string unknown = error_of("no_such_model", "", "");
  EXPECT_NE(unknown.find("unknown model_name 'no_such_model'"), std::string::npos) << unknown;
  for (const char* listed : {"llama", "qwen3", "regtest", "regtest_fused"})
    EXPECT_NE(unknown.find(listed), std::string::npos) << listed << " missing from: " << unknown;
  const std::string type = error_of("auto", "", "no_such_type");
  EXPECT_NE(type.find("unsupported model_type 'no_such_type'"), std::string::npos) << type;
  const std::string impl = error_of("regtest", "fast", "");
  EXPECT_NE(impl.find("model 'regtest' has no impl 'fast' (impls: lite, fused)"), std::string::npos) << impl;
  const std::string clash = error_of("regtest_fused", "other", "");
  EXPECT_NE(clash.find("selects impl 'fused'"), std::string::npos) << clash;
  EXPECT_THROW(bb::register_model("", {}, {{"lite", m.lite}}), bb::Error);
  EXPECT_THROW(bb::register_model("regtest_empty", {}, {}), bb::Error);
}
