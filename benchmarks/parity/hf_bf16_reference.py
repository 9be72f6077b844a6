"""HF transformers side of the bf16 parity checks (issues 3, 12, 17): a ~100M-parameter Qwen3, Qwen3-MoE or
DeepSeek-V3-shaped model trained 50 AdamW steps on GPU.

Models (--model):
  dense  (default) Qwen3, 100,094,208 parameters: hidden 768, 12 layers, 12 / 4 heads, head_dim 64, ffn 2048,
         vocab 32000, tied embeddings.
  moe    Qwen3-MoE, 103,640,832 parameters (70.9M in its layers, 23.7M of them active a token): hidden 512,
         10 layers, 8 / 4 heads, head_dim 64, every layer MoE with 16 experts, top-4, norm_topk_prob true,
         moe_intermediate 256, vocab 32000, untied embeddings (as Qwen3-30B-A3B), no router auxiliary loss
         (output_router_logits false, the Hub's value), experts run by transformers' "eager" experts
         implementation (--experts-implementation picks another).
  dsv3   DeepSeek-V3 shape, 87,755,776 parameters: hidden 512, 8 layers (the first dense, ffn 1536), 8 heads of
         multi-head latent attention (q_lora_rank 192, kv_lora_rank 128, qk nope / rope 64 / 32, v 64, interleaved
         rope), 7 MoE layers of 16 routed experts (moe_intermediate 256) in 4 groups, top-2 groups, top-4 experts,
         sigmoid scores with the correction bias, routed_scaling_factor 2.5, one shared expert, vocab 32000,
         untied embeddings, no MTP layer (HF's forward has none).
Makes, under --out DIR:
  DIR/model/         the seeded random-init checkpoint (HF's own init), saved by save_pretrained in bf16
  DIR/tokens.json    NUM_BATCHES x BATCH = 80 sequences of SEQ_LEN = 512 token ids (JSON list of lists)
  DIR/hf_losses.json {losses, grad_norms, ...}: per step, the loss before the update and the global grad norm
                     before clipping (what torch.nn.utils.clip_grad_norm_ returns)
Data: step s trains on rows [8 * (s % 10), 8 * (s % 10) + 8) of tokens.json as one micro-batch (8 x 512 = 4096
tokens; loss = HF's mean next-token cross entropy with labels=input_ids over all 8 x 511 positions). The tokens
come from a seeded order-1 Markov chain on ids 0..511 (each id has 4 successors, taken with probability 0.55,
0.25, 0.12, 0.08), so the loss falls steadily (about 10.5 to 4.5 in 50 steps) by learning, not by memorising one
batch. Measured on an H200: with one repeated batch of uniform random tokens the model memorises it (loss 10.5
to 0.26) and two HF runs that differ only in the SDPA kernel, or simply repeat (non-deterministic backward),
already disagree by up to 4.6 % in loss and 36 % in grad norm; on this data (master precision) a repeat and the
flash, cuDNN and math kernels all stay within 0.03 % of the loss and 0.9 % of the grad norm at every step.
Optimizer: torch.optim.AdamW lr 1e-4 (constant), betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on every
parameter, global grad-norm clipping at 1.0.
Precision (--precision):
  master  (default) fp32 master weights initialised from the saved bf16 values, forward/backward under
          torch.autocast(bfloat16), fp32 grads and AdamW: the usual HF bf16 training (Trainer's bf16=True),
          and the counterpart of a bf16 model with fp32 master weights and optimizer.
  bf16act bf16 weights and activations in forward and backward (no autocast), grads copied to an fp32 master
          copy that clipping and AdamW work on, the result rounded back into the bf16 weights: a bf16 model with
          fp32 master weights whose residual stream is bf16, as bb's is unless fp32_residual_connection is set
          (autocast keeps HF's residual stream in fp32: the embedding output and every residual add are fp32).
  pure    bf16 weights, bf16 grads, bf16 AdamW states; no fp32 copy anywhere. Updates of lr * O(1) fall below
          half a bf16 ulp of many weights and are lost, so this run departs from master by up to 10 % in loss
          and 80 % in grad norm within 50 steps: compare a master-weight trainer with master, not with pure.
Both start from exactly the saved bf16 weights. --sdpa-backend pins SDPA's kernel, to measure how far HF drifts
from itself when only the attention kernel changes.

Run on one GPU:  python benchmarks/parity/hf_bf16_reference.py --out /tmp/parity [--precision master|bf16act|pure]
                 python benchmarks/parity/hf_bf16_reference.py --model moe --out /tmp/parity_moe
                 python benchmarks/parity/hf_bf16_reference.py --model dsv3 --out /tmp/parity_dsv3
"""

import argparse
import contextlib
import json
import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import transformers
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

# 12 layers x 6.29M + 24.6M tied embedding = 100.1M parameters.
DENSE_CONFIG = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                    num_attention_heads=12, num_key_value_heads=4, head_dim=64, hidden_act="silu",
                    max_position_embeddings=4096, rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
                    tie_word_embeddings=True, initializer_range=0.02, use_cache=False,
                    bos_token_id=None, eos_token_id=None, pad_token_id=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
# 10 layers x 7.09M (attention 0.79M, router 8K, experts 16 x 0.39M) + 2 x 16.4M untied embeddings = 103.6M.
MOE_CONFIG = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=10,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64, hidden_act="silu",
                  max_position_embeddings=4096, rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
                  tie_word_embeddings=False, initializer_range=0.02, use_cache=False,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                  num_experts=16, num_experts_per_tok=4, moe_intermediate_size=256, norm_topk_prob=True,
                  decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False, router_aux_loss_coef=0.001)
# Layer 0 dense (3.1M: ffn 2.36M, MLA 0.72M), layers 1-7 MoE at 7.4M each (16 x 0.39M routed, 0.39M shared,
# 0.72M MLA), 2 x 16.4M untied embeddings: 87.8M.
DSV3_CONFIG = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, moe_intermediate_size=256,
                   num_hidden_layers=8, first_k_dense_replace=1, num_attention_heads=8, num_key_value_heads=8,
                   q_lora_rank=192, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
                   rope_interleave=True, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4, n_group=4,
                   topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True, num_nextn_predict_layers=0,
                   hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6, attention_bias=False,
                   attention_dropout=0.0, tie_word_embeddings=False, initializer_range=0.02, use_cache=False,
                   bos_token_id=None, eos_token_id=None, pad_token_id=None,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
MODELS = {"dense": (Qwen3Config, Qwen3ForCausalLM, DENSE_CONFIG),
          "moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM, MOE_CONFIG),
          "dsv3": (DeepseekV3Config, DeepseekV3ForCausalLM, DSV3_CONFIG)}
BATCH = 8
SEQ_LEN = 512
NUM_BATCHES = 10
STEPS = 50
MARKOV_VOCAB = 512
MARKOV_SUCCESSOR_PROBS = [0.55, 0.25, 0.12, 0.08]
ADAMW = {"lr": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 1.0}
SEED = 2024
SDPA_BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def sdpa_backend(name):
    return contextlib.nullcontext() if SDPA_BACKENDS[name] is None else sdpa_kernel(SDPA_BACKENDS[name])


def make_checkpoint(model_dir, kind):
    """HF's own init (normal(0, 0.02) matrices, unit norm weights) under a fixed seed, rounded to bf16 and saved."""
    config_class, model_class, values = MODELS[kind]
    torch.manual_seed(SEED)
    model = model_class(config_class(**values)).to(torch.bfloat16)
    model.save_pretrained(model_dir)
    return sum(p.numel() for p in model.parameters())


def make_tokens(path):
    generator = torch.Generator().manual_seed(SEED + 1)
    successors = torch.randint(0, MARKOV_VOCAB, (MARKOV_VOCAB, len(MARKOV_SUCCESSOR_PROBS)), generator=generator)
    probs = torch.tensor(MARKOV_SUCCESSOR_PROBS)
    rows = NUM_BATCHES * BATCH
    tokens = torch.empty(rows, SEQ_LEN, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, MARKOV_VOCAB, (rows,), generator=generator)
    for t in range(1, SEQ_LEN):
        pick = torch.multinomial(probs, rows, replacement=True, generator=generator)
        tokens[:, t] = successors[tokens[:, t - 1], pick]
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join("  " + json.dumps(row) for row in tokens.tolist()) + "\n]\n")
    return tokens.view(NUM_BATCHES, BATCH, SEQ_LEN)


def train(model_dir, kind, batches, precision, experts_implementation):
    dtype = torch.float32 if precision == "master" else torch.bfloat16
    _, model_class, _ = MODELS[kind]
    extra = {"experts_implementation": experts_implementation} if kind in ("moe", "dsv3") else {}
    model = model_class.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa", **extra).cuda()
    model.train()
    params = list(model.parameters())
    # bf16act steps an fp32 copy of the bf16 weights; the other modes step the weights themselves.
    master = [p.detach().float().requires_grad_() for p in params] if precision == "bf16act" else params
    optimizer = torch.optim.AdamW(master, lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                                  eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"], fused=True)
    losses, grad_norms = [], []
    for step in range(STEPS):
        input_ids = batches[step % NUM_BATCHES].cuda()
        optimizer.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "master"):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        if precision == "bf16act":
            for m, p in zip(master, params):
                m.grad = p.grad.float()
        grad_norm = torch.nn.utils.clip_grad_norm_(master, ADAMW["clip_grad"])
        optimizer.step()
        if precision == "bf16act":
            with torch.no_grad():
                for m, p in zip(master, params):
                    p.copy_(m)
        losses.append(loss.item())
        grad_norms.append(grad_norm.item())
    return losses, grad_norms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--model", choices=list(MODELS), default="dense")
    parser.add_argument("--experts-implementation", choices=["eager", "grouped_mm", "batched_mm"], default="eager",
                        help="transformers' experts backend (--model moe, dsv3)")
    parser.add_argument("--precision", choices=["master", "bf16act", "pure"], default="master")
    parser.add_argument("--sdpa-backend", choices=list(SDPA_BACKENDS), default="default")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("hf_bf16_reference: needs a CUDA GPU")
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)
    model_dir = os.path.join(args.out, "model")
    n_params = make_checkpoint(model_dir, args.model)
    tokens = make_tokens(os.path.join(args.out, "tokens.json"))
    with sdpa_backend(args.sdpa_backend):
        losses, grad_norms = train(model_dir, args.model, tokens, args.precision, args.experts_implementation)
    result = {"losses": losses, "grad_norms": grad_norms, "model": args.model, "precision": args.precision,
              "sdpa_backend": args.sdpa_backend, "steps": STEPS, "batch": BATCH, "seq_len": SEQ_LEN,
              "num_batches": NUM_BATCHES, "n_params": n_params, "adamw": ADAMW,
              "experts_implementation": args.experts_implementation if args.model in ("moe", "dsv3") else None,
              "data": "step s: rows [8*(s%10), 8*(s%10)+8) of tokens.json", "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "transformers": transformers.__version__}
    with open(os.path.join(args.out, "hf_losses.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    for step in range(0, STEPS, 10):
        print(f"step {step:2d}  loss {losses[step]:.4f}  grad_norm {grad_norms[step]:.4f}")
    print(f"step {STEPS - 1:2d}  loss {losses[-1]:.4f}  grad_norm {grad_norms[-1]:.4f}")


if __name__ == "__main__":
    main()
