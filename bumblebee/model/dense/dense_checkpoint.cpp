// dense_checkpoint_mapping: the table of dense_checkpoint.h, per layer.
#include "bumblebee/model/dense/dense_checkpoint.h"

namespace bb {

CheckpointMapping dense_checkpoint_mapping(const DenseConfig& cfg) {
  CheckpointMapping m;
  auto add = [&m](const std::string& name, ModelPart part, int64_t layer, ShardKind split) {
    m.rules.push_back({name, name, part, layer, split});
  };
  add("model.embed_tokens.weight", ModelPart::Embedding, -1, ShardKind::Vocab);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", ModelPart::Layer, i, ShardKind::Replicated);
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      add(p + "self_attn." + proj + ".weight", ModelPart::Layer, i, ShardKind::Column);
    add(p + "self_attn.o_proj.weight", ModelPart::Layer, i, ShardKind::Row);
    if (cfg.qk_norm) {
      add(p + "self_attn.q_norm.weight", ModelPart::Layer, i, ShardKind::Replicated);
      add(p + "self_attn.k_norm.weight", ModelPart::Layer, i, ShardKind::Replicated);
    }
    add(p + "post_attention_layernorm.weight", ModelPart::Layer, i, ShardKind::Replicated);
    add(p + "mlp.gate_proj.weight", ModelPart::Layer, i, ShardKind::Column);
    add(p + "mlp.up_proj.weight", ModelPart::Layer, i, ShardKind::Column);
    add(p + "mlp.down_proj.weight", ModelPart::Layer, i, ShardKind::Row);
  }
  add("model.norm.weight", ModelPart::Head, -1, ShardKind::Replicated);
  if (cfg.tie_word_embeddings) {
    m.tied_embedding = true;
    m.ignored.push_back("lm_head.weight");
  } else {
    add("lm_head.weight", ModelPart::Head, -1, ShardKind::Vocab);
  }
  return m;
}

}  // namespace bb
