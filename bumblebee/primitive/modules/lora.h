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
//
// DoRA (use_dora, peft's DoraLinearLayer) adds the magnitude m [out]
// (`...q_proj.lora_magnitude_vector`) and rescales each output feature:
//
//   y = g * (x W^T + s (x A^T) B^T),   g = m / ||W + s B A||  (row norm of [out, in])
//
// with the norm detached from the gradient as peft does (DoRA paper, 4.3):
// dm = sum_t dy * z / ||.||, and W, A, B and x see dz = g * dy. The norm is
// the rows' own under a column-parallel base and an all-reduce of the squared
// sums under a row-parallel one (m is then replicated and its gradient, a
// partial sum, joins the other replicated parameters' reduction). m starts
// as the norm itself (init_dora_magnitudes), so a fresh adapter is the base.
// Backward recomputes z = x (W + s B A)^T: one base-sized GEMM more than LoRA.
//
// With dropout p > 0 (peft's lora_dropout, training only) the adapter reads
// dropout(x) instead of x (lora_dropout.h); DoRA with dropout is refused.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/primitive/modules/lora_dropout.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

struct LoraConfig {
  std::vector<std::string> target_modules;   // HF module names (q_proj, ...) or "all-linear"
  // peft's target_parameters: the fused MoE expert weights (moe/expert_lora.h),
  // "mlp.experts.gate_up_proj", "mlp.experts.down_proj" (or a dot-suffix of them).
  std::vector<std::string> target_parameters;
  int64_t rank = 8;                          // peft's r
  double alpha = 8.0;                        // peft's lora_alpha
  double dropout = 0.0;                      // peft's lora_dropout
  bool use_rslora = false;
  bool use_dora = false;                     // peft's use_dora: adds the magnitude vector
  double scaling() const;
  // Whether the linear layer whose weight is `weight_name` (".../q_proj.weight") gets an adapter.
  bool targets(const std::string& weight_name) const;
  // Whether the fused expert weight `param` (gate_up_proj or down_proj) gets adapters.
  bool targets_expert_parameter(const std::string& param) const;
};

// The HF module names a dense decoder's linear layers have.
const std::vector<std::string>& lora_linear_modules();
// The fused MoE expert weights target_parameters may name, as transformers names them.
const std::vector<std::string>& lora_expert_parameters();
// Checks target_modules against lora_linear_modules (the error lists them) and
// target_parameters against lora_expert_parameters, the rank and dropout
// (0 <= p < 1; 0 under DoRA and with expert adapters, as peft requires),
// with messages naming the peft.* key and value.
void check_lora_config(const LoraConfig& cfg);
// Whether a parameter is a LoRA adapter's (its name ends in .lora_A.weight,
// .lora_B.weight or DoRA's .lora_magnitude_vector).
bool is_lora_param(const std::string& name);
// "...q_proj.weight" -> "...q_proj.lora_A.weight" (part "lora_A") and so on.
std::string lora_param_name(const std::string& base_weight_name, const char* part);
// "...q_proj.weight" -> "...q_proj.lora_magnitude_vector" (peft's key).
std::string dora_magnitude_name(const std::string& base_weight_name);

// ||W + s B A|| of every output row of the (local) weight, in W's dtype and
// on its device, as float64 on the host; `row_reduce` (a row-parallel
// base's tp group) sums the squared sums over the input shards first.
std::vector<double> dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, double s,
                                     TensorParallel* row_reduce);

// Fresh adapters after the base weights were loaded: lora_A kaiming-uniform
// (generator keyed by the name, as Decoder::init_weights), lora_B zero.
void init_lora_params(ParamStore& store, uint64_t seed);
// DoRA's m = ||W + s B A|| for every adapted weight, after the base weights
// and A, B are in place (peft's init). Collective over tp for row-parallel bases.
void init_dora_magnitudes(ParamStore& store, TensorParallel& tp);

class LoraAdapter {
 public:
  // Declares lora_A and lora_B (and DoRA's magnitude) for `base` (a Column or Row split weight).
  LoraAdapter(ParamStore& store, const Parameter& base, const LoraConfig& cfg, TensorParallel& tp);
  Parameter& A() { return *a_; }
  Parameter& B() { return *b_; }
  // DoRA's magnitude vector; null for plain LoRA.
  Parameter* magnitude() { return m_; }
  // y[:, col .. col + local out) += s * (x A^T) B^T, x as the base GEMM reads
  // it (column-parallel: the full input; row-parallel: the local input, y
  // then the partial sums before the tp reduction); `col` places the output
  // inside a fused GEMM's wider result (gate|up). DoRA then scales those
  // columns by g (y must hold the base output x W^T there already).
  // `drop` is the microbatch's dropout state (seq.lora_dropout).
  void forward(const Tensor& x, Tensor& y, int64_t col = 0, const LoraDropout& drop = {}) const;
  // The gradient the base GEMM and backward() take for that y: dy itself
  // for LoRA; for DoRA dm += sum_t dy z / ||.|| (skipped when frozen) and
  // dy with its columns [col, col + out) scaled by g.
  Tensor output_grad(const Tensor& dy, const Tensor& x, int64_t col = 0);
  // With dy the gradient of that y: dA += s (dy B)^T x, dB += s dy^T (x A^T)
  // (each skipped when frozen) and dx += s (dy B) A; with dropout x is the
  // forward's dropout(x) and the dx term goes through the same mask.
  void backward(const Tensor& dy, const Tensor& x, Tensor& dx, int64_t col = 0, const LoraDropout& drop = {});

 private:
  const Parameter* base_;
  Parameter* a_;
  Parameter* b_;
  Parameter* m_ = nullptr;
  TensorParallel* row_reduce_ = nullptr;   // the tp group of a row-parallel base
  double scaling_;
  double dropout_;
  int64_t in_offset_ = 0;   // a row-parallel base's first local input feature
  // x itself, or dropout(x) when `drop` is training and p > 0.
  Tensor adapter_input(const Tensor& x, const LoraDropout& drop) const;
  bool dropping(const LoraDropout& drop) const { return drop.training && dropout_ > 0.0; }
  // DoRA: W + s B A placed at rows [col, col + out) of a zero [width, in]
  // matrix, and the norms of its rows.
  Tensor placed_direction(int64_t width, int64_t col, std::vector<double>& norm) const;
  // [T, width] of ones with g = m / norm in the columns [col, col + out).
  Tensor placed_scale(int64_t tokens, int64_t width, int64_t col, const std::vector<double>& norm) const;
  // B placed at rows [col, col + out) of a zero [width, r] matrix, so one GEMM
  // writes straight into a fused output without column views.
  Tensor placed_b(int64_t width, int64_t col) const;
};

}  // namespace bb
