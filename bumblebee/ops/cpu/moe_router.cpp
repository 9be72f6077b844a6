// CPU MoE routing: the router's scores, top-k selection (optionally biased and
// group-limited) and routing weights, their backward, and the sorted rows of a
// routing. The reference for the CUDA kernels: every statistic is computed in
// double and stored in the logits' dtype.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {
namespace {

// Row indices of a routing checked once against [T, k], so the loops index freely.
void check_rows(const char* op, const Tensor& token_of_row, const Tensor& slot_of_row, int64_t tokens, int64_t k) {
  const int64_t* tok = token_of_row.data<int64_t>();
  const int64_t* slot = slot_of_row.data<int64_t>();
  for (int64_t i = 0; i < token_of_row.numel(); ++i)
    BB_CHECK(tok[i] >= 0 && tok[i] < tokens && slot[i] >= 0 && slot[i] < k, op, ": row ", i, " names token ",
             tok[i], " slot ", slot[i], ", outside [", tokens, ", ", k, "]");
}

// Most preferred first; equal values keep the lower id first.
void rank_desc(std::vector<int64_t>& ids, const std::vector<double>& value, int64_t keep) {
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&value](int64_t a, int64_t b) {
    return value[size_t(a)] > value[size_t(b)] || (value[size_t(a)] == value[size_t(b)] && a < b);
  });
}

// The experts a token may choose: those of its topk_groups best groups, a
// group scored by the sum of its two best selection scores.
std::vector<int64_t> candidate_experts(const std::vector<double>& sel, const ops::MoeRouterConfig& cfg) {
  const int64_t e_count = int64_t(sel.size());
  std::vector<int64_t> all(static_cast<size_t>(e_count));
  std::iota(all.begin(), all.end(), int64_t(0));
  if (cfg.num_groups <= 1) return all;
  const int64_t size = e_count / cfg.num_groups;
  std::vector<double> group_score(size_t(cfg.num_groups));
  for (int64_t g = 0; g < cfg.num_groups; ++g) {
    std::vector<double> s(sel.begin() + g * size, sel.begin() + (g + 1) * size);
    std::partial_sort(s.begin(), s.begin() + std::min<int64_t>(2, size), s.end(), std::greater<double>());
    group_score[size_t(g)] = s[0] + (size > 1 ? s[1] : 0.0);
  }
  std::vector<int64_t> groups(size_t(cfg.num_groups));
  std::iota(groups.begin(), groups.end(), int64_t(0));
  rank_desc(groups, group_score, cfg.topk_groups);
  std::sort(groups.begin(), groups.begin() + cfg.topk_groups);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < cfg.topk_groups; ++i)
    for (int64_t e = groups[size_t(i)] * size; e < (groups[size_t(i)] + 1) * size; ++e) out.push_back(e);
  return out;
}

}  // namespace

void moe_router_forward(const Tensor& logits, const ops::MoeRouterConfig& cfg, const Tensor& expert_bias,
                        const Tensor& forced_experts, Tensor& scores, Tensor& experts, Tensor& weights) {
  const int64_t tokens = logits.size(0), e_count = logits.size(1), k = cfg.top_k;
  const std::vector<double> l = logits.to_doubles();
  const std::vector<double> bias = expert_bias.defined() ? expert_bias.to_doubles() : std::vector<double>();
  const std::vector<int64_t> forced =
      forced_experts.defined() ? read_indices(forced_experts, "moe_router_forward") : std::vector<int64_t>();
  std::vector<double> p(size_t(tokens * e_count)), w(size_t(tokens * k));
  int64_t* chosen = experts.data<int64_t>();
  std::vector<double> sel(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* lt = l.data() + t * e_count;
    double* pt = p.data() + t * e_count;
    if (cfg.score == ops::MoeScore::Softmax) {
      const double m = *std::max_element(lt, lt + e_count);
      double z = 0;
      for (int64_t e = 0; e < e_count; ++e) z += (pt[e] = std::exp(lt[e] - m));
      BB_CHECK(std::isfinite(z), "moe_router_forward: non-finite logits for token ", t);
      for (int64_t e = 0; e < e_count; ++e) pt[e] /= z;
    } else {
      for (int64_t e = 0; e < e_count; ++e) pt[e] = 1.0 / (1.0 + std::exp(-lt[e]));
    }
    int64_t* ct = chosen + t * k;
    if (!forced.empty()) {
      std::copy(forced.begin() + t * k, forced.begin() + (t + 1) * k, ct);
    } else {
      for (int64_t e = 0; e < e_count; ++e) sel[size_t(e)] = pt[e] + (bias.empty() ? 0.0 : bias[size_t(e)]);
      std::vector<int64_t> cand = candidate_experts(sel, cfg);
      rank_desc(cand, sel, k);
      std::copy(cand.begin(), cand.begin() + k, ct);
    }
    double sum = cfg.score == ops::MoeScore::Sigmoid ? 1e-20 : 0.0;
    for (int64_t j = 0; j < k; ++j) sum += pt[ct[j]];
    for (int64_t j = 0; j < k; ++j)
      w[size_t(t * k + j)] = pt[ct[j]] / (cfg.norm_topk_prob ? sum : 1.0) * cfg.routed_scaling_factor;
  }
  scores.copy_from(Tensor::from_doubles(p, scores.shape(), scores.dtype()));
  weights.copy_from(Tensor::from_doubles(w, weights.shape(), weights.dtype()));
}

void moe_router_backward(const Tensor& dweights, const Tensor& dscores_extra, const Tensor&, const Tensor& scores,
                         const Tensor& experts, const Tensor& weights, const ops::MoeRouterConfig& cfg,
                         Tensor& dlogits) {
  const int64_t tokens = scores.size(0), e_count = scores.size(1), k = cfg.top_k;
  const std::vector<double> p = scores.to_doubles(), w = weights.to_doubles(), dw = dweights.to_doubles();
  const std::vector<double> extra = dscores_extra.defined() ? dscores_extra.to_doubles() : std::vector<double>();
  const bool per_token = int64_t(extra.size()) == tokens * e_count && dscores_extra.dim() == 2;
  const int64_t* ex = experts.data<int64_t>();
  const double c = cfg.routed_scaling_factor;
  std::vector<double> dl(size_t(tokens * e_count)), dp(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* pt = p.data() + t * e_count;
    const double* dwt = dw.data() + t * k;
    const int64_t* et = ex + t * k;
    if (extra.empty()) std::fill(dp.begin(), dp.end(), 0.0);
    else std::copy_n(extra.begin() + (per_token ? t * e_count : 0), e_count, dp.begin());
    // w_j = c p_j / S with S the sum of the chosen p: dp_j = (c dw_j - sum_i dw_i w_i) / S.
    double sum = cfg.score == ops::MoeScore::Sigmoid ? 1e-20 : 0.0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      sum += pt[et[j]];
      dot += dwt[j] * w[size_t(t * k + j)];
    }
    for (int64_t j = 0; j < k; ++j) dp[size_t(et[j])] += cfg.norm_topk_prob ? (c * dwt[j] - dot) / sum : c * dwt[j];
    double* dlt = dl.data() + t * e_count;
    if (cfg.score == ops::MoeScore::Softmax) {
      // dlogit_e = p_e (dp_e - sum_f p_f dp_f).
      double pdp = 0;
      for (int64_t e = 0; e < e_count; ++e) pdp += pt[e] * dp[size_t(e)];
      for (int64_t e = 0; e < e_count; ++e) dlt[e] = pt[e] * (dp[size_t(e)] - pdp);
    } else {
      for (int64_t e = 0; e < e_count; ++e) dlt[e] = dp[size_t(e)] * pt[e] * (1.0 - pt[e]);
    }
  }
  dlogits.copy_from(Tensor::from_doubles(dl, dlogits.shape(), dlogits.dtype()));
}

void moe_sort_rows(const Tensor& experts, int64_t num_experts, Tensor& token_of_row, Tensor& slot_of_row,
                   Tensor& rows_per_expert) {
  const int64_t tokens = experts.size(0), k = experts.size(1);
  const int64_t* ex = experts.data<int64_t>();
  int64_t* counts = rows_per_expert.data<int64_t>();
  std::fill(counts, counts + num_experts, int64_t(0));
  for (int64_t i = 0; i < tokens * k; ++i) {
    BB_CHECK(ex[i] >= 0 && ex[i] < num_experts, "moe_sort_rows: token ", i / k, " slot ", i % k, " names expert ",
             ex[i], ", outside [0, ", num_experts, ")");
    ++counts[ex[i]];
  }
  // A counting sort visiting (j, t) in order keeps the rows of an expert by slot, then token.
  std::vector<int64_t> next(size_t(num_experts), 0);
  for (int64_t e = 1; e < num_experts; ++e) next[size_t(e)] = next[size_t(e - 1)] + counts[e - 1];
  int64_t* tok = token_of_row.data<int64_t>();
  int64_t* slot = slot_of_row.data<int64_t>();
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = next[size_t(ex[t * k + j])]++;
      tok[row] = t;
      slot[row] = j;
    }
  }
}

void moe_row_weights(const Tensor& weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                     Tensor& row_weights) {
  const int64_t k = weights.size(1);
  check_rows("moe_row_weights", token_of_row, slot_of_row, weights.size(0), k);
  const int64_t* tok = token_of_row.data<int64_t>();
  const int64_t* slot = slot_of_row.data<int64_t>();
  visit_float(weights.dtype(), "moe_row_weights", [&](auto tag) {
    using T = decltype(tag);
    const T* w = weights.data<T>();
    T* out = row_weights.data<T>();
    for (int64_t i = 0; i < row_weights.numel(); ++i) out[i] = w[tok[i] * k + slot[i]];
  });
}

void moe_gather_row_grads(const Tensor& drow_weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                          Tensor& dweights) {
  const int64_t k = dweights.size(1);
  check_rows("moe_gather_row_grads", token_of_row, slot_of_row, dweights.size(0), k);
  const int64_t* tok = token_of_row.data<int64_t>();
  const int64_t* slot = slot_of_row.data<int64_t>();
  dweights.zero_();
  visit_float(dweights.dtype(), "moe_gather_row_grads", [&](auto tag) {
    using T = decltype(tag);
    const T* d = drow_weights.data<T>();
    T* out = dweights.data<T>();
    for (int64_t i = 0; i < drow_weights.numel(); ++i) out[tok[i] * k + slot[i]] = d[i];
  });
}

void moe_score_sums(const Tensor& scores, Tensor& sums) {
  const int64_t tokens = scores.size(0), e_count = scores.size(1);
  const std::vector<double> p = scores.to_doubles();
  std::vector<double> s(size_t(e_count), 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < e_count; ++e) s[size_t(e)] += p[size_t(t * e_count + e)];
  sums.copy_from(Tensor::from_doubles(s, sums.shape(), sums.dtype()));
}

void moe_router_lse(const Tensor& logits, Tensor& lse) {
  const int64_t tokens = logits.size(0), e_count = logits.size(1);
  const std::vector<double> z = logits.to_doubles();
  std::vector<double> out(size_t(tokens), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = z.data() + t * e_count;
    const double m = *std::max_element(row, row + e_count);
    double s = 0;
    for (int64_t e = 0; e < e_count; ++e) s += std::exp(row[e] - m);
    out[size_t(t)] = m + std::log(s);
  }
  lse.copy_from(Tensor::from_doubles(out, lse.shape(), lse.dtype()));
}

void moe_router_z_loss_backward(const Tensor& logits, const Tensor& lse, double scale, Tensor& dlogits) {
  const int64_t tokens = logits.size(0), e_count = logits.size(1);
  const std::vector<double> z = logits.to_doubles(), l = lse.to_doubles();
  std::vector<double> d = dlogits.to_doubles();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < e_count; ++e) {
      const size_t i = size_t(t * e_count + e);
      d[i] += scale * 2.0 * l[size_t(t)] * std::exp(z[i] - l[size_t(t)]);
    }
  dlogits.copy_from(Tensor::from_doubles(d, dlogits.shape(), dlogits.dtype()));
}

}  // namespace bb::cpu
