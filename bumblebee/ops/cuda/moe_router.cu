// MoE routing on CUDA: the router's scores, selection and weights
// (moe_router_forward), their backward, the sorted rows of a routing
// (moe_sort_rows) and the small gathers around them. Semantics in ops.h; the
// CPU op (ops/cpu/moe_router.cpp) is the reference.
//
// Routing is one warp per token: the lanes read the token's E logits
// coalesced (lane l takes experts l, l + 32, ...), reduce the softmax with
// shuffles, and keep the scores in shared memory while the warp picks its k
// experts by k warp-wide argmaxes (ties to the lower id, as the CPU's stable
// ordering). Lane j ends up holding choice j, so the k ids and weights are
// written by k lanes at once. A thread per token, as before, read each
// token's row on its own (32 rows per warp load, 512 bytes apart) and ran
// its k passes over E serially: 0.44 ms for 8192 x 128. All statistics are
// fp32.

#include <algorithm>
#include <limits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/radix_sort.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTopK = 32;          // choice j lives in lane j
constexpr int kMaxGroups = 64;        // kept groups are one 64-bit mask, two per lane
constexpr int64_t kMaxExperts = 2048; // a lane's chosen experts are one 64-bit mask
constexpr int kMaxRouterWarps = 8;
constexpr size_t kRouterSmemBytes = 48 * 1024;  // the default dynamic shared memory limit
constexpr unsigned kFullMask = 0xffffffffu;

struct RouterArgs {
  int64_t tokens, experts, top_k, num_groups, topk_groups;
  bool sigmoid, norm_topk_prob;
  float scaling;
};

// Folds candidate (ov, oid) into (v, id): the higher value wins, equal values
// go to the lower id, id -1 is no candidate. A total order, so a butterfly
// of it leaves every lane with the same winner.
__device__ __forceinline__ void keep_better(float& v, int& id, float ov, int oid) {
  if (oid < 0) return;
  if (id < 0 || ov > v || (ov == v && oid < id)) v = ov, id = oid;
}

__device__ __forceinline__ void warp_argmax(float& v, int& id) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, off);
    const int oid = __shfl_xor_sync(kFullMask, id, off);
    keep_better(v, id, ov, oid);
  }
}

// The topk_groups best groups, each scored by the sum of its two best biased
// scores; lane l scores groups l and l + 32.
__device__ uint64_t keep_groups(const float* p, const float* bias, const RouterArgs& a, int lane) {
  const int groups = int(a.num_groups), size = int(a.experts / a.num_groups);
  float score[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int g = lane + 32 * r;
    if (g >= groups) continue;
    float m1 = -INFINITY, m2 = -INFINITY;
    for (int e = g * size; e < (g + 1) * size; ++e) {
      const float v = p[e] + (bias ? bias[e] : 0.f);
      if (v > m1) m2 = m1, m1 = v;
      else if (v > m2) m2 = v;
    }
    score[r] = m1 + (size > 1 ? m2 : 0.f);
  }
  uint64_t kept = 0;
  for (int64_t pick = 0; pick < a.topk_groups; ++pick) {
    float v = 0.f;
    int id = -1;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int g = lane + 32 * r;
      if (g < groups && !((kept >> g) & 1u)) keep_better(v, id, score[r], g);
    }
    warp_argmax(v, id);
    kept |= uint64_t(1) << id;
  }
  return kept;
}

// One warp per token; `p` is the warp's E floats of shared memory.
template <typename L>
__global__ void router_forward_kernel(const L* __restrict__ logits, const float* __restrict__ bias,
                                      const int64_t* __restrict__ forced, RouterArgs a, float* __restrict__ scores,
                                      int64_t* __restrict__ experts, float* __restrict__ weights) {
  extern __shared__ float router_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + warp;
  if (t >= a.tokens) return;  // the whole warp leaves: no block-wide barrier follows
  const int n_experts = int(a.experts), k = int(a.top_k);
  float* p = router_smem + int64_t(warp) * n_experts;
  const L* lt = logits + t * a.experts;
  float* st = scores + t * a.experts;
  if (a.sigmoid) {
    for (int e = lane; e < n_experts; e += 32) st[e] = p[e] = 1.f / (1.f + expf(-to_float(lt[e])));
  } else {
    float m = -INFINITY, z = 0.f;
    for (int e = lane; e < n_experts; e += 32) m = fmaxf(m, to_float(lt[e]));
    m = warp_max(m);
    for (int e = lane; e < n_experts; e += 32) z += (p[e] = expf(to_float(lt[e]) - m));
    z = warp_sum(z);
    for (int e = lane; e < n_experts; e += 32) st[e] = p[e] /= z;
  }
  __syncwarp();
  int choice = -1;  // lane j < k: the token's j-th expert
  if (forced) {
    if (lane < k) choice = int(forced[t * k + lane]);
  } else {
    const bool grouped = a.num_groups > 1;
    const uint64_t kept = grouped ? keep_groups(p, bias, a, lane) : 0;
    const int group_size = grouped ? int(a.experts / a.num_groups) : n_experts;
    uint64_t taken = 0;  // bit i: expert lane + 32 i is chosen
    for (int j = 0; j < k; ++j) {
      float v = 0.f;
      int id = -1;
      for (int i = 0, e = lane; e < n_experts; ++i, e += 32) {
        if (((taken >> i) & 1u) || (grouped && !((kept >> (e / group_size)) & 1u))) continue;
        keep_better(v, id, p[e] + (bias ? bias[e] : 0.f), e);
      }
      warp_argmax(v, id);
      if (id >= 0 && (id & 31) == lane) taken |= uint64_t(1) << (id >> 5);
      if (lane == j) choice = id;
    }
  }
  const float chosen_p = lane < k && choice >= 0 && choice < n_experts ? p[choice] : 0.f;
  const float sum = warp_sum(chosen_p) + (a.sigmoid ? 1e-20f : 0.f);
  if (lane < k) {
    experts[t * k + lane] = choice;
    weights[t * k + lane] = chosen_p / (a.norm_topk_prob ? sum : 1.f) * a.scaling;
  }
}

// dp_e = extra_e + sum over the slots j choosing e of g_j, with
// g_j = c dw_j (or (c dw_j - dw . w) / S renormalised); then through the
// softmax (p_e (dp_e - p . dp)) or the sigmoid (dp_e p_e (1 - p_e)). One warp
// per token, lane j holding slot j; dp is the warp's E floats of shared
// memory, each expert written only by the lane that owns it, slots in order.
template <typename L>
__global__ void router_backward_kernel(const float* __restrict__ dweights, const float* __restrict__ extra,
                                       bool extra_per_token, const float* __restrict__ scores,
                                       const int64_t* __restrict__ experts, const float* __restrict__ weights,
                                       RouterArgs a, L* __restrict__ dlogits) {
  extern __shared__ float router_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + warp;
  if (t >= a.tokens) return;
  const int n_experts = int(a.experts), k = int(a.top_k);
  float* dp = router_smem + int64_t(warp) * n_experts;
  const float* pt = scores + t * a.experts;
  const float* xt = extra ? extra + (extra_per_token ? t * a.experts : 0) : nullptr;
  for (int e = lane; e < n_experts; e += 32) dp[e] = xt ? xt[e] : 0.f;
  int slot_expert = -1;
  float slot_p = 0.f, dw = 0.f, w = 0.f;
  if (lane < k) {
    slot_expert = int(experts[t * k + lane]);
    slot_p = slot_expert >= 0 && slot_expert < n_experts ? pt[slot_expert] : 0.f;
    dw = dweights[t * k + lane];
    w = weights[t * k + lane];
  }
  const float sum = warp_sum(slot_p) + (a.sigmoid ? 1e-20f : 0.f), dot = warp_sum(dw * w);
  const float cdw = a.scaling * dw;
  const float g = a.norm_topk_prob ? (cdw - dot) / sum : cdw;
  __syncwarp();
  for (int j = 0; j < k; ++j) {
    const int e = __shfl_sync(kFullMask, slot_expert, j);
    const float gj = __shfl_sync(kFullMask, g, j);
    if (e >= 0 && e < n_experts && (e & 31) == lane) dp[e] += gj;
  }
  __syncwarp();
  float pdp = 0.f;
  if (!a.sigmoid) {
    for (int e = lane; e < n_experts; e += 32) pdp += pt[e] * dp[e];
    pdp = warp_sum(pdp);
  }
  L* dt = dlogits + t * a.experts;
  for (int e = lane; e < n_experts; e += 32) {
    const float d = a.sigmoid ? dp[e] * pt[e] * (1.f - pt[e]) : pt[e] * (dp[e] - pdp);
    dt[e] = from_float<L>(d);
  }
}

// Sort keys (the expert, or E for an id outside [0, E)) and values j*T + t,
// in (j, t) order so that the stable sort keeps slot-then-token order.
__global__ void sort_keys_kernel(const int64_t* __restrict__ experts, int64_t tokens, int64_t k,
                                 int64_t num_experts, int32_t* __restrict__ keys, int32_t* __restrict__ values) {
  const int64_t n = tokens * k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i / tokens, t = i % tokens;
    const int64_t e = experts[t * k + j];
    keys[i] = (e >= 0 && e < num_experts) ? int32_t(e) : int32_t(num_experts);
    values[i] = int32_t(i);
  }
}

__global__ void decode_rows_kernel(const int32_t* __restrict__ values, int64_t n, int64_t tokens,
                                   int64_t* __restrict__ token_of_row, int64_t* __restrict__ slot_of_row) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    token_of_row[i] = values[i] % tokens;
    slot_of_row[i] = values[i] / tokens;
  }
}

// rows_per_expert[e] = (first sorted key > e) - (first sorted key >= e).
__global__ void count_rows_kernel(const int32_t* __restrict__ sorted_keys, int64_t n, int64_t num_experts,
                                  int64_t* __restrict__ rows_per_expert) {
  auto lower_bound = [&](int64_t key) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted_keys[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < num_experts;
       e += int64_t(gridDim.x) * blockDim.x)
    rows_per_expert[e] = lower_bound(e + 1) - lower_bound(e);
}

// kToRows: row_weights[i] = weights[t_i, j_i]; else dweights[t_i, j_i] = drow[i].
template <bool kToRows>
__global__ void row_pairs_kernel(const float* __restrict__ in, const int64_t* __restrict__ token_of_row,
                                 const int64_t* __restrict__ slot_of_row, int64_t n, int64_t tokens, int64_t k,
                                 float* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = token_of_row[i], j = slot_of_row[i];
    const bool valid = t >= 0 && t < tokens && j >= 0 && j < k;
    if (kToRows) out[i] = valid ? in[t * k + j] : NAN;
    else if (valid) out[t * k + j] = in[i];
  }
}

// One block per expert: sums[e] = sum over t of scores[t, e], fp32.
__global__ void score_sums_kernel(const float* __restrict__ scores, int64_t tokens, int64_t experts,
                                  float* __restrict__ sums) {
  __shared__ float scratch[32];
  const int64_t e = blockIdx.x;
  float acc = 0.f;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) acc += scores[t * experts + e];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) sums[e] = acc;
}

// ---- kernel launchers ---------------------------------------------------------------------

RouterArgs router_args(const char* op, const Tensor& logits, const ops::MoeRouterConfig& cfg) {
  BB_CHECK(cfg.top_k <= kMaxTopK, op, ": the CUDA router takes top_k up to ", kMaxTopK, ", got ", cfg.top_k);
  BB_CHECK(cfg.num_groups <= kMaxGroups, op, ": the CUDA router takes up to ", kMaxGroups, " groups, got ",
           cfg.num_groups);
  BB_CHECK(logits.size(1) <= kMaxExperts, op, ": the CUDA router takes up to ", kMaxExperts, " experts, got ",
           logits.size(1));
  return {logits.size(0), logits.size(1), cfg.top_k, cfg.num_groups, cfg.topk_groups,
          cfg.score == ops::MoeScore::Sigmoid, cfg.norm_topk_prob, float(cfg.routed_scaling_factor)};
}

// A warp per token and E floats of shared memory per warp: as many warps a
// block as the default shared memory limit holds, up to kMaxRouterWarps.
struct WarpPerToken {
  int warps;
  unsigned blocks;
  size_t smem_bytes;
};

WarpPerToken warp_per_token(int64_t tokens, int64_t smem_floats_per_warp) {
  const size_t per_warp = size_t(smem_floats_per_warp) * sizeof(float);
  const int warps = int(std::min<size_t>(kMaxRouterWarps, kRouterSmemBytes / std::max<size_t>(per_warp, 1)));
  return {warps, unsigned((tokens + warps - 1) / warps), size_t(warps) * per_warp};
}

void check_f32(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [t, name] : tensors) {
    if (!t->defined()) continue;
    check_cuda(*t, op, name);
    check_dtype_in(*t, op, name, {DType::F32});
  }
}

// The z-loss, a warp per token as the routing.
template <typename L>
__global__ void router_lse_kernel(const L* __restrict__ logits, int64_t tokens, int64_t experts,
                                  float* __restrict__ lse) {
  const int lane = threadIdx.x & 31;
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= tokens) return;
  const L* zt = logits + t * experts;
  float m = -INFINITY;
  for (int64_t e = lane; e < experts; e += 32) m = fmaxf(m, to_float(zt[e]));
  m = warp_max(m);
  float s = 0.f;
  for (int64_t e = lane; e < experts; e += 32) s += expf(to_float(zt[e]) - m);
  s = warp_sum(s);
  if (lane == 0) lse[t] = m + logf(s);
}

template <typename L>
__global__ void router_z_loss_backward_kernel(const L* __restrict__ logits, const float* __restrict__ lse,
                                              int64_t tokens, int64_t experts, float scale, L* __restrict__ dlogits) {
  const int lane = threadIdx.x & 31;
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= tokens) return;
  const float g = scale * 2.f * lse[t];
  for (int64_t e = lane; e < experts; e += 32) {
    const int64_t i = t * experts + e;
    dlogits[i] = from_float<L>(to_float(dlogits[i]) + g * expf(to_float(logits[i]) - lse[t]));
  }
}

}  // namespace

void moe_router_forward(const Tensor& logits, const ops::MoeRouterConfig& cfg, const Tensor& expert_bias,
                        const Tensor& forced_experts, Tensor& scores, Tensor& experts, Tensor& weights) {
  const char* op = "moe_router_forward";
  check_cuda(logits, op, "logits");
  check_f32(op, {{&scores, "scores"}, {&weights, "weights"}, {&expert_bias, "expert_bias"}});
  const RouterArgs a = router_args(op, logits, cfg);
  if (a.tokens == 0) return;
  const WarpPerToken w = warp_per_token(a.tokens, a.experts);
  DeviceGuard guard(logits.device().index);
  cudaStream_t stream = current_stream();
  const float* bias = expert_bias.defined() ? expert_bias.data<float>() : nullptr;
  const int64_t* forced = forced_experts.defined() ? forced_experts.data<int64_t>() : nullptr;
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using L = decltype(tag);
    router_forward_kernel<L><<<w.blocks, w.warps * 32, w.smem_bytes, stream>>>(
        static_cast<const L*>(logits.raw()), bias, forced, a, scores.data<float>(), experts.data<int64_t>(),
        weights.data<float>());
  });
  CUDA_CHECK_LAUNCH(op);
}

void moe_router_backward(const Tensor& dweights, const Tensor& dscores_extra, const Tensor& logits,
                         const Tensor& scores, const Tensor& experts, const Tensor& weights,
                         const ops::MoeRouterConfig& cfg, Tensor& dlogits) {
  const char* op = "moe_router_backward";
  check_cuda(logits, op, "logits");
  check_f32(op, {{&dweights, "dweights"}, {&dscores_extra, "dscores_extra"}, {&scores, "scores"},
                 {&weights, "weights"}});
  BB_CHECK(dlogits.dtype() == logits.dtype(), op, ": dlogits is ", dtype_name(dlogits.dtype()), " but logits is ",
           dtype_name(logits.dtype()));
  const RouterArgs a = router_args(op, logits, cfg);
  if (a.tokens == 0) return;
  const WarpPerToken w = warp_per_token(a.tokens, a.experts);
  DeviceGuard guard(logits.device().index);
  cudaStream_t stream = current_stream();
  const float* extra = dscores_extra.defined() ? dscores_extra.data<float>() : nullptr;
  const bool per_token = dscores_extra.defined() && dscores_extra.dim() == 2;
  dispatch_activation(dlogits.dtype(), op, [&](auto tag) {
    using L = decltype(tag);
    router_backward_kernel<L><<<w.blocks, w.warps * 32, w.smem_bytes, stream>>>(
        dweights.data<float>(), extra, per_token, scores.data<float>(), experts.data<int64_t>(),
        weights.data<float>(), a, static_cast<L*>(dlogits.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
}

void moe_sort_rows(const Tensor& experts, int64_t num_experts, Tensor& token_of_row, Tensor& slot_of_row,
                   Tensor& rows_per_expert) {
  const char* op = "moe_sort_rows";
  check_cuda(experts, op, "experts");
  const int64_t tokens = experts.size(0), k = experts.size(1), n = tokens * k;
  BB_CHECK(n < std::numeric_limits<int32_t>::max() && num_experts < std::numeric_limits<int32_t>::max(), op,
           ": the CUDA sort keys rows and experts with int32, got ", n, " rows and ", num_experts, " experts");
  DeviceGuard guard(experts.device().index);
  cudaStream_t stream = current_stream();
  const Device dev = experts.device();
  Tensor keys = Tensor::empty({n}, DType::I32, dev), values = Tensor::empty({n}, DType::I32, dev);
  Tensor sorted_keys = Tensor::empty({n}, DType::I32, dev), sorted_values = Tensor::empty({n}, DType::I32, dev);
  if (n > 0) {
    sort_keys_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(experts.data<int64_t>(), tokens, k, num_experts,
                                                                      keys.data<int32_t>(), values.data<int32_t>());
    CUDA_CHECK_LAUNCH(op);
    sort_pairs_by_key(keys, values, n, num_experts, sorted_keys, sorted_values, stream);
    decode_rows_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        sorted_values.data<int32_t>(), n, tokens, token_of_row.data<int64_t>(), slot_of_row.data<int64_t>());
    CUDA_CHECK_LAUNCH(op);
  }
  count_rows_kernel<<<grid_for(num_experts, kThreads), kThreads, 0, stream>>>(sorted_keys.data<int32_t>(), n,
                                                                               num_experts,
                                                                               rows_per_expert.data<int64_t>());
  CUDA_CHECK_LAUNCH(op);
}

void moe_row_weights(const Tensor& weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                     Tensor& row_weights) {
  const char* op = "moe_row_weights";
  check_f32(op, {{&weights, "weights"}, {&row_weights, "row_weights"}});
  const int64_t n = row_weights.numel();
  if (n == 0) return;
  DeviceGuard guard(weights.device().index);
  row_pairs_kernel<true><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      weights.data<float>(), token_of_row.data<int64_t>(), slot_of_row.data<int64_t>(), n, weights.size(0),
      weights.size(1), row_weights.data<float>());
  CUDA_CHECK_LAUNCH(op);
}

void moe_gather_row_grads(const Tensor& drow_weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                          Tensor& dweights) {
  const char* op = "moe_gather_row_grads";
  check_f32(op, {{&drow_weights, "drow_weights"}, {&dweights, "dweights"}});
  DeviceGuard guard(dweights.device().index);
  dweights.zero_();
  const int64_t n = drow_weights.numel();
  if (n == 0) return;
  row_pairs_kernel<false><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      drow_weights.data<float>(), token_of_row.data<int64_t>(), slot_of_row.data<int64_t>(), n, dweights.size(0),
      dweights.size(1), dweights.data<float>());
  CUDA_CHECK_LAUNCH(op);
}

void moe_score_sums(const Tensor& scores, Tensor& sums) {
  const char* op = "moe_score_sums";
  check_f32(op, {{&scores, "scores"}, {&sums, "sums"}});
  const int64_t experts = scores.size(1);
  if (experts == 0) return;
  DeviceGuard guard(scores.device().index);
  score_sums_kernel<<<int(experts), kThreads, 0, current_stream()>>>(scores.data<float>(), scores.size(0), experts,
                                                                     sums.data<float>());
  CUDA_CHECK_LAUNCH(op);
}

void moe_router_lse(const Tensor& logits, Tensor& lse) {
  const char* op = "moe_router_lse";
  check_cuda(logits, op, "logits");
  check_f32(op, {{&lse, "lse"}});
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  if (tokens == 0) return;
  const WarpPerToken w = warp_per_token(tokens, 0);
  DeviceGuard guard(logits.device().index);
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using L = decltype(tag);
    router_lse_kernel<L><<<w.blocks, w.warps * 32, 0, current_stream()>>>(
        static_cast<const L*>(logits.raw()), tokens, experts, lse.data<float>());
  });
  CUDA_CHECK_LAUNCH(op);
}

void moe_router_z_loss_backward(const Tensor& logits, const Tensor& lse, double scale, Tensor& dlogits) {
  const char* op = "moe_router_z_loss_backward";
  check_cuda(logits, op, "logits");
  check_f32(op, {{&lse, "lse"}});
  BB_CHECK(dlogits.dtype() == logits.dtype(), op, ": dlogits is ", dtype_name(dlogits.dtype()), " but logits is ",
           dtype_name(logits.dtype()));
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  if (tokens == 0) return;
  const WarpPerToken w = warp_per_token(tokens, 0);
  DeviceGuard guard(logits.device().index);
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using L = decltype(tag);
    router_z_loss_backward_kernel<L><<<w.blocks, w.warps * 32, 0, current_stream()>>>(
        static_cast<const L*>(logits.raw()), lse.data<float>(), tokens, experts, float(scale),
        static_cast<L*>(dlogits.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
