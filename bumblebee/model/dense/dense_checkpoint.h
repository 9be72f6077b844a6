// The HF checkpoint of a dense model (Llama 3, Qwen3), as transformers writes
// it: every tensor's name, the native parameter it fills, the part of the
// model that holds it and its tensor-parallel split.
//
//   model.embed_tokens.weight                 embedding   vocab-parallel
//   model.layers.{i}.input_layernorm.weight   layer i     replicated
//   model.layers.{i}.self_attn.{q,k,v}_proj   layer i     column-parallel (whole heads per rank)
//   model.layers.{i}.self_attn.o_proj         layer i     row-parallel
//   model.layers.{i}.self_attn.{q,k}_norm     layer i     replicated (Qwen3)
//   model.layers.{i}.post_attention_layernorm layer i     replicated
//   model.layers.{i}.mlp.{gate,up}_proj       layer i     column-parallel
//   model.layers.{i}.mlp.down_proj            layer i     row-parallel
//   model.norm.weight                         head        replicated
//   lm_head.weight                            head        vocab-parallel (absent when tied)
// Native names are the HF names: the modules are named after HF's.
#pragma once

#include "bumblebee/model/dense/dense_config.h"
#include "bumblebee/primitive/ckpt/weight_mapping.h"

namespace bb {

CheckpointMapping dense_checkpoint_mapping(const DenseConfig& cfg);

}  // namespace bb
