// DenseProtocol: config parsing and construction of DenseDecoder.
#include "bumblebee/model/dense/dense_protocol.h"

#include "bumblebee/model/dense/dense_decoder.h"

namespace bb {

nlohmann::json DenseProtocol::build_model_config(const nlohmann::json& hf_config,
                                                 const nlohmann::json& overrides) const {
  return parse_dense_hf_config(hf_config, qk_norm_, overrides).to_json();
}

std::unique_ptr<CausalLM> DenseProtocol::build_model(const nlohmann::json& model_config,
                                                     const BuildContext& ctx) const {
  for (const auto& [k, v] : ctx.impl_cfg.items()) BB_FAIL("unknown impl_cfg key '", k, "' for dense models");
  return std::make_unique<DenseDecoder>(DenseConfig::from_json(model_config), ctx);
}

}  // namespace bb
