// ModelProtocol shared by the dense decoder models; each model sets whether
// it carries per-head q/k RMSNorm.
#pragma once

#include "bumblebee/model/protocol.h"

namespace bb {

class DenseProtocol : public ModelProtocol {
 public:
  explicit DenseProtocol(bool qk_norm) : qk_norm_(qk_norm) {}
  nlohmann::json build_model_config(const nlohmann::json& hf_config, const nlohmann::json& overrides) const override;
  std::unique_ptr<CausalLM> build_model(const nlohmann::json& model_config, const BuildContext& ctx) const override;

 private:
  bool qk_norm_;
};

}  // namespace bb
