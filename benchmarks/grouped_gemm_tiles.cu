// CUTLASS 3 Hopper ptr-array grouped GEMM speed by tile configuration: which
// CTA tile, cluster and schedule to give the MoE expert GEMMs of
// bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.cu, which has two (c0 below,
// LibraryConfig of grouped_gemm_kernel.cuh, and c1, SmallExpertConfig, for the
// forward and input-gradient GEMMs of experts with few rows). Each build takes one
// configuration (-DGG_CONFIG=N) and instantiates the library's four kernels
// (grouped_gemm_kernel.cuh's Kinds) with it: Forward (bf16 d), InputGrad (bf16
// d), WeightGrad into fp32 and into bf16 (beta 1, accumulating). The library
// runs c0 with the raster order Heuristic, swizzle 1 and host problem shapes;
// "default" below is CUTLASS's own default (AlongM), which it ran before.
//
//   N  schedule     tile        cluster (M x N)
//   0  cooperative  128x256x64  2x1   the library's
//   1  cooperative  128x256x64  1x1   the library's below 1,024 rows an expert (Forward, InputGrad)
//   2  cooperative  128x128x64  2x1
//   3  cooperative  128x128x64  1x2
//   4  cooperative  256x128x64  1x2
//   5  pingpong     128x128x64  1x1
//   6  pingpong     128x128x64  2x1
//   7  pingpong     64x256x64   1x1
//   8  cooperative  128x256x128 2x1   (2 stages; no room for WeightGrad fp32's epilogue)
//
// The shapes are a layer's six expert GEMMs (row-major d [m, n] = op(a) op(b),
// as grouped_gemm_sm90.h writes them) of Qwen3-30B-A3B (128 experts, hidden
// 2048, ffn 768, 65,536 rows) and of DeepSeek-V3 cut to 16 experts (hidden
// 7168, ffn 2048, 32,768 rows): fwd_gate_up, fwd_down, igrad_down (dh = dy
// W_down), igrad_gate_up (dx = dgate_up W_gate_up), wgrad_gate_up and
// wgrad_down (each into fp32 and bf16). The rows are split over the experts by
// a multinomial draw, uniform or skewed (p_e ~ 1/(e+1)^0.7), and packed as the
// library packs them; an expert without rows is no group. For every raster
// order x max swizzle size, with host problem shapes, a case times the
// library's whole call (argument upload, can_implement, initialize, run) and
// the kernel alone (initialized once), each the median of 10 launches after 3
// warm-ups; the fastest call runs again with device-only problem shapes (a
// full persistent grid). Every case is checked against a reference GEMM
// (fp32) on the first, the largest and the last group. TFLOP/s: 2 sum(m n k)
// over the groups / time. One line a case, then one best line per kind, model
// and distribution beside the time at the scheduler's defaults.
//
//   seq 0 8 | xargs -P 9 -I{} /usr/local/cuda/bin/nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr \
//     -I. -Ithird_party/cutlass/include -DGG_CONFIG={} benchmarks/grouped_gemm_tiles.cu -o /tmp/gg_tiles_c{}
// (benchmarks/h200_session.sh gg_tiles builds and runs them all.)
//
// NDEBUG as in the library's Release build: with CUTLASS's device-side asserts
// compiled in, ptxas serializes the wgmma pipeline at their calls (warning
// C7510) and the kernels are not the library's.
#ifndef NDEBUG
#define NDEBUG
#endif
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bumblebee/ops/cuda/cutlass/grouped_gemm_kernel.cuh"

#ifndef GG_CONFIG
#error "build one configuration: -DGG_CONFIG=N, N from the table at the top of this file"
#endif

// A named namespace, not an anonymous one: nvcc cannot compile the host code
// it generates for kernel templates of an anonymous namespace that holds
// `using namespace cute`.
namespace gg {

using namespace cute;

using namespace bb::cuda::expert_gemm;
using bb::cuda::ExpertGemmGroup;
using RasterOrder = cutlass::gemm::kernel::detail::RasterOrderOptions;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// "tile=128x256x64 cluster=2x1 sched=coop" for a Config of grouped_gemm_kernel.cuh.
template <typename C>
std::string describe() {
  return "tile=" + std::to_string(C::kTileM) + "x" + std::to_string(C::kTileN) + "x" + std::to_string(C::kTileK) +
         " cluster=" + std::to_string(C::kClusterM) + "x" + std::to_string(C::kClusterN) +
         " sched=" + (C::kPingpong ? "pingpong" : "coop");
}

// The table above, in its order.
using Configs =
    std::tuple<LibraryConfig, SmallExpertConfig, Config<128, 128, 64, 2, 1, false>,
               Config<128, 128, 64, 1, 2, false>, Config<256, 128, 64, 1, 2, false>, Config<128, 128, 64, 1, 1, true>,
               Config<128, 128, 64, 2, 1, true>, Config<64, 256, 64, 1, 1, true>, Config<128, 256, 128, 2, 1, false>>;
using Cfg = std::tuple_element_t<GG_CONFIG, Configs>;

// The library's four kernels (grouped_gemm_kernel.cuh) with this build's tile,
// cluster and schedule; a kind whose Gemm is void does not fit (two stages).
using ForwardKernel = Kinds<Cfg>::Forward;
using InputGradKernel = Kinds<Cfg>::InputGrad;
using WeightGradKernel = Kinds<Cfg>::WeightGrad;
using WeightGradBf16Kernel = Kinds<Cfg>::WeightGradBf16;

__device__ uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

template <typename T>
__global__ void fill_uniform(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(uint32_t(i) ^ mix(uint32_t(i >> 32) + seed * 0x9e3779b9u));
    p[i] = T(float(h >> 8) * (2.f / 16777216.f) - 1.f);
  }
}

// ref [m, n] = sum_k a(i, k) b(k, j) + beta c [m, n], in fp32, with a(i, k) at
// a[i * sam + k * sak] and b(k, j) at b[k * sbk + j * sbn]; 16 x 16 tiles, each
// loaded along the operand's unit-stride mode.
template <typename TC>
__global__ void reference_gemm(const bf16* a, int64_t sam, int64_t sak, const bf16* b, int64_t sbk, int64_t sbn,
                               const TC* c, float beta, float* ref, int m, int n, int k) {
  __shared__ float ta[16][17], tb[16][17];
  const int i0 = blockIdx.y * 16, j0 = blockIdx.x * 16, tx = threadIdx.x, ty = threadIdx.y;
  const int ra = sam == 1 ? tx : ty, ca = sam == 1 ? ty : tx;  // a's tile row (i) and column (k)
  const int rb = sbk == 1 ? tx : ty, cb = sbk == 1 ? ty : tx;  // b's tile row (k) and column (j)
  float acc = 0.f;
  for (int k0 = 0; k0 < k; k0 += 16) {
    ta[ra][ca] = (i0 + ra < m && k0 + ca < k) ? float(a[(i0 + ra) * sam + (k0 + ca) * sak]) : 0.f;
    tb[rb][cb] = (k0 + rb < k && j0 + cb < n) ? float(b[(k0 + rb) * sbk + (j0 + cb) * sbn]) : 0.f;
    __syncthreads();
    for (int t = 0; t < 16; ++t) acc += ta[ty][t] * tb[t][tx];
    __syncthreads();
  }
  const int i = i0 + ty, j = j0 + tx;
  if (i < m && j < n) ref[int64_t(i) * n + j] = acc + (c ? beta * float(c[int64_t(i) * n + j]) : 0.f);
}

// out[0] = max |d - ref| (infinite where d is not finite), out[1] = max |ref|,
// as float bits (non-negative floats order as their bits).
template <typename TD>
__global__ void max_errors(const TD* d, const float* ref, size_t n, unsigned* out) {
  float err = 0.f, mag = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float e = fabsf(float(d[i]) - ref[i]);
    if (!isfinite(e)) e = INFINITY;
    err = fmaxf(err, e);
    mag = fmaxf(mag, fabsf(ref[i]));
  }
  for (int o = 16; o > 0; o /= 2) {
    err = fmaxf(err, __shfl_xor_sync(0xffffffffu, err, o));
    mag = fmaxf(mag, __shfl_xor_sync(0xffffffffu, mag, o));
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&out[0], __float_as_uint(err));
    atomicMax(&out[1], __float_as_uint(mag));
  }
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return p;
}

template <typename T>
void fill(T* p, size_t n, uint32_t seed, cudaStream_t stream) {
  fill_uniform<<<1024, 256, 0, stream>>>(p, n, seed);
  check(cudaGetLastError(), "fill_uniform");
}


struct Knobs {
  RasterOrder raster;
  int swizzle;
  bool host_shapes;
};

const char* raster_name(RasterOrder r) {
  return r == RasterOrder::Heuristic ? "Heuristic" : r == RasterOrder::AlongM ? "AlongM" : "AlongN";
}

// A buffer kept across calls, grown (never shrunk) when a call needs more: in
// the library the ring of pinned blocks and the caching allocator keep them, so
// allocation is no per-call cost there either.
struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  bool pinned = false;
  void* reserve(size_t need) {
    if (need > bytes) {
      if (p) check(pinned ? cudaFreeHost(p) : cudaFree(p), "free");
      check(pinned ? cudaMallocHost(&p, need) : cudaMalloc(&p, need), "alloc");
      bytes = need;
    }
    return p;
  }
  ~Buffer() {
    if (p && pinned) cudaFreeHost(p);
    else if (p) cudaFree(p);
  }
};

// The library's per-call work (grouped_gemm_sm90.cu's run): sizes, pointers and
// strides packed into one pinned block, one cudaMemcpyAsync to device scratch,
// then can_implement, the workspace size, initialize; run() launches. The host
// shapes stay here because run() reads them again for the grid.
template <typename Gemm>
class Launcher {
 public:
  cutlass::Status prepare(const std::vector<ExpertGemmGroup>& groups, float beta, const Knobs& knobs, int sm_count,
                          cudaStream_t stream) {
    const int count = int(groups.size());
    const ArgBlock<Gemm> block(count);
    auto* h = static_cast<char*>(host_.reserve(block.bytes));
    auto* base = static_cast<char*>(device_.reserve(block.bytes));
    host_shapes_.resize(groups.size());
    block.fill(h, groups.data(), count, host_shapes_.data());
    check(cudaMemcpyAsync(base, h, block.bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    cutlass::KernelHardwareInfo hw;
    check(cudaGetDevice(&hw.device_id), "cudaGetDevice");
    hw.sm_count = sm_count;
    typename Gemm::Arguments args =
        block.arguments(base, count, knobs.host_shapes ? host_shapes_.data() : nullptr, 1.f, beta, hw);
    args.scheduler.raster_order = knobs.raster;
    args.scheduler.max_swizzle_size = knobs.swizzle;
    const cutlass::Status can = gemm_.can_implement(args);
    if (can != cutlass::Status::kSuccess) return can;
    void* workspace = workspace_.reserve(std::max<size_t>(Gemm::get_workspace_size(args), 1));
    return gemm_.initialize(args, workspace, stream);
  }

  cutlass::Status run(cudaStream_t stream) { return gemm_.run(stream); }

 private:
  Gemm gemm_;
  std::vector<Shape3> host_shapes_;
  Buffer host_{nullptr, 0, true}, device_, workspace_;
};

// Median milliseconds of `reps` calls of f after `warmup` untimed ones, each
// call alone between two events on an idle stream; negative if a call failed.
class Timer {
 public:
  explicit Timer(cudaStream_t stream) : stream_(stream) {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  template <typename F>
  float median_ms(int warmup, int reps, F&& f) {
    std::vector<float> t;
    for (int i = 0; i < warmup + reps; ++i) {
      check(cudaEventRecord(start_, stream_), "cudaEventRecord");
      const bool ok = f();
      check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
      check(cudaEventSynchronize(stop_), "kernel");
      if (!ok) return -1.f;
      float ms = 0.f;
      check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
      if (i >= warmup) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
};

struct Model {
  const char* name;
  int experts, hidden, ffn, rows;
};

enum class Kind { Forward, InputGrad, WeightGrad, WeightGradBf16 };

// One expert GEMM of a model; the size given as 0 is an expert's rows (m for
// Forward and InputGrad, k for WeightGrad).
struct Problem {
  std::string name;
  Kind kind;
  int m, n, k;
};

std::vector<Problem> problems(const Model& md) {
  const int h = md.hidden, i2 = 2 * md.ffn, i = md.ffn;
  return {{"fwd_gate_up", Kind::Forward, 0, i2, h},
          {"fwd_down", Kind::Forward, 0, h, i},
          {"igrad_down", Kind::InputGrad, 0, i, h},
          {"igrad_gate_up", Kind::InputGrad, 0, h, i2},
          {"wgrad_gate_up_f32", Kind::WeightGrad, i2, h, 0},
          {"wgrad_gate_up_bf16", Kind::WeightGradBf16, i2, h, 0},
          {"wgrad_down_f32", Kind::WeightGrad, h, i, 0},
          {"wgrad_down_bf16", Kind::WeightGradBf16, h, i, 0}};
}

struct Distribution {
  const char* name;
  std::vector<int64_t> rows;  // per expert
};

// The total rows drawn over the experts one by one (a multinomial draw) with
// probabilities proportional to 1 / (e + 1)^power, fixed seed.
std::vector<int64_t> draw_rows(const Model& md, double power, unsigned seed) {
  std::vector<double> p(size_t(md.experts));
  for (int e = 0; e < md.experts; ++e) p[size_t(e)] = 1.0 / std::pow(double(e + 1), power);
  std::discrete_distribution<int> pick(p.begin(), p.end());
  std::mt19937 gen(seed);
  std::vector<int64_t> rows(size_t(md.experts), 0);
  for (int r = 0; r < md.rows; ++r) ++rows[size_t(pick(gen))];
  return rows;
}

struct Result {
  Knobs knobs;
  float per_call_ms = -1.f, kernel_ms = -1.f;
};

// Every case of one problem of one model for both distributions, with K's kernel.
template <typename K>
void run_problem(const Model& md, const Problem& pb, const std::vector<Distribution>& dists, int sm_count,
                 cudaStream_t stream, std::vector<std::string>& best_lines) {
  using TD = typename K::ElementD;
  using Gemm = typename K::Gemm;
  const std::string prefix = "cfg=c" + std::to_string(GG_CONFIG) + " " + describe<Cfg>() + " kind=" + pb.name +
                             " model=" + md.name;
  if constexpr (std::is_void_v<Gemm>) {
    for (const Distribution& dist : dists)
      std::printf("%s dist=%s unsupported (%d mainloop stages fit beside the epilogue; CUTLASS needs 2)\n",
                  prefix.c_str(), dist.name, K::kStages);
  } else {
    const bool wgrad = pb.kind == Kind::WeightGrad || pb.kind == Kind::WeightGradBf16;
    const float beta = wgrad ? 1.f : 0.f;
    const float tolerance = std::is_same_v<TD, float> ? 1e-3f : 2e-2f;
    const size_t rows = size_t(md.rows), experts = size_t(md.experts);
    // The packed tensors: Forward x [rows, k], W [experts, n, k], y [rows, n];
    // InputGrad dy [rows, k], W [experts, k, n], dx [rows, n]; WeightGrad
    // dy [rows, m], x [rows, n], dW [experts, m, n] (and its first value).
    const size_t a_elems = rows * size_t(wgrad ? pb.m : pb.k);
    const size_t b_elems = wgrad ? rows * size_t(pb.n) : experts * size_t(pb.n) * size_t(pb.k);
    const size_t d_elems = wgrad ? experts * size_t(pb.m) * size_t(pb.n) : rows * size_t(pb.n);
    auto* a = static_cast<bf16*>(device_alloc(a_elems * sizeof(bf16)));
    auto* b = static_cast<bf16*>(device_alloc(b_elems * sizeof(bf16)));
    auto* d = static_cast<TD*>(device_alloc(d_elems * sizeof(TD)));
    TD* d0 = wgrad ? static_cast<TD*>(device_alloc(d_elems * sizeof(TD))) : nullptr;
    fill(a, a_elems, 1, stream);
    fill(b, b_elems, 2, stream);
    if (d0) fill(d0, d_elems, 3, stream);
    auto* maxes = static_cast<unsigned*>(device_alloc(2 * sizeof(unsigned)));
    Launcher<Gemm> launcher;
    Timer timer(stream);

    for (const Distribution& dist : dists) {
      std::vector<ExpertGemmGroup> groups;
      std::vector<int> experts_of;
      double flops = 0;
      int64_t first = 0;
      for (size_t e = 0; e < experts; ++e) {
        const int64_t r = dist.rows[e];
        if (r > 0) {
          ExpertGemmGroup g{pb.m ? pb.m : int(r), pb.n, pb.k ? pb.k : int(r), nullptr, nullptr, nullptr};
          if (wgrad) {
            g.a = a + first * pb.m;
            g.b = b + first * pb.n;
            g.d = d + e * size_t(pb.m) * pb.n;
          } else {
            g.a = a + first * pb.k;
            g.b = b + e * size_t(pb.n) * pb.k;
            g.d = d + first * pb.n;
          }
          groups.push_back(g);
          experts_of.push_back(int(e));
          flops += 2.0 * g.m * g.n * double(g.k);
        }
        first += r;
      }
      // The reference for the first, the largest and the last group.
      std::vector<size_t> sampled = {0, groups.size() - 1};
      sampled.push_back(size_t(std::max_element(groups.begin(), groups.end(), [](const ExpertGemmGroup& x, const ExpertGemmGroup& y) {
                                 return int64_t(x.m) * x.k < int64_t(y.m) * y.k;
                               }) -
                               groups.begin()));
      std::sort(sampled.begin(), sampled.end());
      sampled.erase(std::unique(sampled.begin(), sampled.end()), sampled.end());
      std::vector<float*> refs;
      for (size_t s : sampled) {
        const ExpertGemmGroup& g = groups[s];
        auto* ref = static_cast<float*>(device_alloc(size_t(g.m) * g.n * sizeof(float)));
        const TD* c = d0 ? d0 + (static_cast<TD*>(g.d) - d) : nullptr;
        const int64_t sam = wgrad ? 1 : g.k, sak = wgrad ? g.m : 1;
        const int64_t sbk = pb.kind == Kind::Forward ? 1 : g.n, sbn = pb.kind == Kind::Forward ? g.k : 1;
        reference_gemm<<<dim3((g.n + 15) / 16, (g.m + 15) / 16), dim3(16, 16), 0, stream>>>(
            static_cast<const bf16*>(g.a), sam, sak, static_cast<const bf16*>(g.b), sbk, sbn, c, beta, ref, g.m, g.n,
            g.k);
        check(cudaGetLastError(), "reference_gemm");
        refs.push_back(ref);
      }
      const std::string where = prefix + " dist=" + dist.name;

      // One case: d reset (to its first value, or to NaN where beta is 0), one
      // checked call, then the timings.
      auto measure = [&](const Knobs& knobs) {
        Result r{knobs};
        const std::string line = where + " raster=" + raster_name(knobs.raster) + " swizzle=" +
                                 std::to_string(knobs.swizzle) + " shapes=" + (knobs.host_shapes ? "host" : "device");
        if (d0) check(cudaMemcpyAsync(d, d0, d_elems * sizeof(TD), cudaMemcpyDeviceToDevice, stream), "reset d");
        else check(cudaMemsetAsync(d, 0xff, d_elems * sizeof(TD), stream), "reset d");
        cutlass::Status st = launcher.prepare(groups, beta, knobs, sm_count, stream);
        if (st == cutlass::Status::kSuccess) st = launcher.run(stream);
        if (st != cutlass::Status::kSuccess) {
          std::printf("%s failed=%s\n", line.c_str(), cutlassGetStatusString(st));
          return r;
        }
        check(cudaMemsetAsync(maxes, 0, 2 * sizeof(unsigned), stream), "cudaMemsetAsync");
        for (size_t s = 0; s < sampled.size(); ++s) {
          const ExpertGemmGroup& g = groups[sampled[s]];
          max_errors<<<264, 256, 0, stream>>>(static_cast<const TD*>(g.d), refs[s], size_t(g.m) * g.n, maxes);
          check(cudaGetLastError(), "max_errors");
        }
        unsigned bits[2];
        check(cudaMemcpyAsync(bits, maxes, sizeof(bits), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
        check(cudaStreamSynchronize(stream), "grouped GEMM");
        float e, mag;
        std::memcpy(&e, &bits[0], sizeof(float));
        std::memcpy(&mag, &bits[1], sizeof(float));
        const float err = e / mag;
        const bool wrong = !(err <= tolerance);
        r.per_call_ms = timer.median_ms(3, 10, [&] {
          return launcher.prepare(groups, beta, knobs, sm_count, stream) == cutlass::Status::kSuccess &&
                 launcher.run(stream) == cutlass::Status::kSuccess;
        });
        r.kernel_ms = timer.median_ms(0, 10, [&] { return launcher.run(stream) == cutlass::Status::kSuccess; });
        std::printf("%s per_call_ms=%.3f per_call_tflops=%.1f kernel_ms=%.3f kernel_tflops=%.1f err=%.1e%s\n",
                    line.c_str(), r.per_call_ms, flops / r.per_call_ms / 1e9, r.kernel_ms,
                    flops / r.kernel_ms / 1e9, err, wrong ? " WRONG" : "");
        if (wrong || r.per_call_ms < 0 || r.kernel_ms < 0) r.per_call_ms = r.kernel_ms = -1.f;
        return r;
      };
      auto better = [](const Result& x, const Result& best) {
        return x.per_call_ms > 0 && (best.per_call_ms < 0 || x.per_call_ms < best.per_call_ms);
      };

      Result best{}, library{};
      for (RasterOrder raster : {RasterOrder::Heuristic, RasterOrder::AlongM, RasterOrder::AlongN})
        for (int swizzle : {1, 2, 4, 8}) {
          const Result r = measure({raster, swizzle, true});
          if (raster == RasterOrder::AlongM && swizzle == 1) library = r;
          if (better(r, best)) best = r;
        }
      if (best.per_call_ms > 0) {
        const Result r = measure({best.knobs.raster, best.knobs.swizzle, false});
        if (better(r, best)) best = r;
      }
      char line[512];
      if (best.per_call_ms > 0)
        std::snprintf(line, sizeof(line),
                      "best %s raster=%s swizzle=%d shapes=%s per_call_ms=%.3f per_call_tflops=%.1f kernel_ms=%.3f "
                      "kernel_tflops=%.1f default_per_call_ms=%.3f default_kernel_ms=%.3f",
                      where.c_str(), raster_name(best.knobs.raster), best.knobs.swizzle,
                      best.knobs.host_shapes ? "host" : "device", best.per_call_ms, flops / best.per_call_ms / 1e9,
                      best.kernel_ms, flops / best.kernel_ms / 1e9, library.per_call_ms, library.kernel_ms);
      else
        std::snprintf(line, sizeof(line), "best %s none", where.c_str());
      best_lines.push_back(line);
      for (float* ref : refs) cudaFree(ref);
    }
    for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(d), static_cast<void*>(d0),
                    static_cast<void*>(maxes)})
      if (p) cudaFree(p);
  }
}

}  // namespace gg

int main() {
  using namespace gg;
  int device = 0, sm_count = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::string name = prop.name;
  std::replace(name.begin(), name.end(), ' ', '_');
  std::printf("cfg=c%d %s device=%s sms=%d stages fwd=%d igrad=%d wgrad_f32=%d wgrad_bf16=%d\n", GG_CONFIG,
              describe<Cfg>().c_str(), name.c_str(), sm_count, ForwardKernel::kStages, InputGradKernel::kStages,
              WeightGradKernel::kStages, WeightGradBf16Kernel::kStages);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  const std::vector<Model> models = {{"qwen3", 128, 2048, 768, 65536}, {"dsv3", 16, 7168, 2048, 32768}};
  std::vector<std::string> best_lines;
  for (const Model& md : models) {
    const std::vector<Distribution> dists = {{"uniform", draw_rows(md, 0.0, 1)}, {"skewed", draw_rows(md, 0.7, 2)}};
    for (const Distribution& dist : dists) {
      const auto [lo, hi] = std::minmax_element(dist.rows.begin(), dist.rows.end());
      std::printf("rows model=%s dist=%s experts=%d empty=%ld min=%ld max=%ld\n", md.name, dist.name, md.experts,
                  long(std::count(dist.rows.begin(), dist.rows.end(), 0)), long(*lo), long(*hi));
    }
    for (const Problem& pb : problems(md)) {
      switch (pb.kind) {
        case Kind::Forward: run_problem<ForwardKernel>(md, pb, dists, sm_count, stream, best_lines); break;
        case Kind::InputGrad: run_problem<InputGradKernel>(md, pb, dists, sm_count, stream, best_lines); break;
        case Kind::WeightGrad: run_problem<WeightGradKernel>(md, pb, dists, sm_count, stream, best_lines); break;
        case Kind::WeightGradBf16:
          run_problem<WeightGradBf16Kernel>(md, pb, dists, sm_count, stream, best_lines);
          break;
      }
      std::fflush(stdout);
    }
  }
  for (const std::string& line : best_lines) std::printf("%s\n", line.c_str());
  return 0;
}
