// The CUDA backend of the op surface: one function per function of
// bumblebee/ops/ops.h, same name and parameters, so the op files
// (bumblebee/ops/ops_*.cpp) dispatch a CUDA tensor to cuda::<name>(same
// args). Semantics are those documented in ops.h.
//
// Dtypes on CUDA: activations bfloat16 (float32 accepted where an fp32 path is
// useful, noted per op); parameter gradients, rstd, lse, cross-entropy
// statistics and optimizer state float32; index tensors int32 or int64. All
// work is queued on the backend's current stream; only the reductions that
// return a number to the host synchronise.
//
// defined in: gemm.cu, grouped_gemm.cu, elementwise.cu, column_gather.cu, reduce.cu, embedding.cu, rmsnorm.cu,
// rope.cu, rmsnorm_rope.cu, swiglu.cu, attention.cpp, cross_entropy.cu, softmax_stats.cu, entropy.cu, adamw.cu,
// moe_permute.cu, moe_router.cu
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb::cuda {

// gemm.cu. a, b bfloat16 with c bfloat16 or float32; or all float32.
void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha = 1.0,
            double beta = 0.0);

// grouped_gemm.cu. a, w, c (dy, x) one dtype: bfloat16, float16, float32 or
// float64; dw that dtype, or float32 with bfloat16/float16 inputs. With
// BB_GROUPED_GEMM=cutlass (the default in builds with CUTLASS) bfloat16 calls
// with K and N multiples of 8 run as one CUTLASS sm_90a grouped launch.
// Otherwise (BB_GROUPED_GEMM=cublas) where all operands share a dtype the
// groups run as one cublasGemmGroupedBatchedEx (its pointer arrays uploaded to
// device scratch in one copy); fp32 dw of 16-bit inputs, which that call does
// not take, runs as a loop of cublasGemmEx on the same stream.
bool cutlass_grouped_gemm_built();
void grouped_gemm(const Tensor& a, const std::vector<Tensor>& w, bool trans_w, const std::vector<int64_t>& offsets,
                  Tensor& c, double alpha, double beta);
void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                              const std::vector<Tensor>& dw, double alpha, double beta);

// elementwise.cu. add/mul: one dtype for all tensors (bfloat16 or float32),
// and add also a, out float32 with b bfloat16 (the fp32 residual stream);
// add_: acc and x each bfloat16 or float32; scale_: bfloat16 or float32.
void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_(Tensor& acc, const Tensor& x, double alpha = 1.0);
void scale_(Tensor& x, double s);
void mul(const Tensor& a, const Tensor& b, Tensor& out);

// column_gather.cu. x, y (dy, dx) one dtype: bfloat16, float16, float32 or
// float64; the index tensors int64 on the device (ops::make_column_index).
void gather_columns(const Tensor& x, const ops::ColumnIndex& index, Tensor& y);
void scatter_add_columns(const Tensor& dy, const ops::ColumnIndex& index, Tensor& dx, bool accumulate);

// reduce.cu. Any floating dtype; each call synchronises once.
double sum(const Tensor& x);
double sum_squares(const Tensor& x);
int64_t count_zeros(const Tensor& x);
ops::SquaresAndZeros sum_squares_and_zeros(const Tensor& x);
void dot(const Tensor& a, const Tensor& b, Tensor& out);
bool all_finite(const Tensor& x);

// embedding.cu. weight and out bfloat16 or float32 (same), or out float32 with
// weight bfloat16; grad_out bfloat16 or float32; grad_weight float32 or bfloat16.
void embedding_forward(const Tensor& weight, const Tensor& ids, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight);

// rmsnorm.cu. x, w, y, dy, dx one dtype (bfloat16 or float32), or x and dx
// float32 with w, y, dy bfloat16; rstd float32; dw float32 or bfloat16.
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw);
// Also rmsnorm.cu: the residual add with RMSNorm. x, h, residual_grad and dx
// in x's dtype, branch, y and dy in w's, the x / w pairs rmsnorm_forward
// takes; rows of the team kernels run one kernel each way, others the two
// ops in sequence.
void add_rmsnorm_forward(const Tensor& x, const Tensor& branch, const Tensor& w, double eps, Tensor& h, Tensor& y,
                         Tensor& rstd);
void add_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& residual_grad, Tensor& dx, Tensor& dw);

// rope.cu. x/out bfloat16 or float32; inv_freq float64 or float32, on the host
// (passed by value to the kernel, at most 512 frequencies) or on the device.
void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out);
void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx);

// rmsnorm_rope.cu. RMSNorm then RoPE over rows of one head: x, w, y, dy, dx,
// rstd and dw as rmsnorm.cu takes them, position_ids and inv_freq as rope.cu
// does. Head dims 64, 128 and 256 on the 16-byte grid run the fused kernels,
// other calls the two ops in sequence.
void rmsnorm_rope_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd);
void rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx, Tensor& dw);

// swiglu.cu. bfloat16 or float32, one dtype.
void swiglu_forward(const Tensor& gate_up, Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& d_gate_up);

// attention.cpp. q, k, v, out, dout, dq, dk, dv bfloat16; lse float32; head
// dimension 1 to 256. ops::set_attention_backend (the runtime's
// backend.attention_backend) or BB_ATTENTION_BACKEND picks the implementation;
// every implementation takes both masks and separate q / kv spans.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                       int64_t max_seqlen, double scale, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, double scale, Tensor& dq,
                        Tensor& dk, Tensor& dv);
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                       double scale, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv);

// attention_merge.cu. out and part_out bfloat16, lse and part_lse float32.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);

// entropy.cu. logits/dlogits bfloat16 or float32; statistics, dloss and dentropy float32.
void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum);
void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy);
void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits);

// cross_entropy.cu. logits/dlogits bfloat16 or float32; statistics and dloss float32.
void logits_row_max(const Tensor& logits, Tensor& row_max);
void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit);
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits);
// lse = row_max + log(sumexp), loss = lse - target_logit; all [N] float32.
void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss);

// softmax_stats.cu. logits bfloat16 or float32; statistics float32.
void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit);

// adamw.cu. The storage combinations of ops::adamw_step (ops.h), which checks them.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const ops::AdamWParams& hp);

// moe_permute.cu. x, out, y, dout, dx, dy one dtype, bfloat16 or float32;
// probs, dprobs float32; token_of_row int32/int64 on the device. The token
// sums (moe_permute_backward, moe_unpermute) are fp32 and deterministic (a
// gather through a sorted inverse index, no atomics). token_of_row is not
// range-checked (no host sync): a row naming a token outside [0, T) gets NaN
// in the row-major outputs and is left out of the token sums.
void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out);
void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx,
                          const Tensor& rows_by_token = Tensor());
void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token = Tensor());
void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs);

// moe_router.cu. logits and dlogits bfloat16 or float32; scores, weights,
// dweights, dscores_extra, expert_bias, drow_weights, row_weights and sums
// float32; experts, forced_experts and the row indices int64. One thread per
// token routes (E up to a few hundred); moe_sort_rows is a stable CUB radix
// sort (no host sync). Expert ids are not range-checked on the device: an id
// outside [0, E) sorts after every expert and is counted by no expert.
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

}  // namespace bb::cuda
