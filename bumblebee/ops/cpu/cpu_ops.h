// The CPU backend of the op surface: float32 and float64, the correctness oracle.
//
// One function per ops:: function, with the same name and parameters. ops.cpp
// has already checked shapes, devices and dtypes before calling here, so these
// only compute. Reductions that decide a result's accuracy (sums, softmax
// denominators, attention and RMSNorm statistics) accumulate in double; the
// rest computes in the tensors' dtype, so float64 runs are exact to rounding.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb::cpu {

// gemm.cpp
void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha, double beta);

// grouped_gemm.cpp
void grouped_gemm(const Tensor& a, const std::vector<Tensor>& w, bool trans_w, const std::vector<int64_t>& offsets,
                  Tensor& c, double alpha, double beta);
void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                              const std::vector<Tensor>& dw, double alpha, double beta);

// elementwise.cpp
void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_(Tensor& acc, const Tensor& x, double alpha);
void scale_(Tensor& x, double s);
void mul(const Tensor& a, const Tensor& b, Tensor& out);

// column_gather.cpp
void gather_columns(const Tensor& x, const ops::ColumnIndex& index, Tensor& y);
void scatter_add_columns(const Tensor& dy, const ops::ColumnIndex& index, Tensor& dx, bool accumulate);

// dropout.cpp
void dropout_mask(Tensor& mask, uint64_t key, int64_t row_stride, int64_t col_offset, double p);

// reduce.cpp
double sum(const Tensor& x);
double sum_squares(const Tensor& x);
int64_t count_zeros(const Tensor& x);
ops::SquaresAndZeros sum_squares_and_zeros(const Tensor& x);
void dot(const Tensor& a, const Tensor& b, Tensor& out);
bool all_finite(const Tensor& x);

// embedding.cpp
void embedding_forward(const Tensor& weight, const Tensor& ids, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight);

// rmsnorm.cpp
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw);

// rope.cpp
void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out);
void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx);

// add_rmsnorm.cpp
void add_rmsnorm_forward(const Tensor& x, const Tensor& branch, const Tensor& w, double eps, Tensor& h, Tensor& y,
                         Tensor& rstd);
void add_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& residual_grad, Tensor& dx, Tensor& dw);

// rmsnorm_rope.cpp
void rmsnorm_rope_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd);
void rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx, Tensor& dw);

// swiglu.cpp
void swiglu_forward(const Tensor& gate_up, Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& d_gate_up);

// attention.cpp
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                       double scale, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv);
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);

// cross_entropy.cpp
void logits_row_max(const Tensor& logits, Tensor& row_max);
void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit);
void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit);
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits);
void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss);

// entropy.cpp
void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum);
void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy);
void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits);

// adamw.cpp
void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const ops::AdamWParams& hp);

// moe_permute.cpp
void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out);
void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx,
                          const Tensor& rows_by_token = Tensor());
void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token = Tensor());
void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs);

// moe_router.cpp
void moe_router_forward(const Tensor& logits, const ops::MoeRouterConfig& cfg, const Tensor& expert_bias,
                        const Tensor& forced_experts, Tensor& scores, Tensor& experts, Tensor& weights);
void moe_router_backward(const Tensor& dweights, const Tensor& dscores_extra, const Tensor& logits,
                         const Tensor& scores, const Tensor& experts, const Tensor& weights,
                         const ops::MoeRouterConfig& cfg, Tensor& dlogits);
void moe_sort_rows(const Tensor& experts, int64_t num_experts, Tensor& token_of_row, Tensor& slot_of_row,
                   Tensor& rows_per_expert);
void moe_rows_by_token(const Tensor& token_of_row, const Tensor& slot_of_row, Tensor& rows_by_token);
void moe_row_weights(const Tensor& weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                     Tensor& row_weights);
void moe_gather_row_grads(const Tensor& drow_weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                          Tensor& dweights);
void moe_score_sums(const Tensor& scores, Tensor& sums);
void moe_router_lse(const Tensor& logits, Tensor& lse);
void moe_router_z_loss_backward(const Tensor& logits, const Tensor& lse, double scale, Tensor& dlogits);

}  // namespace bb::cpu
