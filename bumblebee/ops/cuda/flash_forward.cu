// Flash attention forward (FlashAttention-2 scheme) on mma.sync tensor cores:
// grouped-query, variable-length packed sequences, causal (diagonal
// bottom-right) or unmasked, with separate query and key/value sequence
// ranges (the partial attention of ring attention).
//
// One block of 4 warps computes 64 query rows of one head of one sequence;
// each warp owns 16 rows. Key/value tiles of 64 rows stream through shared
// memory, double-buffered with cp.async so the next tile loads while this one
// is multiplied. Per tile: S = Q K^T on the tensor cores, causal and length
// masking, the online softmax (running max and sum per row, rescaling the
// output accumulator), then O += P V with P taken straight from the S
// accumulators. The block reads kv head h / (Hq / Hkv), so grouped-query
// attention never materialises repeated K/V.
//
// The kernel is templated on the tile head dims (DQK for Q and K, DV for V
// and O): (64, 64), (128, 128) and (192, 128), the last for multi-head latent
// attention (DeepSeek-V3: q/k 192 = nope 128 + rope 64, v 128). The real head
// dims are padded to the tile's in shared memory (zero-filled), so any
// multiple of 8 up to 192 (q/k) and 128 (v) works; lse is written in natural
// log units.
//
// On Hopper (compute capability 9.0) in builds with CUTLASS, the head dims
// (64, 64), (128, 128) and (192, 128) go to the FlashAttention-3-style kernel of
// cutlass/flash_forward_sm90.h instead (TMA, wgmma, warp-specialized), unless
// the environment variable BB_FLASH_SM90=0 (read at every call) keeps them
// here; BB_FLASH_SM90=1, like unset, takes it where it applies. The same
// switch (sm90_kernels_selected, defined here) steers the backward
// (flash_backward.cu).
#include <cstdlib>
#include <cstring>

#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/flash_common.cuh"
#ifdef BB_WITH_CUTLASS
#include "bumblebee/ops/cuda/cutlass/flash_forward_sm90.h"
#endif

namespace bb::cuda {
namespace flash {
namespace {

constexpr int kBlockM = 64;  // query rows per block
constexpr int kBlockN = 64;  // key rows per tile

template <int DQK, int DV>
constexpr size_t forward_smem_bytes() {
  return (size_t(kBlockM + 2 * kBlockN) * smem_stride<DQK>()     // Q, 2 x K
          + size_t(2 * kBlockN) * smem_stride<DV>())             // 2 x V
         * sizeof(bf16);
}

template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const Params p) {
  constexpr int SQK = smem_stride<DQK>();   // row stride of the Q and K tiles
  constexpr int SV = smem_stride<DV>();     // row stride of the V tiles
  constexpr int kDBlocks = DV / 8;    // 8-column blocks of the output
  constexpr int kDSteps = DQK / 16;   // 16-deep k-steps of Q K^T
  constexpr int kNBlocks = kBlockN / 8;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + kBlockM * SQK;       // two buffers of kBlockN * SQK
  bf16* sV = sK + 2 * kBlockN * SQK;   // two buffers of kBlockN * SV

  // Heavier blocks (later query rows see more keys) are scheduled first.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y, seq = blockIdx.z;
  const int q_start = p.cu_seqlens_q[seq], len_q = p.cu_seqlens_q[seq + 1] - q_start;
  const int kv_start = p.cu_seqlens_kv[seq], len_kv = p.cu_seqlens_kv[seq + 1] - kv_start;
  const int m0 = m_block * kBlockM;
  if (m0 >= len_q) return;
  const int shift = len_kv - len_q;  // causal: query row i sees keys j <= i + shift

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kv_head = head / (p.heads_q / p.heads_kv);
  const int64_t q_stride = int64_t(p.heads_q) * p.head_dim_qk;
  const int64_t k_stride = int64_t(p.heads_kv) * p.head_dim_qk;
  const int64_t v_stride = int64_t(p.heads_kv) * p.head_dim_v;
  const int64_t o_stride = int64_t(p.heads_q) * p.head_dim_v;
  const bf16* q = p.q + int64_t(q_start) * q_stride + int64_t(head) * p.head_dim_qk;
  const bf16* k = p.k + int64_t(kv_start) * k_stride + int64_t(kv_head) * p.head_dim_qk;
  const bf16* v = p.v + int64_t(kv_start) * v_stride + int64_t(kv_head) * p.head_dim_v;

  // Causal: keys up to the diagonal of the block's last query row (none when
  // even that row precedes the first key).
  const int kv_end = p.causal ? max(0, min(len_kv, min(len_q, m0 + kBlockM) + shift)) : len_kv;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;

  load_tile<kBlockM, DQK>(sQ, q, q_stride, m0, len_q, p.head_dim_qk);
  load_tile<kBlockN, DQK>(sK, k, k_stride, 0, len_kv, p.head_dim_qk);
  load_tile<kBlockN, DV>(sV, v, v_stride, 0, len_kv, p.head_dim_v);
  cp_async_commit();

  uint32_t qf[kDSteps][4];
  float o[kDBlocks][4];
#pragma unroll
  for (int i = 0; i < kDBlocks; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of scaled scores, log2 units
  float row_sum[2] = {0.f, 0.f};              // this thread's share of the running sum
  const int qrow[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1;
    if (tile + 1 < n_tiles) {
      load_tile<kBlockN, DQK>(sK + (buf ^ 1) * kBlockN * SQK, k, k_stride, (tile + 1) * kBlockN, len_kv,
                              p.head_dim_qk);
      load_tile<kBlockN, DV>(sV + (buf ^ 1) * kBlockN * SV, v, v_stride, (tile + 1) * kBlockN, len_kv,
                             p.head_dim_v);
    }
    cp_async_commit();
    cp_async_wait<1>();  // everything but the tile just requested has landed
    __syncthreads();

    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks) {
        const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = ks * 16 + (lane >> 4) * 8;
        ldmatrix_x4(qf[ks], sQ + r * SQK + c);
      }
    }

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
    const bf16* kt = sK + buf * kBlockN * SQK;
    float s[kNBlocks][4];
#pragma unroll
    for (int i = 0; i < kNBlocks; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int nb2 = 0; nb2 < kNBlocks / 2; ++nb2) {
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks) {
        uint32_t b[4];
        const int r = nb2 * 16 + (lane & 7) + (lane >> 4) * 8;
        const int c = ks * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(b, kt + r * SQK + c);
        mma_16816(s[2 * nb2], qf[ks], b[0], b[1]);
        mma_16816(s[2 * nb2 + 1], qf[ks], b[2], b[3]);
      }
    }

    // Mask keys past the query's diagonal (causal) and past the sequence.
    const int n0 = tile * kBlockN;
    if ((p.causal && n0 + kBlockN - 1 > m0 + shift) || n0 + kBlockN > len_kv) {
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nb * 8 + 2 * t + (e & 1);
          const int row = qrow[e >> 1];
          if ((p.causal && key > row + shift) || key >= len_kv) s[nb][e] = -INFINITY;
        }
      }
    }

    // Online softmax: new running max, rescale what was accumulated, P = exp2.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[r], mx * p.scale_log2);
      // A row with every key so far masked keeps max -inf; subtracting 0
      // instead keeps exp2 at exactly 0 rather than NaN.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float correction = exp2f(row_max[r] - m_use);
      row_max[r] = m_new;
      row_sum[r] *= correction;
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {
        o[db][2 * r] *= correction;
        o[db][2 * r + 1] *= correction;
      }
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb) {
        s[nb][2 * r] = exp2f(fmaf(s[nb][2 * r], p.scale_log2, -m_use));
        s[nb][2 * r + 1] = exp2f(fmaf(s[nb][2 * r + 1], p.scale_log2, -m_use));
        row_sum[r] += s[nb][2 * r] + s[nb][2 * r + 1];
      }
    }

    // O += P V, P from the S accumulators, V through ldmatrix.trans.
    uint32_t pa[kBlockN / 16][4];
    c_to_a<kBlockN / 16>(s, pa);
    const bf16* vt = sV + buf * kBlockN * SV;
#pragma unroll
    for (int db2 = 0; db2 < kDBlocks / 2; ++db2) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t b[4];
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = db2 * 16 + (lane >> 4) * 8;
        ldmatrix_x4_trans(b, vt + r * SV + c);
        mma_16816(o[2 * db2], pa[kk], b[0], b[1]);
        mma_16816(o[2 * db2 + 1], pa[kk], b[2], b[3]);
      }
    }
    __syncthreads();  // this buffer is refilled two tiles from now
  }
  cp_async_wait<0>();  // a block with no key tile still has its first loads in flight

  // Normalise, write O and lse for rows inside the sequence.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = qrow[r];
    if (row < len_q) {
      bf16* out = p.out + (int64_t(q_start) + row) * o_stride + int64_t(head) * p.head_dim_v;
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {
        const int col = db * 8 + 2 * t;
        if (col < p.head_dim_v)
          *reinterpret_cast<uint32_t*>(out + col) = pack_bf16(o[db][2 * r] * inv, o[db][2 * r + 1] * inv);
      }
      if (t == 0) {
        p.lse[(int64_t(q_start) + row) * p.heads_q + head] =
            sum > 0.f ? row_max[r] * kLn2 + logf(sum) : -INFINITY;
      }
    }
  }
}

template <int DQK, int DV>
void launch_forward(const Params& p, int max_seqlen, int num_seqs, cudaStream_t stream) {
  const size_t smem = forward_smem_bytes<DQK, DV>();
  CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<DQK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(smem)));
  dim3 grid(unsigned((max_seqlen + kBlockM - 1) / kBlockM), unsigned(p.heads_q), unsigned(num_seqs));
  flash_forward_kernel<DQK, DV><<<grid, kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH("flash_attention_forward");
}

}  // namespace

#ifdef BB_WITH_CUTLASS
bool sm90_kernels_selected() {
  const char* env = std::getenv("BB_FLASH_SM90");
  const bool unset = env == nullptr || *env == '\0';
  BB_CHECK(unset || std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, "BB_FLASH_SM90 is '", env,
           "'; it must be 0 or 1");
  if (!unset && env[0] == '0') return false;
  int major = 0, minor = 0;
  const int device = current_device();
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}
#endif

}  // namespace flash

bool flash_forward_on_sm90([[maybe_unused]] int64_t head_dim_qk, [[maybe_unused]] int64_t head_dim_v) {
#ifdef BB_WITH_CUTLASS
  return flash_sm90_forward_takes(head_dim_qk, head_dim_v) && flash::sm90_kernels_selected();
#else
  return false;
#endif
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                             double scale, Tensor& out, Tensor& lse) {
#ifdef BB_WITH_CUTLASS
  // TMA descriptors need every dimension non-empty.
  if (q.size(0) > 0 && k.size(0) > 0 && flash_forward_on_sm90(q.size(2), v.size(2))) {
    flash_sm90_forward(q, k, v, spans, scale, out, lse);
    return;
  }
#endif
  flash::Params p{};
  p.q = static_cast<const bf16*>(q.raw());
  p.k = static_cast<const bf16*>(k.raw());
  p.v = static_cast<const bf16*>(v.raw());
  p.cu_seqlens_q = static_cast<const int*>(spans.cu_seqlens_q.raw());
  p.cu_seqlens_kv = static_cast<const int*>(spans.cu_seqlens_kv.raw());
  p.causal = spans.mask == ops::AttentionMask::Causal;
  p.heads_q = int(q.size(1));
  p.heads_kv = int(k.size(1));
  p.head_dim_qk = int(q.size(2));
  p.head_dim_v = int(v.size(2));
  p.scale = float(scale);
  p.scale_log2 = float(scale) * flash::kLog2e;
  p.out = static_cast<bf16*>(out.raw());
  p.lse = static_cast<float*>(lse.raw());
  const int num_seqs = int(spans.cu_seqlens_q.numel() - 1);
  const int max_seqlen_q = int(spans.max_seqlen_q);
  cudaStream_t stream = current_stream();
  BB_CHECK(p.head_dim_qk <= kFlashMaxHeadDimQk && p.head_dim_v <= kFlashMaxHeadDimV,
           "flash_attention_forward: head dims q/k ", p.head_dim_qk, " and v ", p.head_dim_v, " exceed its tiles (",
           kFlashMaxHeadDimQk, ", ", kFlashMaxHeadDimV, ")");
  flash::dispatch_head_dims(p.head_dim_qk, p.head_dim_v, [&](auto dqk, auto dv) {
    flash::launch_forward<decltype(dqk)::value, decltype(dv)::value>(p, max_seqlen_q, num_seqs, stream);
  });
}

}  // namespace bb::cuda
