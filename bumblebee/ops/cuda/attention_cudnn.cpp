// cuDNN fused attention (SDPA) through the cudnn-frontend graph API, on the
// packed THD layout: q, k, v, out stay [T, heads, D] and cuDNN reads each
// sequence through ragged offsets (element offsets built on the device from
// cu_seqlens_q and cu_seqlens_kv), with per-sequence query and key lengths as
// its padding mask and, for the causal mask, the diagonal aligned bottom-right
// per sequence. Where every sequence's query and key lengths are equal (the
// caller passed one cu_seqlens tensor for both: self-attention, the ring's
// half-against-half partials) the diagonal is aligned top-left instead, the
// same mask: cuDNN 9's engines for it run the backward 1.75x faster on Hopper
// (benchmarks/NOTES.md, "cuDNN's causal alignment"). Forward writes
// lse [Tq, Hq] directly as ragged stats; backward reads its stats in the padded
// [S, Hq, max_seqlen_q] layout, filled from lse by a small kernel.
//
// Uniform batches take a dense graph. With one cu_seqlens tensor for queries
// and keys and S x max_seqlen == T rows, every sequence holds exactly
// max_seqlen tokens (the offsets end at T and no length exceeds max_seqlen,
// as ops.h asks of every caller), so q, k, v are plain [S, L, H, D] tensors:
// no ragged offsets, no padding mask, no length kernel. That is the batch of
// fixed-length pretraining samples, and cuDNN's engines for it run the
// backward 6-8 % faster than the ragged graph of the same lengths
// (benchmarks/cudnn_sdpa_variants.cu). The forward still writes lse [Tq, Hq]
// in place (a token-major stats stride, honoured since cuDNN 9.12); the
// backward reads the packed [S, Hq, L] stats it needs before 9.26.
//
// A cuDNN graph is built (heuristics, plan compilation) once per shape and
// cached: the number of sequences, max_seqlen_q and max_seqlen_kv (rounded up
// to a multiple of 64 for ragged graphs, so nearby packings share a plan;
// exact for dense ones), heads, the q/k and v head dims, mask and its
// alignment, dense or ragged, scale and device.
//
// Under deterministic mode (backend.deterministic, ops/deterministic.h) the
// backward graph asks for cuDNN's deterministic algorithm (dQ summed without
// atomics); the setting is part of the cache key. A shape for which this
// cuDNN has no deterministic engine is an error naming the key.
//
// cuDNN's heuristics pick the first engine configuration that builds. With
// BB_CUDNN_ATTENTION_AUTOTUNE=1 (read when a graph is built; it is part of the
// cache key, so one process can compare both) every configuration the
// heuristics and the fallback list offer is built, and the first execution of
// the graph times each on the call's own tensors (cudnn-frontend's autotune,
// which synchronises the device: not inside a CUDA graph capture) and keeps
// the fastest. An A/B for shapes whose default engine runs slow, as the
// backward of DeepSeek-V3's 192/128 attention (docs/cuda.md).
//
// The v head dim may differ from the q/k one (multi-head latent attention:
// DeepSeek-V3's 192 / 128), so q, k, v and out each get their own dims,
// strides and ragged offsets; cuDNN 9 on Hopper runs such pairs (the
// selection in attention.cpp sends it only the pairs docs/cuda.md lists).
//
// Built only when CMake found the cudnn-frontend headers and libcudnn
// (BB_WITH_CUDNN); otherwise asking for it is an error that says so.
#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/ops/deterministic.h"

#include "bumblebee/core/error.h"

#ifdef BB_WITH_CUDNN

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/ops/cuda/cudnn_varlen.h"

namespace bb::cuda {
namespace {

namespace fe = cudnn_frontend;

constexpr int kMaxDevices = 64;
constexpr int64_t kSeqlenBucket = 64;

enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kSeqLenQ, kSeqLenKV, kOffsetQ, kOffsetK, kOffsetV, kOffsetO, kOffsetStats, kOffsetDO, kOffsetDQ, kOffsetDK,
  kOffsetDV,
};

void check_cudnn(cudnnStatus_t status, const char* call) {
  BB_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN call ", call, " failed: ", cudnnGetErrorString(status));
}

void check_fe(fe::error_object err, const char* what, const char* hint = "") {
  BB_CHECK(err.is_good(), "cuDNN attention: ", what, " failed: ", err.get_message(), hint);
}

cudnnHandle_t handle_for_current_device() {
  static std::once_flag once[kMaxDevices];
  static cudnnHandle_t handles[kMaxDevices];
  const int dev = current_device();
  BB_CHECK(dev < kMaxDevices, "cuDNN attention: device index ", dev, " out of range");
  std::call_once(once[dev], [dev] { check_cudnn(cudnnCreate(&handles[dev]), "cudnnCreate"); });
  check_cudnn(cudnnSetStream(handles[dev], current_stream()), "cudnnSetStream");
  return handles[dev];
}

// Token-major THD dims and strides of a [tokens, heads, dim] tensor seen as
// [S, heads, seqlen, dim]. With ragged offsets cuDNN places each sequence by
// its offset, so the batch stride only has to be a valid dense value.
std::vector<int64_t> thd_dim(int64_t seqs, int64_t heads, int64_t seqlen, int64_t dim) {
  return {seqs, heads, seqlen, dim};
}
std::vector<int64_t> thd_stride(int64_t heads, int64_t seqlen, int64_t dim) {
  return {seqlen * heads * dim, dim, heads * dim, 1};
}

struct Shape4 {
  int64_t seqs, seqlen_q, seqlen_kv, heads_q, heads_kv, dim_qk, dim_v;
  bool causal;
  bool equal_lengths;   // every sequence's query and key lengths are equal: causal aligns top-left
  bool dense;           // every sequence has exactly seqlen_q == seqlen_kv rows: no ragged offsets
  // q and dq; k and dk; v and dv; out and dout.
  std::vector<int64_t> q_dim() const { return thd_dim(seqs, heads_q, seqlen_q, dim_qk); }
  std::vector<int64_t> k_dim() const { return thd_dim(seqs, heads_kv, seqlen_kv, dim_qk); }
  std::vector<int64_t> v_dim() const { return thd_dim(seqs, heads_kv, seqlen_kv, dim_v); }
  std::vector<int64_t> o_dim() const { return thd_dim(seqs, heads_q, seqlen_q, dim_v); }
  std::vector<int64_t> q_stride() const { return thd_stride(heads_q, seqlen_q, dim_qk); }
  std::vector<int64_t> k_stride() const { return thd_stride(heads_kv, seqlen_kv, dim_qk); }
  std::vector<int64_t> v_stride() const { return thd_stride(heads_kv, seqlen_kv, dim_v); }
  std::vector<int64_t> o_stride() const { return thd_stride(heads_q, seqlen_q, dim_v); }
  fe::DiagonalAlignment_t diagonal_alignment() const {
    return equal_lengths ? fe::DiagonalAlignment_t::TOP_LEFT : fe::DiagonalAlignment_t::BOTTOM_RIGHT;
  }
};

using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool,
                       float, bool, bool>;

// A built graph; with autotune, `tuned` guards the one timing of its plans.
struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  bool autotune = false;
  std::once_flag tuned;
};

std::mutex g_graphs_mutex;
std::map<Key, std::shared_ptr<CachedGraph>> g_graphs;

// BB_CUDNN_ATTENTION_AUTOTUNE=1 builds every engine configuration and keeps the
// fastest; 0 or unset the heuristics' first.
bool autotune_selected() {
  const char* env = std::getenv("BB_CUDNN_ATTENTION_AUTOTUNE");
  if (env == nullptr || *env == '\0') return false;
  BB_CHECK(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, "BB_CUDNN_ATTENTION_AUTOTUNE is '", env,
           "'; it must be 0 or 1");
  return std::strcmp(env, "1") == 0;
}

std::shared_ptr<fe::graph::Tensor_attributes> ragged_offsets(fe::graph::Graph& g, const char* name, int64_t uid,
                                                              int64_t seqs) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({seqs + 1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT64));
}

std::shared_ptr<fe::graph::Tensor_attributes> seq_lens(fe::graph::Graph& g, const char* name, int64_t uid,
                                                        int64_t seqs) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({seqs, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

// A [S, heads, seqlen, dim] activation; placed by ragged offsets unless the graph is dense.
std::shared_ptr<fe::graph::Tensor_attributes> activation(fe::graph::Graph& g, const Shape4& s, const char* name,
                                                          int64_t uid, const std::vector<int64_t>& dim,
                                                          const std::vector<int64_t>& stride, int64_t offset_uid) {
  auto t = g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
  if (!s.dense) t->set_ragged_offset(ragged_offsets(g, (std::string("offset_") + name).c_str(), offset_uid, s.seqs));
  return t;
}

// An output's dims, strides and, unless the graph is dense, ragged offsets.
void place_output(fe::graph::Graph& g, const Shape4& s, fe::graph::Tensor_attributes& t, const char* name,
                  int64_t uid, const std::vector<int64_t>& dim, const std::vector<int64_t>& stride,
                  int64_t offset_uid) {
  t.set_output(true).set_uid(uid).set_dim(dim).set_stride(stride);
  if (!s.dense) t.set_ragged_offset(ragged_offsets(g, (std::string("offset_") + name).c_str(), offset_uid, s.seqs));
}

// The padding mask of a ragged graph: per-sequence query and key lengths.
template <typename Options>
void set_lengths(fe::graph::Graph& g, const Shape4& s, Options& options) {
  if (s.dense) return;
  options.set_padding_mask(true)
      .set_seq_len_q(seq_lens(g, "seq_len_q", kSeqLenQ, s.seqs))
      .set_seq_len_kv(seq_lens(g, "seq_len_kv", kSeqLenKV, s.seqs));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// `hint` ends every error message: what the caller asked for beyond the shape.
void build(fe::graph::Graph& g, cudnnHandle_t handle, bool autotune, const char* hint = "") {
  check_fe(g.validate(), "graph validation", hint);
  check_fe(g.build_operation_graph(handle), "building the operation graph", hint);
  check_fe(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "creating execution plans",
           hint);
  check_fe(g.check_support(handle), "support check (this cuDNN has no engine for the shape)", hint);
  check_fe(g.build_plans(handle, autotune ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
           "building plans", hint);
}

std::shared_ptr<fe::graph::Graph> forward_graph(const Shape4& s, float scale, cudnnHandle_t handle, bool autotune) {
  auto g = new_graph();
  auto q = activation(*g, s, "q", kQ, s.q_dim(), s.q_stride(), kOffsetQ);
  auto k = activation(*g, s, "k", kK, s.k_dim(), s.k_stride(), kOffsetK);
  auto v = activation(*g, s, "v", kV, s.v_dim(), s.v_stride(), kOffsetV);
  auto options =
      fe::graph::SDPA_attributes().set_name("attention_forward").set_generate_stats(true).set_attn_scale(scale);
  set_lengths(*g, s, options);
  if (s.causal) options.set_diagonal_alignment(s.diagonal_alignment()).set_diagonal_band_right_bound(0);
  auto [o, stats] = g->sdpa(q, k, v, options);
  place_output(*g, s, *o, "o", kO, s.o_dim(), s.o_stride(), kOffsetO);
  // lse [T, Hq] is token-major stats (ragged offsets cu * Hq unless dense).
  place_output(*g, s, *stats, "stats", kStats, {s.seqs, s.heads_q, s.seqlen_q, 1},
               {s.seqlen_q * s.heads_q, 1, s.heads_q, 1}, kOffsetStats);
  stats->set_data_type(fe::DataType_t::FLOAT);
  build(*g, handle, autotune);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Shape4& s, float scale, cudnnHandle_t handle, bool autotune,
                                                 bool deterministic) {
  auto g = new_graph();
  auto q = activation(*g, s, "q", kQ, s.q_dim(), s.q_stride(), kOffsetQ);
  auto k = activation(*g, s, "k", kK, s.k_dim(), s.k_stride(), kOffsetK);
  auto v = activation(*g, s, "v", kV, s.v_dim(), s.v_stride(), kOffsetV);
  auto o = activation(*g, s, "o", kO, s.o_dim(), s.o_stride(), kOffsetO);
  auto dout = activation(*g, s, "dout", kDO, s.o_dim(), s.o_stride(), kOffsetDO);
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("stats")
                             .set_uid(kStats)
                             .set_dim({s.seqs, s.heads_q, s.seqlen_q, 1})
                             .set_stride({s.heads_q * s.seqlen_q, s.seqlen_q, 1, 1})
                             .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_attn_scale(scale);
  set_lengths(*g, s, options);
  if (s.causal) options.set_diagonal_alignment(s.diagonal_alignment()).set_diagonal_band_right_bound(0);
  if (deterministic) options.set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
  place_output(*g, s, *dq, "dq", kDQ, s.q_dim(), s.q_stride(), kOffsetDQ);
  place_output(*g, s, *dk, "dk", kDK, s.k_dim(), s.k_stride(), kOffsetDK);
  place_output(*g, s, *dv, "dv", kDV, s.v_dim(), s.v_stride(), kOffsetDV);
  build(*g, handle, autotune,
        deterministic ? " (backend.deterministic=true asked for cuDNN's deterministic attention backward; "
                        "set backend.deterministic=false to train this shape with the default one)"
                      : "");
  return g;
}

std::shared_ptr<CachedGraph> cached_graph(bool backward, const Shape4& s, float scale, cudnnHandle_t handle) {
  const bool autotune = autotune_selected();
  // The forward has no order-dependent sum: one graph serves both modes.
  const bool deterministic = backward && ops::deterministic();
  const Key key{current_device(), backward, s.seqs, s.seqlen_q, s.seqlen_kv, s.heads_q, s.heads_kv, s.dim_qk,
                s.dim_v, s.causal, s.equal_lengths, s.dense, scale, autotune, deterministic};
  std::lock_guard<std::mutex> lock(g_graphs_mutex);
  auto it = g_graphs.find(key);
  if (it == g_graphs.end()) {
    auto entry = std::make_shared<CachedGraph>();
    entry->graph = backward ? backward_graph(s, scale, handle, autotune, deterministic)
                            : forward_graph(s, scale, handle, autotune);
    entry->autotune = autotune;
    it = g_graphs.emplace(key, std::move(entry)).first;
  }
  return it->second;
}

int64_t bucketed(int64_t max_seqlen) { return (max_seqlen + kSeqlenBucket - 1) / kSeqlenBucket * kSeqlenBucket; }

// One cu_seqlens tensor for queries and keys means equal lengths in every
// sequence, known on the host without reading the offsets back; with
// S x max_seqlen rows besides, every length is max_seqlen (the dense graph;
// cuDNN's backward refuses s_q = s_kv = 1, which the ragged graph's 64-row
// bucket avoids, so one-token sequences stay ragged).
Shape4 shape_of(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans) {
  const int64_t seqs = spans.cu_seqlens_q.numel() - 1;
  const bool equal_lengths = spans.cu_seqlens_q.raw() == spans.cu_seqlens_kv.raw() &&
                             spans.cu_seqlens_q.numel() == spans.cu_seqlens_kv.numel() &&
                             spans.max_seqlen_q == spans.max_seqlen_kv;
  const bool dense = equal_lengths && spans.max_seqlen_q > 1 && seqs * spans.max_seqlen_q == q.size(0) &&
                     k.size(0) == q.size(0);
  const int64_t seqlen_q = dense ? spans.max_seqlen_q : bucketed(spans.max_seqlen_q);
  const int64_t seqlen_kv = dense ? spans.max_seqlen_kv : bucketed(spans.max_seqlen_kv);
  return {seqs, seqlen_q, seqlen_kv, q.size(1), k.size(1), q.size(2), v.size(2),
          spans.mask == ops::AttentionMask::Causal, equal_lengths, dense};
}

// Lengths and ragged offsets on the device: [S] int32 query and key lengths,
// then [S + 1] int64 offsets for each tensor kind (rows of one [5, S + 1] tensor).
struct Varlen {
  Tensor lens_q, lens_kv, offsets;
  RaggedOffsets at{};   // pointers into the rows of `offsets`
};

Varlen varlen(const ops::AttentionSpans& spans, const Shape4& s, cudaStream_t stream) {
  Varlen v;
  const Device dev = spans.cu_seqlens_q.device();
  v.lens_q = Tensor::empty({s.seqs}, DType::I32, dev);
  v.lens_kv = Tensor::empty({s.seqs}, DType::I32, dev);
  v.offsets = Tensor::empty({5, s.seqs + 1}, DType::I64, dev);
  int64_t* row = static_cast<int64_t*>(v.offsets.raw());
  const int64_t n = s.seqs + 1;
  v.at = {row, row + n, row + 2 * n, row + 3 * n, row + 4 * n};
  const RaggedStrides strides{s.heads_q * s.dim_qk, s.heads_kv * s.dim_qk, s.heads_kv * s.dim_v, s.heads_q * s.dim_v,
                              s.heads_q};
  cudnn_varlen_metadata(static_cast<const int32_t*>(spans.cu_seqlens_q.raw()),
                        static_cast<const int32_t*>(spans.cu_seqlens_kv.raw()), int(s.seqs), strides,
                        static_cast<int32_t*>(v.lens_q.raw()), static_cast<int32_t*>(v.lens_kv.raw()), v.at, stream);
  return v;
}

void execute(CachedGraph& cached, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack, Device dev) {
  fe::graph::Graph& g = *cached.graph;
  if (cached.autotune)
    std::call_once(cached.tuned, [&] {
      Tensor workspace = Tensor::empty({std::max<int64_t>(g.get_autotune_workspace_size(), 1)}, DType::U8, dev);
      check_fe(g.autotune(handle, pack, workspace.raw()), "autotuning the engine configurations");
    });
  int64_t workspace_bytes = 0;
  check_fe(g.get_workspace_size(workspace_bytes), "workspace query");
  Tensor workspace = Tensor::empty({std::max<int64_t>(workspace_bytes, 1)}, DType::U8, dev);
  check_fe(g.execute(handle, pack, workspace.raw()), "execution");
}

}  // namespace

bool cudnn_attention_built() { return true; }

void cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                             double scale, Tensor& out, Tensor& lse) {
  cudnnHandle_t handle = handle_for_current_device();
  const Shape4 s = shape_of(q, k, v, spans);
  auto g = cached_graph(false, s, float(scale), handle);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kStats, lse.raw()},
  };
  Varlen meta;
  if (!s.dense) {
    meta = varlen(spans, s, current_stream());
    pack.insert({{kSeqLenQ, meta.lens_q.raw()}, {kSeqLenKV, meta.lens_kv.raw()},
                 {kOffsetQ, meta.at.q}, {kOffsetK, meta.at.k}, {kOffsetV, meta.at.v},
                 {kOffsetO, meta.at.o}, {kOffsetStats, meta.at.stats}});
  }
  execute(*g, handle, pack, q.device());
}

void cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans, double scale,
                              Tensor& dq, Tensor& dk, Tensor& dv) {
  cudnnHandle_t handle = handle_for_current_device();
  const Shape4 s = shape_of(q, k, v, spans);
  auto g = cached_graph(true, s, float(scale), handle);
  cudaStream_t stream = current_stream();
  Tensor stats = Tensor::empty({s.seqs, s.heads_q, s.seqlen_q}, DType::F32, q.device());
  lse_to_padded_stats(static_cast<const float*>(lse.raw()), static_cast<const int32_t*>(spans.cu_seqlens_q.raw()),
                      int(s.seqs), int(s.heads_q), int(s.seqlen_q), static_cast<float*>(stats.raw()), stream);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kDO, dout.raw()}, {kStats, stats.raw()},
      {kDQ, dq.raw()}, {kDK, dk.raw()}, {kDV, dv.raw()},
  };
  Varlen meta;
  if (!s.dense) {
    meta = varlen(spans, s, stream);
    pack.insert({{kSeqLenQ, meta.lens_q.raw()}, {kSeqLenKV, meta.lens_kv.raw()},
                 {kOffsetQ, meta.at.q}, {kOffsetK, meta.at.k}, {kOffsetV, meta.at.v},
                 {kOffsetO, meta.at.o}, {kOffsetDO, meta.at.o}, {kOffsetDQ, meta.at.q},
                 {kOffsetDK, meta.at.k}, {kOffsetDV, meta.at.v}});
  }
  execute(*g, handle, pack, q.device());
}

}  // namespace bb::cuda

#else  // no cuDNN in this build

namespace bb::cuda {
namespace {
[[noreturn]] void not_built() {
  BB_FAIL("cuDNN attention is not in this build: configure found no cudnn-frontend headers or libcudnn "
          "(run scripts/fetch_cuda_deps.sh, then reconfigure)");
}
}  // namespace

bool cudnn_attention_built() { return false; }

void cudnn_attention_forward(const Tensor&, const Tensor&, const Tensor&, const ops::AttentionSpans&, double, Tensor&,
                             Tensor&) {
  not_built();
}

void cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const ops::AttentionSpans&, double, Tensor&, Tensor&, Tensor&) {
  not_built();
}

}  // namespace bb::cuda

#endif  // BB_WITH_CUDNN
