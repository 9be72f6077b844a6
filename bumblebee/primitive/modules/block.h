// Block: a piece of the residual stream with explicit forward and backward,
// the unit that decoders stack and that recompute wraps.
//
// A decoder layer is a Block; so is its feed-forward part (the slot a layer
// fills with a dense SwiGLU MLP or, for MoE models, a mixture of experts).
// forward keeps what backward needs in a BlockState of its own type, which
// the caller holds per microbatch and hands back to backward (which consumes
// it). Parameters are declared in the module's constructor; backward
// accumulates their gradients (never overwrites them) and skips frozen ones.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "bumblebee/core/tensor.h"
#include "bumblebee/primitive/modules/lora_dropout.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

class RouterAuxLoss;   // primitive/modules/moe/router_aux_loss.h
class RouterReplay;    // primitive/modules/moe/router_replay.h

// Per-microbatch inputs shared by every layer: positions and sequence layout.
// With context parallelism (cp > 1) the T local tokens are two halves, chunk
// r of every sequence then chunk 2cp-1-r of every sequence (the zigzag split,
// runtime/microbatch.h), and cu_seqlens holds the offsets of each sequence's
// chunk within one half (cu_seqlens[S] = T / 2), max_seqlen the longest chunk.
struct SequenceLayout {
  Tensor position_ids;   // [T] int64 on the compute device
  Tensor cu_seqlens;     // [S+1] int32 on the compute device
  int64_t max_seqlen = 0;
  // MoE models: the microbatch's accumulator that every MoE layer records its
  // router losses and load into (null otherwise).
  RouterAuxLoss* router_aux = nullptr;
  // Router replay: the experts each MoE layer records or is given (null: none).
  RouterReplay* router_replay = nullptr;
  // LoRA dropout of this microbatch (training with peft.dropout > 0; else the identity).
  LoraDropout lora_dropout;
};

struct BlockState {
  virtual ~BlockState() = default;
};

class Block {
 public:
  virtual ~Block() = default;
  // x [T_local, H] -> y of the same shape. `state` receives what backward needs.
  virtual Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) = 0;
  // dy -> dx; accumulates parameter gradients and releases `state`.
  virtual Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) = 0;

  // Selective recompute of what produced the block's input (the `layernorm`
  // module: the decoder layer's norms). After forward, drop_input lets go of
  // the tensors of `state` that are x itself or its all-gather into the
  // tensor-parallel region, and says whether it did; if so the caller
  // rebuilds x bit for bit and hands it to restore_input before backward
  // (which all-gathers it again under sequence parallelism). A block that
  // holds no copy of x, or cannot drop it, keeps its state: the defaults.
  virtual bool drop_input(BlockState& /*state*/) { return false; }
  virtual void restore_input(const Tensor& /*x*/, BlockState& /*state*/) {}
};

// Builds a block whose parameters are named `prefix` + their HF suffix, at the
// point of the caller's construction where its parameters must be declared
// (parameter order follows HF's module order).
using BlockFactory = std::function<std::unique_ptr<Block>(ParamStore& store, const std::string& prefix)>;

}  // namespace bb
