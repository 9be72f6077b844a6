// cuDNN SDPA backward speed by graph variant, outside Bumblebee: which of the
// choices a THD attention graph makes (ragged offsets, the padding mask, the
// causal diagonal's alignment, the tensor layout) picks a slow engine. For each
// shape (the attention of Qwen3-1.7B, Qwen3-30B-A3B, Qwen3-8B and DeepSeek-V3's
// MLA at seq 4096) one forward (dense, top-left causal) makes out and the stats,
// then each backward variant is built with the heuristics' first plan and with
// every plan autotuned, and timed (median of 20 after 5 warm-ups; FLOPs as in
// bb_cuda_ops --perf: forward 2 S^2 (Dqk + Dv) H / 2 a sequence, backward 2.5x).
// It found the alignment (benchmarks/NOTES.md, "cuDNN's causal alignment").
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -Ithird_party/cudnn-frontend/include \
//     benchmarks/cudnn_sdpa_variants.cu -o /tmp/cudnn_sdpa_variants -lcudnn -lnvrtc
// (benchmarks/h200_session.sh cudnn_variants builds and runs it, also against
// the cuDNN of PyTorch's environment.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace fe = cudnn_frontend;

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

enum Uid : int64_t {
  Q = 1, K, V, O, Stats, dO, dQ, dK, dV, LenQ, LenKV, OffQ, OffK, OffV, OffO, OffdO, OffdQ, OffdK, OffdV,
};

struct Shape {
  int64_t b, s, hq, hkv, dqk, dv;
};

struct Variant {
  const char* name;
  bool ragged, padding, top_left, bhsd;
};

std::vector<int64_t> dims(const Shape& s, int64_t h, int64_t d) { return {s.b, h, s.s, d}; }
std::vector<int64_t> strides(const Shape& s, int64_t h, int64_t d, bool bhsd) {
  if (bhsd) return {h * s.s * d, s.s * d, d, 1};
  return {s.s * h * d, d, h * d, 1};
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return p;
}

void fill_uniform_bf16(void* p, size_t n, unsigned seed) {
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : h) x = __float2bfloat16(u(gen));
  check(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
}

template <typename T>
T* device_copy(const std::vector<T>& h) {
  T* d = static_cast<T*>(device_alloc(h.size() * sizeof(T)));
  check(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

fe::error_t build(fe::graph::Graph& g, cudnnHandle_t handle, bool all_plans) {
  if (fe::error_t e = g.validate(); !e.is_good()) return e;
  if (fe::error_t e = g.build_operation_graph(handle); !e.is_good()) return e;
  if (fe::error_t e = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); !e.is_good()) return e;
  if (fe::error_t e = g.check_support(handle); !e.is_good()) return e;
  return g.build_plans(handle, all_plans ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
}

// Median ms of 20 executions after 5 warm-ups; negative if one failed.
float time_graph(fe::graph::Graph& g, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack, void* ws) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 25; ++i) {
    cudaEventRecord(a);
    const fe::error_t e = g.execute(handle, pack, ws);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    if (!e.is_good()) return -1.f;
    float ms = 0.f;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 5) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void run_shape(cudnnHandle_t handle, const Shape& s, bool bhsd, const std::vector<Variant>& variants) {
  const size_t nq = s.b * s.s * s.hq * s.dqk, nk = s.b * s.s * s.hkv * s.dqk, nv = s.b * s.s * s.hkv * s.dv,
               no = s.b * s.s * s.hq * s.dv;
  void *q = device_alloc(nq * 2), *k = device_alloc(nk * 2), *v = device_alloc(nv * 2), *o = device_alloc(no * 2);
  void *dout = device_alloc(no * 2), *dq = device_alloc(nq * 2), *dk = device_alloc(nk * 2), *dv = device_alloc(nv * 2);
  void* stats = device_alloc(s.b * s.hq * s.s * 4);
  fill_uniform_bf16(q, nq, 1);
  fill_uniform_bf16(k, nk, 2);
  fill_uniform_bf16(v, nv, 3);
  fill_uniform_bf16(dout, no, 4);
  int32_t* lens = device_copy(std::vector<int32_t>(s.b, int32_t(s.s)));
  auto offsets = [&](int64_t per_token) {
    std::vector<int64_t> h(s.b + 1);
    for (int64_t i = 0; i <= s.b; ++i) h[i] = i * s.s * per_token;
    return device_copy(h);
  };
  int64_t *off_q = offsets(s.hq * s.dqk), *off_k = offsets(s.hkv * s.dqk), *off_v = offsets(s.hkv * s.dv),
          *off_o = offsets(s.hq * s.dv);
  const float scale = 1.f / std::sqrt(float(s.dqk));
  const double fwd_flops = double(s.b) * 2.0 * s.s * s.s * double(s.dqk + s.dv) * s.hq / 2.0;
  auto plain = [&](fe::graph::Graph& g, const char* name, int64_t uid, int64_t h, int64_t d) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(s, h, d)).set_stride(
        strides(s, h, d, bhsd)));
  };
  auto stats_tensor = [&](std::shared_ptr<fe::graph::Tensor_attributes> t) {
    t->set_uid(Stats).set_data_type(fe::DataType_t::FLOAT).set_dim({s.b, s.hq, s.s, 1}).set_stride(
        {s.hq * s.s, s.s, 1, 1});
  };
  {
    auto g = new_graph();
    auto options =
        fe::graph::SDPA_attributes().set_name("forward").set_generate_stats(true).set_attn_scale(scale).set_causal_mask(
            true);
    auto [to, ts] = g->sdpa(plain(*g, "q", Q, s.hq, s.dqk), plain(*g, "k", K, s.hkv, s.dqk),
                            plain(*g, "v", V, s.hkv, s.dv), options);
    to->set_output(true).set_uid(O).set_dim(dims(s, s.hq, s.dv)).set_stride(strides(s, s.hq, s.dv, bhsd));
    ts->set_output(true);
    stats_tensor(ts);
    if (!build(*g, handle, false).is_good()) {
      std::printf("forward graph failed to build\n");
      std::exit(1);
    }
    int64_t ws_bytes = 0;
    (void)g->get_workspace_size(ws_bytes);
    void* ws = device_alloc(ws_bytes);
    std::unordered_map<int64_t, void*> pack = {{Q, q}, {K, k}, {V, v}, {O, o}, {Stats, stats}};
    const float ms = time_graph(*g, handle, pack, ws);
    std::printf("shape B=%ld S=%ld Hq=%ld Hkv=%ld D=%ld/%ld %s: forward %.3f ms %.1f TFLOP/s\n", long(s.b), long(s.s),
                long(s.hq), long(s.hkv), long(s.dqk), long(s.dv), bhsd ? "BHSD" : "BSHD", ms, fwd_flops / ms / 1e9);
    cudaFree(ws);
  }
  for (const Variant& var : variants) {
    if (var.bhsd != bhsd) continue;
    for (bool autotune : {false, true}) {
      auto g = new_graph();
      auto ragged = [&](const std::string& name, int64_t uid) {
        return g->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({s.b + 1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_data_type(fe::DataType_t::INT64));
      };
      auto activation = [&](const char* name, int64_t uid, int64_t h, int64_t d, int64_t offset_uid) {
        auto t = plain(*g, name, uid, h, d);
        if (var.ragged) t->set_ragged_offset(ragged(std::string("offset_") + name, offset_uid));
        return t;
      };
      auto stats_in = g->tensor(fe::graph::Tensor_attributes().set_name("stats"));
      stats_tensor(stats_in);
      auto options = fe::graph::SDPA_backward_attributes().set_name("backward").set_attn_scale(scale);
      if (var.padding) {
        auto lengths = [&](const char* name, int64_t uid) {
          return g->tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({s.b, 1, 1, 1})
                               .set_stride({1, 1, 1, 1})
                               .set_data_type(fe::DataType_t::INT32));
        };
        options.set_padding_mask(true).set_seq_len_q(lengths("len_q", LenQ)).set_seq_len_kv(lengths("len_kv", LenKV));
      }
      if (var.top_left) options.set_causal_mask(true);
      else options.set_causal_mask_bottom_right(true);
      auto [tdq, tdk, tdv] =
          g->sdpa_backward(activation("q", Q, s.hq, s.dqk, OffQ), activation("k", K, s.hkv, s.dqk, OffK),
                           activation("v", V, s.hkv, s.dv, OffV), activation("o", O, s.hq, s.dv, OffO),
                           activation("do", dO, s.hq, s.dv, OffdO), stats_in, options);
      auto output = [&](std::shared_ptr<fe::graph::Tensor_attributes> t, int64_t uid, int64_t h, int64_t d,
                        int64_t offset_uid, const char* offset_name) {
        t->set_output(true).set_uid(uid).set_dim(dims(s, h, d)).set_stride(strides(s, h, d, bhsd));
        if (var.ragged) t->set_ragged_offset(ragged(offset_name, offset_uid));
      };
      output(tdq, dQ, s.hq, s.dqk, OffdQ, "offset_dq");
      output(tdk, dK, s.hkv, s.dqk, OffdK, "offset_dk");
      output(tdv, dV, s.hkv, s.dv, OffdV, "offset_dv");
      fe::error_t built = build(*g, handle, autotune);
      if (!built.is_good()) {
        std::printf("  %-30s autotune=%d: build failed: %s\n", var.name, autotune, built.get_message().c_str());
        continue;
      }
      std::unordered_map<int64_t, void*> pack = {{Q, q},  {K, k},   {V, v},   {O, o},  {dO, dout},
                                                 {Stats, stats}, {dQ, dq}, {dK, dk}, {dV, dv}};
      if (var.padding) pack[LenQ] = pack[LenKV] = lens;
      if (var.ragged) {
        pack[OffQ] = pack[OffdQ] = off_q;
        pack[OffK] = pack[OffdK] = off_k;
        pack[OffV] = pack[OffdV] = off_v;
        pack[OffO] = pack[OffdO] = off_o;
      }
      if (autotune) {
        void* tune_ws = device_alloc(g->get_autotune_workspace_size());
        fe::error_t tuned = g->autotune(handle, pack, tune_ws);
        if (!tuned.is_good()) std::printf("  autotune failed: %s\n", tuned.get_message().c_str());
        cudaFree(tune_ws);
      }
      int64_t ws_bytes = 0;
      (void)g->get_workspace_size(ws_bytes);
      void* ws = device_alloc(ws_bytes);
      const float ms = time_graph(*g, handle, pack, ws);
      if (ms > 0)
        std::printf("  %-30s autotune=%d: backward %.3f ms %.1f TFLOP/s (workspace %.1f MiB, plans %ld)\n", var.name,
                    autotune, ms, 2.5 * fwd_flops / ms / 1e9, ws_bytes / 1048576.0,
                    long(g->get_execution_plan_count()));
      else
        std::printf("  %-30s autotune=%d: execution failed\n", var.name, autotune);
      cudaFree(ws);
    }
  }
  for (void* p : {q, k, v, o, dout, dq, dk, dv, stats}) cudaFree(p);
  for (void* p : {static_cast<void*>(lens), static_cast<void*>(off_q), static_cast<void*>(off_k),
                  static_cast<void*>(off_v), static_cast<void*>(off_o)})
    cudaFree(p);
}

}  // namespace

int main() {
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::printf("cudnnCreate failed\n");
    return 1;
  }
  std::printf("cudnn version %zu\n", cudnnGetVersion());
  const std::vector<Shape> shapes = {{2, 4096, 32, 4, 128, 128}, {2, 4096, 16, 8, 128, 128}, {4, 4096, 16, 8, 128, 128},
                                     {2, 4096, 32, 8, 128, 128}, {1, 4096, 128, 128, 192, 128}};
  const std::vector<Variant> variants = {{"ragged+padding BR (bb before)", true, true, false, false},
                                         {"ragged+padding TL (bb now)", true, true, true, false},
                                         {"dense BSHD padding TL", false, true, true, false},
                                         {"dense BSHD TL", false, false, true, false},
                                         {"dense BSHD BR", false, false, false, false},
                                         {"dense BHSD TL (torch)", false, false, true, true}};
  for (const Shape& s : shapes)
    for (bool bhsd : {false, true}) run_shape(handle, s, bhsd, variants);
  return 0;
}
