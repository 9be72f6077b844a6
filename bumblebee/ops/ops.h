// The op surface: every tensor computation the primitives need, declared once.
//
// Each op dispatches on the device of its tensors to ops/cpu (float32 and
// float64; the correctness oracle) or ops/cuda (bfloat16 activations with fp32
// accumulation; the fast path). All tensors are contiguous row-major. Ops named
// *_backward that produce parameter gradients ACCUMULATE into them (+=), so
// gradient accumulation over microbatches needs no extra pass; activation
// gradients are overwritten.
//
// Dtype rules. CPU: every floating tensor of one call has the same dtype
// (float32 or float64). CUDA: activations are bfloat16; parameter gradients,
// norm statistics (rstd, lse) and optimizer state are float32; index tensors
// are int32 or int64 everywhere. The residual stream may be float32 on CUDA
// (Megatron's fp32_residual_connection): embedding_forward, add and RMSNorm
// accept it next to bfloat16 weights and activations, as noted per op.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"

namespace bb::ops {

// ---- GEMM -------------------------------------------------------------------
// c = alpha * op(a) @ op(b) + beta * c for 2-D a, b, c; op(x) = x^T when trans.
// CUDA: a, b bfloat16; c bfloat16 or float32 (float32 with beta=1 accumulates
// weight gradients in fp32).
void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
            double alpha = 1.0, double beta = 0.0);

// ---- grouped GEMM (the local experts of an MoE layer) ---------------------------
// G groups over the rows of row-major operands: group g owns rows
// R_g = [offsets[g], offsets[g + 1]) (offsets on the host: G + 1 values from 0,
// non-decreasing, ending at the row count N) and has its own matrix w[g], laid
// out as Linear stores weights. A group without rows is skipped, so every
// group may be empty. One call covers all groups (CUDA: one grouped cuBLAS
// launch where the dtypes allow it, see cuda_ops.h).
//   grouped_gemm:             c[R_g] = alpha * a[R_g] @ op(w[g]) + beta * c[R_g]
//     a [N, K]; w[g] [Nout, K] with trans_w (forward, y = x W^T) or [K, Nout]
//     without (the input gradient dx = dy W); c [N, Nout].
//   grouped_gemm_weight_grad: dw[g] = alpha * dy[R_g]^T @ x[R_g] + beta * dw[g]
//     dy [N, Nout], x [N, K], dw[g] [Nout, K]; beta = 1 accumulates weight
//     gradients, and an empty group's dw[g] is then left as it was.
// CPU: one dtype, float32 or float64. CUDA: a, w, c (and dy, x) one dtype
// (bfloat16, float16, float32, float64); dw that dtype or float32 (fp32
// weight gradients of bfloat16 activations); fp32 accumulation (fp64 for float64).
void grouped_gemm(const Tensor& a, const std::vector<Tensor>& w, bool trans_w, const std::vector<int64_t>& offsets,
                  Tensor& c, double alpha = 1.0, double beta = 0.0);
void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                              const std::vector<Tensor>& dw, double alpha = 1.0, double beta = 1.0);

// ---- elementwise ------------------------------------------------------------
// CUDA: add also takes a and out float32 with b bfloat16 (a bfloat16 branch
// output added onto the float32 residual stream).
void add(const Tensor& a, const Tensor& b, Tensor& out);        // out = a + b
void add_(Tensor& acc, const Tensor& x, double alpha = 1.0);     // acc += alpha * x (dtypes may differ)
void scale_(Tensor& x, double s);                                // x *= s
void mul(const Tensor& a, const Tensor& b, Tensor& out);         // out = a * b

// ---- column gather ------------------------------------------------------------
// A fixed gather of columns of a row-major matrix and its adjoint, for the
// per-head splits and joins of multi-head latent attention:
//   gather_columns:      y [N, out], y[:, j] = x[:, index[j]] of x [N, in];
//   scatter_add_columns: dx [N, in] = (accumulate ? dx : 0) + G^T dy, i.e.
//     dx[:, c] += the sum of dy[:, j] over the j with index[j] = c (ascending j).
// An index may repeat (one input column broadcast to several outputs); the
// scatter then sums without atomics through the inverse index, so CUDA runs
// give the same bits every time. A ColumnIndex is built once on the host,
// which checks every index against `in`, and lives on the device of the
// tensors it indexes. CPU: x, y (dy, dx) one dtype, float32 or float64. CUDA:
// one dtype, bfloat16, float16, float32 or float64 (a copy: exact; the
// scatter sums in fp32, fp64 for float64).
struct ColumnIndex {
  int64_t in = 0;            // input columns
  Tensor index;              // [out] int64: the input column of each output column
  Tensor inverse_offsets;    // [in + 1] int64: input column c is read by ...
  Tensor inverse_columns;    // [out] int64: ... output columns inverse_columns[offsets[c] .. offsets[c + 1])
  int64_t out() const { return index.defined() ? index.size(0) : 0; }
};
ColumnIndex make_column_index(int64_t in, const std::vector<int64_t>& index, Device device);
void gather_columns(const Tensor& x, const ColumnIndex& index, Tensor& y);
void scatter_add_columns(const Tensor& dy, const ColumnIndex& index, Tensor& dx, bool accumulate);

// ---- reductions (return to the host; each is one device sync) -----------------
double sum(const Tensor& x);
double sum_squares(const Tensor& x);   // sum of x^2, accumulated in double (CPU) or fp32 blocks + double (CUDA)
int64_t count_zeros(const Tensor& x);
// The gradient-norm pass of the optimizer: sum_squares(x) and count_zeros(x)
// from one read of x (each accumulated as the single ops accumulate it).
struct SquaresAndZeros {
  double sum_squares = 0.0;
  int64_t zeros = 0;
};
SquaresAndZeros sum_squares_and_zeros(const Tensor& x);
bool all_finite(const Tensor& x);
// out [1] float64 = sum_i a_i * b_i, left on the device of a and b (no sync):
// the loss of a microbatch (per-token loss . loss mask) stays on the device
// until the step reads all of them at once.
void dot(const Tensor& a, const Tensor& b, Tensor& out);

// ---- embedding ----------------------------------------------------------------
// weight [V_local, H], ids [N] (int32/int64, global ids), out [N, H].
// Rows whose id falls outside [vocab_start, vocab_start + V_local) are zero,
// which makes the op vocab-parallel: the full row is the sum over TP ranks.
// CUDA: out has weight's dtype, or is float32 with a bfloat16 weight (rows
// converted exactly); grad_out bfloat16 or float32; grad_weight float32, or
// bfloat16 (bf16 gradient buffers: each id's rows summed in fp32, then added once).
void embedding_forward(const Tensor& weight, const Tensor& ids, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight);

// ---- RMSNorm over the last dimension -------------------------------------------
// x [R, n], w [n], y [R, n], rstd [R] = 1/sqrt(mean(x^2) + eps).
// y = w * (x * rstd), with x*rstd rounded to x's dtype before the weight
// multiply, as HF transformers does.
// CUDA: y and dy have w's dtype, dx has x's; x may be float32 with w bfloat16
// (the rounding above is then the identity); rstd is float32, dw float32 or
// bfloat16 (the fp32 column sums added to it, then rounded once).
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw);

// ---- residual add with RMSNorm (a pre-norm decoder layer's residual stream) ------
// add_rmsnorm_forward: h = x + branch, then y and rstd = rmsnorm_forward(h, w)
// in one op: x, branch, h [R, n] (x the residual stream, branch a block's
// output), w [n], y [R, n], rstd [R]. h is rounded to its dtype as add
// rounds it, and y and rstd are the norm of that rounded h: the bits of add
// followed by rmsnorm_forward. add_rmsnorm_backward: dx = the dx of
// rmsnorm_backward (rounded to its dtype) + residual_grad, rounded again: the
// bits of rmsnorm_backward followed by add_(dx, residual_grad); dw
// accumulated (+=) as rmsnorm_backward accumulates it; dx may not overlap
// residual_grad (an error). That is the gradient of a norm's input that also flows on
// along the residual stream. CPU: the two ops in sequence. CUDA: x, h,
// residual_grad and dx of one dtype, w, branch, y and dy of another, as
// rmsnorm_forward pairs them (bfloat16 or float32 both, or a float32 residual
// stream beside bfloat16 weights and block outputs); one kernel each way for
// rows rmsnorm.cu's team kernels take (n a multiple of 8 from 64 to 2048;
// forward also 4096 in bfloat16, backward only to 1024 with a float32 x),
// with y, rstd, h, dx and dw the unfused ops' bits; other rows run the two
// ops in sequence.
void add_rmsnorm_forward(const Tensor& x, const Tensor& branch, const Tensor& w, double eps, Tensor& h, Tensor& y,
                         Tensor& rstd);
void add_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& residual_grad, Tensor& dx, Tensor& dw);

// ---- rotary position embedding (rotate-half layout of HF Llama/Qwen) ------------
// x [N, heads, D], position_ids [N], inv_freq [D/2] (float64 on the host or the
// device of x). Angle = position * inv_freq[i], applied to pairs (i, i + D/2):
//   out[i]     = x[i] cos - x[i+D/2] sin,  out[i+D/2] = x[i+D/2] cos + x[i] sin.
// `out` may alias `x`. Backward is the rotation by the negative angle.
void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out);
void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx);

// ---- RMSNorm then RoPE over each head (Qwen3's q/k norms) ------------------------
// y = rope_forward(rmsnorm_forward(x, w)) in one op: x [N, heads, D], w [D],
// y [N, heads, D] (w's dtype, as rmsnorm_forward's y), rstd [N * heads];
// position_ids and inv_freq as rope_forward takes them. y and rstd are the
// bits of rmsnorm_forward into a tensor of y's dtype followed by rope_forward
// of it; the fused op saves that tensor's write and read. The backward is
// rope_backward of dy (into dy's dtype) followed by rmsnorm_backward: dx
// overwritten, dw accumulated (+=) as rmsnorm_backward accumulates it. CPU:
// the two ops in sequence. CUDA: one kernel each way for D = 64, 128, 256
// (y, rstd and dx the unfused ops' bits; dw the same fixed-order sum over the
// kernel's own grid, so repeatable but not always the unfused bits); other
// head dims run the two ops in sequence.
void rmsnorm_rope_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd);
void rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx, Tensor& dw);

// ---- SwiGLU -------------------------------------------------------------------
// gate_up [N, 2F] holds gate in columns [0, F) and up in [F, 2F); out [N, F] =
// silu(gate) * up. Backward writes d_gate_up [N, 2F].
void swiglu_forward(const Tensor& gate_up, Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& d_gate_up);

// ---- attention ------------------------------------------------------------------
// Causal grouped-query attention over packed variable-length sequences.
// q [T, Hq, Dqk], k [T, Hkv, Dqk] and v [T, Hkv, Dv] with Hq % Hkv == 0
// (query head h reads kv head h / (Hq/Hkv)); the v head dim Dv may differ
// from the q/k one Dqk, as in multi-head latent attention (DeepSeek-V3:
// Dqk 192 = nope 128 + rope 64, Dv 128); callers pass the scale, usually
// 1/sqrt(Dqk). cu_seqlens [S+1] int32 on the device of q (offsets of each
// sequence in T, from 0, ending at T); max_seqlen the longest sequence (sizes
// the CUDA grid; where S x max_seqlen == T every sequence has that length and
// cuDNN runs its dense layout); out [T, Hq, Dv]; lse [T, Hq] (float32 on
// CUDA, the compute dtype on CPU) = log-sum-exp of each query row's scaled
// scores. The backward takes
// dout [T, Hq, Dv] and writes dq, dk, dv shaped as q, k, v. The head-dim pairs
// each CUDA backend runs are listed in docs/cuda.md.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                       int64_t max_seqlen, double scale, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, double scale, Tensor& dq,
                        Tensor& dk, Tensor& dv);

// Partial attention, the step of ring attention (context parallelism): query
// sequence s (rows cu_seqlens_q[s] .. cu_seqlens_q[s+1] of q [Tq, Hq, Dqk])
// against key/value sequence s (rows of cu_seqlens_kv in k [Tkv, Hkv, Dqk],
// v [Tkv, Hkv, Dv]); out [Tq, Hq, Dv].
// Causal aligns the diagonal bottom-right, as flash attention and cuDNN do:
// query i of Lq sees keys j <= i + Lkv - Lq; None sees every key. A query row
// that sees no key gets out 0 and lse -inf. The CPU op and every CUDA
// implementation (flash, cuDNN, the small-head kernel) do every mode.
enum class AttentionMask { Causal, None };
const char* attention_mask_name(AttentionMask mask);
struct AttentionSpans {
  Tensor cu_seqlens_q, cu_seqlens_kv;   // [S+1] int32 each, on the device of q
  int64_t max_seqlen_q = 0, max_seqlen_kv = 0;
  AttentionMask mask = AttentionMask::Causal;
};
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpans& spans, double scale,
                       Tensor& out, Tensor& lse);
// out and lse are the final (merged) ones: the softmax a partial backward
// differentiates is the whole row's, as in ring attention.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv);
// Folds a partial attention into a running one, row by row (out [T, H, Dv],
// lse [T, H]): lse' = log(exp(lse) + exp(part_lse)),
// out = exp(lse - lse') out + exp(part_lse - lse') part_out. A row whose both
// lse are -inf keeps out and lse.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);

// ---- cross entropy, in vocab-parallel pieces --------------------------------------
// logits [N, V_local] hold columns [vocab_start, vocab_start + V_local) of the
// full vocabulary; labels [N] are global ids (any value for masked rows).
// Statistics are float32 on CUDA and the compute dtype on CPU, all [N].
// With one rank: lse = max + log(sumexp), loss = lse - target_logit.
void logits_row_max(const Tensor& logits, Tensor& row_max);
void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit);
// The three statistics of one rank holding the whole vocabulary (tp = 1) in
// one read of the logits: row_max, sumexp relative to it and target_logit,
// as logits_row_max then logits_sumexp_target give them (same labels,
// vocab_start and masking). CUDA keeps a running (max, sum) per thread and
// merges them as sum_i s_i exp(m_i - M); the CPU runs the two ops in sequence.
// With tp > 1 the group's max is needed before the sums, so the two ops stay.
void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit);
// dlogits = (softmax(logits) - onehot(label)) * dloss, with softmax = exp(logits - lse).
// dlogits may alias logits.
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits);

// Entropy of softmax(logits) per row, in the same vocab-parallel pieces
// (logits already divided by the temperature): H = lse - sum_v p_v z_v with
// p = exp(z - lse). logits_zexp_sum gives a shard's sum_v exp(z_v - row_max)
// z_v (row_max the group's), summed over the group like sumexp; then
// entropy_from_sums: entropy = lse - zexp_sum / sumexp. The backward of a loss
// over both the per-row loss (lse - target) and the entropy:
//   dlogits = dloss (p - onehot(label)) - dentropy p (z - (lse - entropy)),
// since dH/dz_j = -p_j (z_j - sum_v p_v z_v). dlogits may alias logits.
void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum);
void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy);
void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits);

// ---- MoE token permutation ------------------------------------------------------------
// A routing assigns each token to k experts; its N = T*k (token, expert) pairs
// are rows, sorted by expert, and `token_of_row` [N] (int32/int64) names each
// row's token. permute gathers the rows: out [N, H], out[i] = x[token_of_row[i]].
// unpermute combines them back: out [T, H] = sum over the rows i of token t of
// probs[i] * y[i] (probs [N], the routing weights). On CUDA probs and dprobs
// are float32 with bfloat16 rows, and the token sums are fp32, without atomics.
void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out);
// dx [T, H] = sum over the rows of each token of dout [N, H] (overwritten).
// Both token sums take a token's rows in ascending order. rows_by_token, when
// given, is moe_rows_by_token's index of this token_of_row, so the sums need
// not build their own (on CUDA a radix sort of token_of_row a call).
void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx,
                          const Tensor& rows_by_token = Tensor());
void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token = Tensor());
// dy[i] = probs[i] * dout[token_of_row[i]],  dprobs[i] = dout[token_of_row[i]] . y[i] (both overwritten).
void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs);

// ---- MoE routing ------------------------------------------------------------------------
// The router's decision from its logits [T, E], in the statistics dtype S
// (CPU: the logits' dtype, computed in double; CUDA: float32 from bfloat16 or
// float32 logits).
//   softmax: scores = softmax over all E (HF Qwen3-MoE / Mixtral);
//   sigmoid: scores = sigmoid(logits) (DeepSeek-V3 / Kimi-K2).
// Selection ranks experts by scores + expert_bias (the bias of aux-loss-free
// balancing steers the choice only, never the weights). With num_groups > 1
// the E experts form num_groups equal groups, a group's score is the sum of
// its two best biased scores, and only the experts of the topk_groups best
// groups compete (HF DeepseekV3TopkRouter; Megatron's group_limited_topk).
// Equal scores keep the lower expert (group) id first; experts [T, k] come
// most preferred first. weights [T, k] = the chosen unbiased scores, divided
// by their sum when norm_topk_prob (sigmoid adds 1e-20 to the sum, as HF and
// Megatron do), times routed_scaling_factor.
enum class MoeScore { Softmax, Sigmoid };
struct MoeRouterConfig {
  MoeScore score = MoeScore::Softmax;
  int64_t top_k = 1;
  bool norm_topk_prob = false;
  int64_t num_groups = 0;      // 0 or 1: no group limit
  int64_t topk_groups = 0;
  double routed_scaling_factor = 1.0;
};
// expert_bias: [E] (S) or undefined; forced_experts: [T, k] int64 or undefined
// (router replay: these experts are taken instead of the selection, checked
// to lie in [0, E) on the host, one sync; their weights come from the live
// scores as if they had been chosen). scores [T, E], weights [T, k] in S;
// experts [T, k] int64.
void moe_router_forward(const Tensor& logits, const MoeRouterConfig& cfg, const Tensor& expert_bias,
                        const Tensor& forced_experts, Tensor& scores, Tensor& experts, Tensor& weights);
// dlogits [T, E] (the logits' dtype, overwritten) from dweights [T, k] (S)
// through the scaling, renormalisation and softmax or sigmoid; dscores_extra
// (S, undefined: none) is a further gradient of the scores, [T, E] or [E]
// (the same for every token, as the load-balancing loss gives).
void moe_router_backward(const Tensor& dweights, const Tensor& dscores_extra, const Tensor& logits,
                         const Tensor& scores, const Tensor& experts, const Tensor& weights,
                         const MoeRouterConfig& cfg, Tensor& dlogits);
// The rows of a routing: the N = T*k (token, slot) pairs of experts [T, k]
// (int64) sorted by expert, then by slot j, then by token t (HF's order,
// stable). token_of_row, slot_of_row [N] and rows_per_expert [E], all int64.
void moe_sort_rows(const Tensor& experts, int64_t num_experts, Tensor& token_of_row, Tensor& slot_of_row,
                   Tensor& rows_per_expert);
// The token-major index of a routing's rows: rows_by_token [T, k] (int64,
// overwritten) holds token t's k rows in ascending order, from moe_sort_rows's
// token_of_row and slot_of_row [N = T*k]: one row for every (token, slot)
// pair. Built once a layer, it serves both token sums (moe_unpermute forward,
// moe_permute_backward backward). The CPU checks that every pair has exactly
// one row; on CUDA a pair with none holds -1, and a sum over it gives NaN.
void moe_rows_by_token(const Tensor& token_of_row, const Tensor& slot_of_row, Tensor& rows_by_token);
// row_weights [N] = weights[token_of_row[i], slot_of_row[i]] (weights [T, k]);
// moe_gather_row_grads is its adjoint: dweights [T, k] (overwritten; pairs
// with no row get 0) from drow_weights [N]. One floating dtype for both.
void moe_row_weights(const Tensor& weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                     Tensor& row_weights);
void moe_gather_row_grads(const Tensor& drow_weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                          Tensor& dweights);
// sums [E] = sum over tokens of scores [T, E] (S; the load-balancing loss's P).
void moe_score_sums(const Tensor& scores, Tensor& sums);
// The router z-loss (ST-MoE): lse [T] (S) = logsumexp over E of logits [T, E];
// the loss is scale x sum_t lse_t^2 (the caller picks scale = coeff / T for
// the mean). Its backward adds d(scale x sum_t lse_t^2) / dlogits =
// scale x 2 lse_t x softmax(logits)_t into dlogits (the logits' dtype).
void moe_router_lse(const Tensor& logits, Tensor& lse);
void moe_router_z_loss_backward(const Tensor& logits, const Tensor& lse, double scale, Tensor& dlogits);

// ---- optimizer ------------------------------------------------------------------------
// One AdamW step with torch.optim.AdamW semantics over a flat buffer:
//   p -= lr * wd * p;  g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
//   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
// Storage (optimizer.exp_avg_dtype, ..._sq_dtype, main_grads_dtype,
// main_params_dtype): with a float64 param every tensor is float64 (the CUDA
// grad may be float32); with a float32 or bfloat16 param, grad, exp_avg and
// exp_avg_sq are each float32 or bfloat16. The update computes in float64
// for a float64 param, else in float32 registers, and rounds each stored
// value to its tensor's dtype once, on store (bfloat16: round to nearest
// even); the update itself uses the unrounded moments, as Transformer
// Engine's FusedAdam does. All-float32 and all-float64 are as before.
struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  int64_t step = 1;           // 1-based, after increment
  double grad_scale = 1.0;    // clipping coefficient (and loss-scale inverse)
};
void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWParams& hp);

}  // namespace bb::ops

namespace bb::ops {
// ---- cross-entropy finish ---------------------------------------------------------------
// From the (group-reduced) statistics of logits_row_max / logits_sumexp_target:
//   lse = row_max + log(sumexp);  loss = lse - target_logit.   All [N], same dtype.
void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss);
}  // namespace bb::ops
