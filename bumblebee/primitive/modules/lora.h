// LoRA adapters on linear layers, as HF peft defines them.
//
//   y = x W^T + s * (x A^T) B^T,   s = alpha / r  (rsLoRA: alpha / sqrt(r))
//
// A [r, in] starts kaiming-uniform (a = sqrt(5)), B [out, r] at zero, so a
// fresh adapter leaves the model unchanged. The adapter of the HF module
// `...q_proj` holds the parameters `...q_proj.lora_A.weight` and
// `...q_proj.lora_B.weight` (peft's names without the adapter name), declared
// right after the base weight. Tensor parallelism follows the base layer: a
// column-parallel base splits B's rows as its own (A replicated, its gradient
// summed over tp); a row-parallel base splits A's columns as its input (B
// replicated), and the low-rank output is reduced together with the base
// output. The base weight is frozen by the runtime's parameter-group rule.
//
// The adapter keeps no activations: backward recomputes x A^T ([T, r], cheap
// beside the base GEMMs) from the input the base layer keeps anyway.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

struct LoraConfig {
  std::vector<std::string> target_modules;   // HF module names (q_proj, ...) or "all-linear"
  int64_t rank = 8;                          // peft's r
  double alpha = 8.0;                        // peft's lora_alpha
  double dropout = 0.0;                      // peft's lora_dropout
  bool use_rslora = false;
  double scaling() const;
  // Whether the linear layer whose weight is `weight_name` (".../q_proj.weight") gets an adapter.
  bool targets(const std::string& weight_name) const;
};

// The HF module names a dense decoder's linear layers have.
const std::vector<std::string>& lora_linear_modules();
// Checks target_modules against lora_linear_modules (the error lists them) and
// the rank and dropout, with messages naming the peft.* key and value.
void check_lora_config(const LoraConfig& cfg);
// Whether a parameter is a LoRA adapter's (its name ends in .lora_A.weight or .lora_B.weight).
bool is_lora_param(const std::string& name);
// "...q_proj.weight" -> "...q_proj.lora_A.weight" (part "lora_A") and so on.
std::string lora_param_name(const std::string& base_weight_name, const char* part);

// Fresh adapters after the base weights were loaded: lora_A kaiming-uniform
// (generator keyed by the name, as Decoder::init_weights), lora_B zero.
void init_lora_params(ParamStore& store, uint64_t seed);

class LoraAdapter {
 public:
  // Declares lora_A and lora_B for `base` (a Column or Row split weight).
  LoraAdapter(ParamStore& store, const Parameter& base, const LoraConfig& cfg, int tp_rank, int tp_size);
  Parameter& A() { return *a_; }
  Parameter& B() { return *b_; }
  // y[:, col .. col + local out) += s * (x A^T) B^T, x as the base GEMM reads
  // it (column-parallel: the full input; row-parallel: the local input, y
  // then the partial sums before the tp reduction); `col` places the output
  // inside a fused GEMM's wider result (gate|up).
  void forward(const Tensor& x, Tensor& y, int64_t col = 0) const;
  // With dy the gradient of that y: dA += s (dy B)^T x, dB += s dy^T (x A^T)
  // (each skipped when frozen) and dx += s (dy B) A.
  void backward(const Tensor& dy, const Tensor& x, Tensor& dx, int64_t col = 0);

 private:
  Parameter* a_;
  Parameter* b_;
  double scaling_;
  // B placed at rows [col, col + out) of a zero [width, r] matrix, so one GEMM
  // writes straight into a fused output without column views.
  Tensor placed_b(int64_t width, int64_t col) const;
};

}  // namespace bb
