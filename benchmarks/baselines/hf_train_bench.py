"""PyTorch + Hugging Face transformers training-throughput baseline for the Qwen3-0.6B and Qwen3-1.7B architectures.

Random init from config values written below (copied from the Hub's Qwen/Qwen3-0.6B and Qwen/Qwen3-1.7B
config.json; nothing is downloaded), bf16 weights, pure-bf16 torch.optim.AdamW (fused, states in bf16), SDPA
attention, HF's own causal-LM loss (labels=input_ids). Each run: --warmup untimed steps (torch.compile compiles in
them), then --steps timed steps, each bracketed by torch.cuda.synchronize. Prints one JSON line per run:
  {model, mode, seq_len, tokens_per_step, step_ms, tokens_per_s, mfu, peak_mem_gib, ...}

Model FLOPs per step (the usual "6N + attention" count, no recomputation counted):
  6 * N * T + 6 * L * T * S * d_attn
  N = all parameters, embeddings counted once (tied lm_head not again); T = tokens per step; L = layers;
  S = seq_len; d_attn = num_attention_heads * head_dim. The attention term: QK^T and PV cost 2 * 2 * S * d_attn
  FLOPs per token per layer forward, x3 for forward + backward = 12 * S * d_attn, halved for the causal mask.
  MFU = FLOPs per step / step time / 989e12 (H100/H200 SXM dense bf16 peak).

Run on one GPU:
  python benchmarks/baselines/hf_train_bench.py --models qwen3-0.6b qwen3-1.7b --modes eager compile \
      --micro-batch 2 --grad-accum 4 --steps 10 --warmup 3
"""

import argparse
import gc
import json
import statistics
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

H100_BF16_PEAK_FLOPS = 989e12

# Values of the Hub's config.json (transformers 4.51 spelling: rope_theta top level, rope_scaling null).
QWEN3_COMMON = dict(vocab_size=151936, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                    head_dim=128, hidden_act="silu", max_position_embeddings=40960, rms_norm_eps=1e-6,
                    attention_bias=False, attention_dropout=0.0, tie_word_embeddings=True,
                    initializer_range=0.02, bos_token_id=151643, eos_token_id=151645,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, use_cache=False)
MODELS = {
    "qwen3-0.6b": dict(QWEN3_COMMON, hidden_size=1024, intermediate_size=3072),
    "qwen3-1.7b": dict(QWEN3_COMMON, hidden_size=2048, intermediate_size=6144),
}


def build_model(name, activation_checkpointing):
    config = Qwen3Config(**MODELS[name])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    if activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, config


def parameter_count(model):
    # named_parameters() yields a tied lm_head/embedding once.
    return sum(p.numel() for p in model.parameters())


def model_flops_per_step(config, n_params, tokens_per_step, seq_len):
    d_attn = config.num_attention_heads * config.head_dim
    return 6 * n_params * tokens_per_step + 6 * config.num_hidden_layers * tokens_per_step * seq_len * d_attn


def run_one(name, mode, args):
    model, config = build_model(name, args.activation_checkpointing)
    n_params = parameter_count(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                  fused=args.optimizer == "fused", foreach=args.optimizer == "foreach")
    forward = torch.compile(model) if mode == "compile" else model

    generator = torch.Generator(device="cuda").manual_seed(1234)
    batches = [torch.randint(0, config.vocab_size, (args.micro_batch, args.seq_len), device="cuda",
                             generator=generator) for _ in range(args.grad_accum)]
    tokens_per_step = args.micro_batch * args.grad_accum * args.seq_len

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device="cuda", dtype=torch.float32)
        for input_ids in batches:
            loss = forward(input_ids=input_ids, labels=input_ids).loss / args.grad_accum
            loss.backward()
            total += loss.detach().float()
        optimizer.step()
        return total

    torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        train_step()
    torch.cuda.synchronize()
    step_ms = []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = train_step()
        torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - start) * 1e3)
    mean_ms = statistics.mean(step_ms)
    flops = model_flops_per_step(config, n_params, tokens_per_step, args.seq_len)
    result = {
        "model": name, "mode": mode, "seq_len": args.seq_len, "tokens_per_step": tokens_per_step,
        "step_ms": round(mean_ms, 2), "tokens_per_s": round(tokens_per_step / mean_ms * 1e3, 1),
        "mfu": round(flops / (mean_ms * 1e-3) / H100_BF16_PEAK_FLOPS, 4),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "n_params": n_params,
        "step_ms_min": round(min(step_ms), 2), "step_ms_max": round(max(step_ms), 2),
        "final_loss": round(loss.item(), 4), "optimizer": args.optimizer,
        "activation_checkpointing": args.activation_checkpointing,
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
    }
    del forward, model, optimizer, batches
    gc.collect()
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--modes", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=2, help="sequences per forward/backward")
    parser.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--optimizer", choices=["fused", "foreach"], default="fused")
    parser.add_argument("--activation-checkpointing", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("hf_train_bench: needs a CUDA GPU")
    for name in args.models:
        for mode in args.modes:
            print(json.dumps(run_one(name, mode, args)), flush=True)


if __name__ == "__main__":
    main()
