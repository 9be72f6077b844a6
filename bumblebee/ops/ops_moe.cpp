// The MoE ops of ops.h (token permutation, the router): argument checks,
// then the backend.
#include "bumblebee/ops/ops.h"

#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {

// ---- MoE token permutation -----------------------------------------------------------------

namespace {
// token_of_row [N] against a token-major [T, H] tensor and a row-major [N, H] one.
void check_rows(const char* op, const Tensor& tokens, const char* tokens_name, const Tensor& rows,
                const char* rows_name, const Tensor& token_of_row) {
  expect_dim(op, tokens, tokens_name, 2);
  expect_dim(op, rows, rows_name, 2);
  expect_dim(op, token_of_row, "token_of_row", 1);
  expect_index(op, token_of_row, "token_of_row");
  BB_CHECK(token_of_row.size(0) == rows.size(0), op, ": token_of_row has ", token_of_row.size(0),
           " rows but '", rows_name, "' has ", rows.size(0));
  BB_CHECK(tokens.size(1) == rows.size(1), op, ": '", tokens_name, "' has ", tokens.size(1), " columns but '",
           rows_name, "' has ", rows.size(1));
}
// rows_by_token, when given: [T, k] int64 on `dev`, T*k = the N rows.
void check_rows_by_token(const char* op, const Tensor& rows_by_token, Device dev, int64_t tokens, int64_t rows) {
  if (!rows_by_token.defined()) return;
  BB_CHECK(rows_by_token.device() == dev, op, ": tensor 'rows_by_token' is on ", rows_by_token.device().str(),
           " but the rows are on ", dev.str());
  BB_CHECK(rows_by_token.dtype() == DType::I64, op, ": tensor 'rows_by_token' must be int64, got ",
           dtype_name(rows_by_token.dtype()));
  BB_CHECK(rows_by_token.dim() == 2 && rows_by_token.size(0) == tokens && rows_by_token.numel() == rows, op,
           ": tensor 'rows_by_token' has shape ", shape_str(rows_by_token.shape()), ", expected [", tokens,
           ", k] with ", tokens, " x k = ", rows, " rows");
}
}  // namespace

void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out) {
  const char* op = "moe_permute";
  const Device dev = common_device(op, {{x, "x"}, {token_of_row, "token_of_row"}, {out, "out"}});
  check_rows(op, x, "x", out, "out", token_of_row);
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {out, "out"}});
    BB_DISPATCH_CPU(moe_permute, x, token_of_row, out);
  }
  BB_DISPATCH_CUDA(moe_permute, x, token_of_row, out);
}

void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx, const Tensor& rows_by_token) {
  const char* op = "moe_permute_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {token_of_row, "token_of_row"}, {dx, "dx"}});
  check_rows(op, dx, "dx", dout, "dout", token_of_row);
  check_rows_by_token(op, rows_by_token, dev, dx.size(0), dout.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dout, "dout"}, {dx, "dx"}});
    BB_DISPATCH_CPU(moe_permute_backward, dout, token_of_row, dx, rows_by_token);
  }
  BB_DISPATCH_CUDA(moe_permute_backward, dout, token_of_row, dx, rows_by_token);
}

void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token) {
  const char* op = "moe_unpermute";
  const Device dev =
      common_device(op, {{y, "y"}, {token_of_row, "token_of_row"}, {probs, "probs"}, {out, "out"}});
  check_rows(op, out, "out", y, "y", token_of_row);
  expect_shape(op, probs, "probs", {y.size(0)});
  check_rows_by_token(op, rows_by_token, dev, out.size(0), y.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{y, "y"}, {probs, "probs"}, {out, "out"}});
    BB_DISPATCH_CPU(moe_unpermute, y, token_of_row, probs, out, rows_by_token);
  }
  BB_DISPATCH_CUDA(moe_unpermute, y, token_of_row, probs, out, rows_by_token);
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs) {
  const char* op = "moe_unpermute_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {y, "y"}, {token_of_row, "token_of_row"},
                                        {probs, "probs"}, {dy, "dy"}, {dprobs, "dprobs"}});
  check_rows(op, dout, "dout", y, "y", token_of_row);
  expect_shape(op, probs, "probs", {y.size(0)});
  expect_shape(op, dy, "dy", y.shape());
  expect_shape(op, dprobs, "dprobs", probs.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dout, "dout"}, {y, "y"}, {probs, "probs"}, {dy, "dy"}, {dprobs, "dprobs"}});
    BB_DISPATCH_CPU(moe_unpermute_backward, dout, y, token_of_row, probs, dy, dprobs);
  }
  BB_DISPATCH_CUDA(moe_unpermute_backward, dout, y, token_of_row, probs, dy, dprobs);
}

// ---- MoE router, routing indices and router losses -------------------------------------------

namespace {

void check_router_config(const char* op, const MoeRouterConfig& cfg, int64_t num_experts) {
  BB_CHECK(cfg.top_k >= 1 && cfg.top_k <= num_experts, op, ": top_k ", cfg.top_k, " must lie in [1, ", num_experts,
           "] (the expert count)");
  if (cfg.num_groups <= 1) return;
  BB_CHECK(num_experts % cfg.num_groups == 0, op, ": ", num_experts, " experts do not split into num_groups = ",
           cfg.num_groups, " equal groups");
  BB_CHECK(cfg.topk_groups >= 1 && cfg.topk_groups <= cfg.num_groups, op, ": topk_groups ", cfg.topk_groups,
           " must lie in [1, num_groups = ", cfg.num_groups, "]");
  BB_CHECK(cfg.topk_groups * (num_experts / cfg.num_groups) >= cfg.top_k, op, ": topk_groups ", cfg.topk_groups,
           " groups of ", num_experts / cfg.num_groups, " experts hold fewer than top_k = ", cfg.top_k);
}

void expect_i64(const char* op, const Tensor& t, const char* name) {
  BB_CHECK(t.dtype() == DType::I64, op, ": index tensor '", name, "' must be int64, got ", dtype_name(t.dtype()));
}

// Row indices of a routing: token_of_row and slot_of_row [N] int64 with N = T*k.
void check_row_indices(const char* op, const Tensor& token_of_row, const Tensor& slot_of_row, int64_t rows) {
  expect_shape(op, token_of_row, "token_of_row", {rows});
  expect_shape(op, slot_of_row, "slot_of_row", {rows});
  expect_i64(op, token_of_row, "token_of_row");
  expect_i64(op, slot_of_row, "slot_of_row");
}

}  // namespace

void moe_router_forward(const Tensor& logits, const MoeRouterConfig& cfg, const Tensor& expert_bias,
                        const Tensor& forced_experts, Tensor& scores, Tensor& experts, Tensor& weights) {
  const char* op = "moe_router_forward";
  const Device dev = common_device(op, {{logits, "logits"}, {scores, "scores"}, {experts, "experts"},
                                        {weights, "weights"}});
  expect_dim(op, logits, "logits", 2);
  const int64_t tokens = logits.size(0), e_count = logits.size(1), k = cfg.top_k;
  check_router_config(op, cfg, e_count);
  expect_shape(op, scores, "scores", logits.shape());
  expect_shape(op, experts, "experts", {tokens, k});
  expect_shape(op, weights, "weights", {tokens, k});
  expect_i64(op, experts, "experts");
  if (expert_bias.defined()) {
    common_device(op, {{logits, "logits"}, {expert_bias, "expert_bias"}});
    expect_shape(op, expert_bias, "expert_bias", {e_count});
  }
  if (forced_experts.defined()) {
    common_device(op, {{logits, "logits"}, {forced_experts, "forced_experts"}});
    expect_shape(op, forced_experts, "forced_experts", {tokens, k});
    expect_i64(op, forced_experts, "forced_experts");
    // Replayed ids come from outside (an inference engine): one host check.
    const Tensor host = forced_experts.to(Device::cpu());
    const int64_t* ids = host.data<int64_t>();
    for (int64_t i = 0; i < tokens * k; ++i)
      BB_CHECK(ids[i] >= 0 && ids[i] < e_count, op, ": forced expert of token ", i / k, " slot ", i % k, " is ",
               ids[i], ", outside [0, ", e_count, ")");
  }
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {scores, "scores"}, {weights, "weights"}});
    if (expert_bias.defined()) expect_cpu_same_float(op, {{logits, "logits"}, {expert_bias, "expert_bias"}});
    BB_DISPATCH_CPU(moe_router_forward, logits, cfg, expert_bias, forced_experts, scores, experts, weights);
  }
  BB_DISPATCH_CUDA(moe_router_forward, logits, cfg, expert_bias, forced_experts, scores, experts, weights);
}

void moe_router_backward(const Tensor& dweights, const Tensor& dscores_extra, const Tensor& logits,
                         const Tensor& scores, const Tensor& experts, const Tensor& weights,
                         const MoeRouterConfig& cfg, Tensor& dlogits) {
  const char* op = "moe_router_backward";
  const Device dev = common_device(op, {{dweights, "dweights"}, {logits, "logits"}, {scores, "scores"},
                                        {experts, "experts"}, {weights, "weights"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  const int64_t tokens = logits.size(0), e_count = logits.size(1), k = cfg.top_k;
  check_router_config(op, cfg, e_count);
  expect_shape(op, scores, "scores", logits.shape());
  expect_shape(op, dlogits, "dlogits", logits.shape());
  expect_shape(op, experts, "experts", {tokens, k});
  expect_shape(op, weights, "weights", {tokens, k});
  expect_shape(op, dweights, "dweights", {tokens, k});
  expect_i64(op, experts, "experts");
  if (dscores_extra.defined()) {
    common_device(op, {{logits, "logits"}, {dscores_extra, "dscores_extra"}});
    BB_CHECK(dscores_extra.shape() == logits.shape() || dscores_extra.shape() == Shape{e_count}, op,
             ": dscores_extra has shape ", shape_str(dscores_extra.shape()), ", expected ",
             shape_str(logits.shape()), " or [", e_count, "]");
  }
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dweights, "dweights"}, {logits, "logits"}, {scores, "scores"},
                               {weights, "weights"}, {dlogits, "dlogits"}});
    if (dscores_extra.defined()) expect_cpu_same_float(op, {{logits, "logits"}, {dscores_extra, "dscores_extra"}});
    BB_DISPATCH_CPU(moe_router_backward, dweights, dscores_extra, logits, scores, experts, weights, cfg, dlogits);
  }
  BB_DISPATCH_CUDA(moe_router_backward, dweights, dscores_extra, logits, scores, experts, weights, cfg, dlogits);
}

void moe_sort_rows(const Tensor& experts, int64_t num_experts, Tensor& token_of_row, Tensor& slot_of_row,
                   Tensor& rows_per_expert) {
  const char* op = "moe_sort_rows";
  const Device dev = common_device(op, {{experts, "experts"}, {token_of_row, "token_of_row"},
                                        {slot_of_row, "slot_of_row"}, {rows_per_expert, "rows_per_expert"}});
  expect_dim(op, experts, "experts", 2);
  expect_i64(op, experts, "experts");
  BB_CHECK(num_experts >= 1, op, ": num_experts must be positive, got ", num_experts);
  check_row_indices(op, token_of_row, slot_of_row, experts.numel());
  expect_shape(op, rows_per_expert, "rows_per_expert", {num_experts});
  expect_i64(op, rows_per_expert, "rows_per_expert");
  if (dev.is_cpu()) BB_DISPATCH_CPU(moe_sort_rows, experts, num_experts, token_of_row, slot_of_row, rows_per_expert);
  BB_DISPATCH_CUDA(moe_sort_rows, experts, num_experts, token_of_row, slot_of_row, rows_per_expert);
}

void moe_rows_by_token(const Tensor& token_of_row, const Tensor& slot_of_row, Tensor& rows_by_token) {
  const char* op = "moe_rows_by_token";
  const Device dev = common_device(op, {{token_of_row, "token_of_row"}, {slot_of_row, "slot_of_row"},
                                        {rows_by_token, "rows_by_token"}});
  expect_dim(op, rows_by_token, "rows_by_token", 2);
  expect_i64(op, rows_by_token, "rows_by_token");
  check_row_indices(op, token_of_row, slot_of_row, rows_by_token.numel());
  if (dev.is_cpu()) BB_DISPATCH_CPU(moe_rows_by_token, token_of_row, slot_of_row, rows_by_token);
  BB_DISPATCH_CUDA(moe_rows_by_token, token_of_row, slot_of_row, rows_by_token);
}

void moe_row_weights(const Tensor& weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                     Tensor& row_weights) {
  const char* op = "moe_row_weights";
  const Device dev = common_device(op, {{weights, "weights"}, {token_of_row, "token_of_row"},
                                        {slot_of_row, "slot_of_row"}, {row_weights, "row_weights"}});
  expect_dim(op, weights, "weights", 2);
  expect_dim(op, row_weights, "row_weights", 1);
  check_row_indices(op, token_of_row, slot_of_row, row_weights.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{weights, "weights"}, {row_weights, "row_weights"}});
    BB_DISPATCH_CPU(moe_row_weights, weights, token_of_row, slot_of_row, row_weights);
  }
  BB_DISPATCH_CUDA(moe_row_weights, weights, token_of_row, slot_of_row, row_weights);
}

void moe_gather_row_grads(const Tensor& drow_weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                          Tensor& dweights) {
  const char* op = "moe_gather_row_grads";
  const Device dev = common_device(op, {{drow_weights, "drow_weights"}, {token_of_row, "token_of_row"},
                                        {slot_of_row, "slot_of_row"}, {dweights, "dweights"}});
  expect_dim(op, dweights, "dweights", 2);
  expect_dim(op, drow_weights, "drow_weights", 1);
  check_row_indices(op, token_of_row, slot_of_row, drow_weights.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{drow_weights, "drow_weights"}, {dweights, "dweights"}});
    BB_DISPATCH_CPU(moe_gather_row_grads, drow_weights, token_of_row, slot_of_row, dweights);
  }
  BB_DISPATCH_CUDA(moe_gather_row_grads, drow_weights, token_of_row, slot_of_row, dweights);
}

void moe_score_sums(const Tensor& scores, Tensor& sums) {
  const char* op = "moe_score_sums";
  const Device dev = common_device(op, {{scores, "scores"}, {sums, "sums"}});
  expect_dim(op, scores, "scores", 2);
  expect_shape(op, sums, "sums", {scores.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{scores, "scores"}, {sums, "sums"}});
    BB_DISPATCH_CPU(moe_score_sums, scores, sums);
  }
  BB_DISPATCH_CUDA(moe_score_sums, scores, sums);
}

void moe_router_lse(const Tensor& logits, Tensor& lse) {
  const char* op = "moe_router_lse";
  const Device dev = common_device(op, {{logits, "logits"}, {lse, "lse"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, lse, "lse", {logits.size(0)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}});
    BB_DISPATCH_CPU(moe_router_lse, logits, lse);
  }
  BB_DISPATCH_CUDA(moe_router_lse, logits, lse);
}

void moe_router_z_loss_backward(const Tensor& logits, const Tensor& lse, double scale, Tensor& dlogits) {
  const char* op = "moe_router_z_loss_backward";
  const Device dev = common_device(op, {{logits, "logits"}, {lse, "lse"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, lse, "lse", {logits.size(0)});
  expect_shape(op, dlogits, "dlogits", logits.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}, {dlogits, "dlogits"}});
    BB_DISPATCH_CPU(moe_router_z_loss_backward, logits, lse, scale, dlogits);
  }
  BB_DISPATCH_CUDA(moe_router_z_loss_backward, logits, lse, scale, dlogits);
}

}  // namespace bb::ops
