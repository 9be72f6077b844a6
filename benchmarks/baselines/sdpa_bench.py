"""PyTorch SDPA baseline for our attention kernels (issue 3): causal GQA attention at seq 4096,
head_dim 128, bf16: 16 query / 8 kv heads (Qwen3-0.6B / 1.7B) at batch 1..4, 32 / 4 (Qwen3-30B-A3B)
and 32 / 8 (Qwen3-8B) at batch 2; timed with CUDA events (median of 20 after 5 warm-ups), for SDPA's
cuDNN and flash backends. FLOPs as in tests/cuda/test_backend_ops_perf.cpp: forward
4 * seq^2 * D * Hq / 2 per sequence (causal), backward 2.5x forward.

Run on one GPU:  python3 benchmarks/baselines/sdpa_bench.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, warmup=5, reps=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


SHAPES = [(batch, 16, 8) for batch in range(1, 5)] + [(2, 32, 4), (2, 32, 8)]   # (batch, Hq, Hkv)


def main():
    seq, d = 4096, 128
    for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]:
        for batch, hq, hkv in SHAPES:
            q = torch.randn(batch, hq, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(batch, hkv, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(batch, hkv, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dout = torch.randn(batch, hq, seq, d, device="cuda", dtype=torch.bfloat16)
            fwd_flops = batch * 4.0 * seq * seq * d * hq / 2.0
            with sdpa_kernel(backend):
                fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                out = fwd()
                t_fwd = median_ms(fwd)
                t_bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
            print(f"sdpa[{name}] seq={seq} x {batch} Hq={hq} Hkv={hkv} D={d} causal: forward {t_fwd:.3f} ms "
                  f"{fwd_flops / t_fwd / 1e9:.1f} TFLOP/s, backward {t_bwd:.3f} ms {2.5 * fwd_flops / t_bwd / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
