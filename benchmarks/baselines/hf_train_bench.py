"""PyTorch + Hugging Face transformers training-throughput baseline for the Qwen3, Qwen3-MoE and DeepSeek-V3
architectures.

Models: Qwen3-0.6B, Qwen3-1.7B, Qwen3-8B (12 of its 36 layers by default) and Qwen3-30B-A3B (Qwen3MoeForCausalLM,
4 of its 48 layers by default, experts on transformers 5's "grouped_mm" experts implementation, i.e.
torch.nn.functional.grouped_mm over the fused [E, 2I, H] / [E, H, I] expert weights). --layers L keeps the first L
layers. DeepSeek-V3 (deepseek-v3-16e) keeps its real widths (hidden 7168, 128 MLA heads, q/kv lora ranks 1536 / 512,
moe_intermediate 2048, top-8 of 8 groups, top-4 groups) with 16 routed experts instead of 256 and its first layer
dense instead of three, so that 4 layers (1 dense, 3 MoE: 5.24B parameters) train on one GPU with fp32 master
weights and moments; no MTP layer (HF's forward has none). Random init from config values written below (copied from the Hub's config.json of each; nothing is
downloaded), bf16 weights, pure-bf16 torch.optim.AdamW (fused, states in bf16), SDPA attention, HF's own
causal-LM loss (labels=input_ids; for the MoE model without the router's auxiliary loss, output_router_logits
being false as on the Hub). Each run: --warmup untimed steps (torch.compile compiles in them), then --steps
timed steps, each bracketed by torch.cuda.synchronize. Prints one JSON line per run:
  {model, mode, seq_len, tokens_per_step, step_ms, tokens_per_s, mfu, peak_mem_gib, ...}

Model FLOPs per step (the usual "6N + attention" count, no recomputation counted):
  6 * N_active * T + 6 * L * T * S * d_attn
  N_active = parameters without the embedding lookup (a tied lm_head/embedding counts once), the routed experts
  of an MoE layer at num_experts_per_tok / num_experts of their count (the router counts whole); T = tokens per
  step; L = layers; S = seq_len; d_attn = num_attention_heads * head_dim (for MLA, num_attention_heads times the
  mean of the q/k and v head dims). The attention term: QK^T and PV cost
  2 * 2 * S * d_attn FLOPs per token per layer forward, x3 for forward + backward = 12 * S * d_attn, halved for
  the causal mask. MFU = FLOPs per step / step time / 989e12 (H100/H200 SXM dense bf16 peak).

Run on one GPU:
  python benchmarks/baselines/hf_train_bench.py --models qwen3-0.6b qwen3-1.7b --modes eager compile \
      --micro-batch 2 --grad-accum 4 --steps 10 --warmup 3
  python benchmarks/baselines/hf_train_bench.py --models qwen3-30b-a3b --layers 4 --modes eager
"""

import argparse
import gc
import json
import statistics
import time

import torch
import transformers
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

H100_BF16_PEAK_FLOPS = 989e12

# Values of the Hub's config.json (transformers 4.51 spelling: rope_theta top level, rope_scaling null).
QWEN3_COMMON = dict(vocab_size=151936, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                    head_dim=128, hidden_act="silu", max_position_embeddings=40960, rms_norm_eps=1e-6,
                    attention_bias=False, attention_dropout=0.0, tie_word_embeddings=True,
                    initializer_range=0.02, bos_token_id=151643, eos_token_id=151645,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, use_cache=False)
# Qwen/Qwen3-30B-A3B's config.json (every layer MoE: decoder_sparse_step 1, no mlp_only_layers).
QWEN3_MOE_30B_A3B = dict(QWEN3_COMMON, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                         num_attention_heads=32, num_key_value_heads=4, tie_word_embeddings=False, num_experts=128,
                         num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                         decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False,
                         router_aux_loss_coef=0.001)
# deepseek-ai/DeepSeek-V3's config.json in transformers 5 spelling, with 16 routed experts and one dense layer
# (configs/deepseek-v3 is the unchanged one; bb-bench takes the same two changes as model overrides).
DEEPSEEK_V3_16E = dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                       num_hidden_layers=61, first_k_dense_replace=1, num_attention_heads=128,
                       num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                       qk_rope_head_dim=64, v_head_dim=128, rope_interleave=True, n_routed_experts=16,
                       n_shared_experts=1, num_experts_per_tok=8, n_group=8, topk_group=4,
                       routed_scaling_factor=2.5, norm_topk_prob=True, num_nextn_predict_layers=0,
                       hidden_act="silu", max_position_embeddings=163840, rms_norm_eps=1e-6,
                       attention_bias=False, attention_dropout=0.0, tie_word_embeddings=False,
                       initializer_range=0.02, bos_token_id=0, eos_token_id=1, use_cache=False,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                        "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
# name -> (config class, model class, config values, layers kept by default; 0: all)
MODELS = {
    "qwen3-0.6b": (Qwen3Config, Qwen3ForCausalLM, dict(QWEN3_COMMON, hidden_size=1024, intermediate_size=3072), 0),
    "qwen3-1.7b": (Qwen3Config, Qwen3ForCausalLM, dict(QWEN3_COMMON, hidden_size=2048, intermediate_size=6144), 0),
    "qwen3-8b": (Qwen3Config, Qwen3ForCausalLM,
                 dict(QWEN3_COMMON, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False), 12),
    "qwen3-30b-a3b": (Qwen3MoeConfig, Qwen3MoeForCausalLM, QWEN3_MOE_30B_A3B, 4),
    "deepseek-v3-16e": (DeepseekV3Config, DeepseekV3ForCausalLM, DEEPSEEK_V3_16E, 4),
}


def layers_kept(name, layers):
    """The number of layers a run keeps: --layers, else the model's default (0: all of them)."""
    default = MODELS[name][3] or MODELS[name][2]["num_hidden_layers"]
    return layers or default


def build_model(name, layers, activation_checkpointing):
    config_class, model_class, values, _ = MODELS[name]
    config = config_class(**dict(values, num_hidden_layers=layers))
    moe = model_class in (Qwen3MoeForCausalLM, DeepseekV3ForCausalLM)
    extra = {"experts_implementation": "grouped_mm"} if moe else {}
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = model_class._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa", **extra)
    if activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, model.config


def parameter_counts(model, config):
    """(all parameters, N_active of the FLOP count); parameters() yields a tied lm_head/embedding once."""
    total = sum(p.numel() for p in model.parameters())
    active = total if config.tie_word_embeddings else total - model.get_input_embeddings().weight.numel()
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    if experts:
        num_experts = getattr(config, "n_routed_experts", None) or config.num_experts
        active -= experts - experts * config.num_experts_per_tok // num_experts
    return total, active


def model_flops_per_step(config, n_active, tokens_per_step, seq_len):
    if hasattr(config, "v_head_dim"):   # MLA: scores over qk_nope + qk_rope, values over v_head_dim
        d_attn = config.num_attention_heads * (config.qk_nope_head_dim + config.qk_rope_head_dim + config.v_head_dim) / 2
    else:
        d_attn = config.num_attention_heads * config.head_dim
    return 6 * n_active * tokens_per_step + 6 * config.num_hidden_layers * tokens_per_step * seq_len * d_attn


def run_one(name, mode, args):
    layers = layers_kept(name, args.layers)
    model, config = build_model(name, layers, args.activation_checkpointing)
    n_params, n_active = parameter_counts(model, config)
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
    flops = model_flops_per_step(config, n_active, tokens_per_step, args.seq_len)
    truncated = layers != MODELS[name][2]["num_hidden_layers"]
    result = {
        "model": name + (f"-{layers}l" if truncated else ""), "mode": mode, "seq_len": args.seq_len,
        "tokens_per_step": tokens_per_step,
        "step_ms": round(mean_ms, 2), "tokens_per_s": round(tokens_per_step / mean_ms * 1e3, 1),
        "mfu": round(flops / (mean_ms * 1e-3) / H100_BF16_PEAK_FLOPS, 4),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "n_params": n_params,
        "n_active_params": n_active, "layers": layers,
        "experts_implementation": getattr(config, "_experts_implementation", None),
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
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b", "qwen3-1.7b"], choices=list(MODELS))
    parser.add_argument("--modes", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    parser.add_argument("--layers", type=int, default=0,
                        help="keep the first L layers (0: the model's default, 12 for qwen3-8b, 4 for qwen3-30b-a3b, "
                             "else all)")
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
