"""torchtitan 0.3.0 training-throughput peer: its own Qwen3 models on one GPU, bf16 parameters, no FSDP.

What runs is torchtitan's code, assembled the way its Trainer does it for one GPU, minus data loading,
checkpointing and logging:
  * the model: its `torchtitan.models.qwen3` registry entry (`0.6B`, `1.7B`, `8B`, `30B-A3B`), flex attention
    (the registry's default), layers cut to --layers, built on the meta device with bf16 as default dtype
    (its `training.dtype=bfloat16`), moved to the GPU and initialised by its own `init_weights` (random init);
  * `parallelize_qwen3` with no parallelism and `skip_dp=True`: torch.compile per transformer block
    (fullgraph), no FSDP wrapper, so parameters, gradients and AdamW states are bf16 (no fp32 master copy);
    spmd backend `partial_dtensor`, so no module is wrapped in DTensor on one GPU;
  * its chunked loss: `ChunkedLossWrapper` (8 chunks, lm_head applied per chunk) over its compiled
    `CrossEntropyLoss`, sum over tokens divided by the step's label-token count, as its Trainer does;
  * its flex-attention block mask from `get_attention_masks` (causal; positions 0..S-1 in every row);
  * MoE (30B-A3B): its token-choice top-8 softmax router with renormalisation and experts on
    `torch._grouped_mm`; its load-balancing bias update (an optimizer pre-hook that needs its device meshes)
    is not registered, so the expert bias stays zero, as in HF's Qwen3-MoE;
  * `torch.optim.AdamW(fused=True)`, lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 (its
    `default_adamw` values with its default "fused" implementation), grad-norm clipping at 1.0.
Data: uniform random token ids, input = ids[:, :-1], labels = ids[:, 1:] (its dataloader's shift).

torchtitan 0.3.0 targets torch nightly; on torch 2.11 two names differ and are patched before it is imported:
`torch.distributed.fsdp.DataParallelMeshDims` (only named by its FSDP code, which this run does not use) gets a
stand-in class, and `create_block_mask`, which takes no `separate_full_blocks` on 2.11 (2.11 always separates
full blocks, the value torchtitan asks for), is called without it.

Model FLOPs per step (as hf_train_bench.py, MoE counting active parameters):
  6 * N_active * T + 6 * L * T * S * d_attn
  N_active = parameters without the embedding lookup (a tied lm_head counts once), with only top_k of the
  num_experts routed experts of each MoE layer; T = tokens per step; L = layers; S = seq_len;
  d_attn = n_heads * head_dim. MFU = FLOPs per step / step time / 989e12.

Prints one JSON line per run with hf_train_bench.py's fields. Needs torchtitan's wheels on the path
(benchmarks/baselines/fetch_wheels.sh, then on the GPU machine
`python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site`):
  python benchmarks/baselines/torchtitan_bench.py --flavor 0.6B --micro-batch 4
  python benchmarks/baselines/torchtitan_bench.py --flavor 30B-A3B --layers 4 --micro-batch 2
"""

import argparse
import dataclasses
import gc
import importlib.metadata
import inspect
import json
import statistics
import time

import torch

H100_BF16_PEAK_FLOPS = 989e12
DEFAULT_LAYERS = {"0.6B": 0, "1.7B": 0, "8B": 12, "30B-A3B": 4}


def patch_torch_211():
    """Supplies the torch-nightly names torchtitan 0.3.0 uses, where this torch lacks them."""
    import torch.distributed.fsdp as fsdp

    if not hasattr(fsdp, "DataParallelMeshDims"):
        @dataclasses.dataclass
        class DataParallelMeshDims:
            shard: object = None
            replicate: object = None

        fsdp.DataParallelMeshDims = DataParallelMeshDims

    from torch.nn.attention.flex_attention import create_block_mask
    if "separate_full_blocks" not in inspect.signature(create_block_mask).parameters:
        import torchtitan.models.common.decoder as decoder
        compiled_create_attention_mask = decoder.create_attention_mask

        def create_attention_mask(*args, separate_full_blocks=True, **kwargs):
            return compiled_create_attention_mask(*args, **kwargs)

        decoder.create_attention_mask = create_attention_mask


def build(args):
    patch_torch_211()
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.models.qwen3 import model_registry, parallelize_qwen3
    from torchtitan.tools.utils import set_default_dtype

    spec = model_registry(args.flavor)
    config = spec.model
    full_layers = len(config.layers)
    layers = args.layers if args.layers is not None else DEFAULT_LAYERS[args.flavor]
    if layers:
        if layers > full_layers:
            raise SystemExit(f"torchtitan_bench: --layers {layers} but {args.flavor} has {full_layers}")
        config.layers = config.layers[:layers]

    parallelism = ParallelismConfig(spmd_backend="partial_dtensor")
    dist_utils.set_spmd_backend(parallelism.spmd_backend)
    parallel_dims = ParallelDims.from_config(parallelism, world_size=1)
    training = TrainingConfig(local_batch_size=args.micro_batch, seq_len=args.seq_len, dtype="bfloat16")
    compile_config = CompileConfig(enable=True)
    ac_config = {"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}[args.ac]

    with torch.device("meta"), set_default_dtype(torch.bfloat16):
        model = config.build()
    model = parallelize_qwen3(model, parallel_dims=parallel_dims, training=training, parallelism=parallelism,
                              compile_config=compile_config, ac_config=ac_config, dump_folder="/tmp/torchtitan_bench",
                              skip_dp=True)
    model.to_empty(device="cuda")
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()

    vocab_size = config.vocab_size
    loss_fn = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=vocab_size)).build(
        compile_config=compile_config)
    loss_fn.set_lm_head(model.lm_head)
    model._skip_lm_head = True
    return model, config, loss_fn, full_layers


def active_parameter_count(model, config):
    """Parameters without the embedding lookup (a tied lm_head counts once), routed experts at top_k/num_experts."""
    total = sum(p.numel() for p in model.parameters())
    embedding = 0 if config.enable_weight_tying else model.tok_embeddings.weight.numel()
    active = total - embedding
    for block in model.layers.values():
        if block.moe_enabled:
            experts = sum(p.numel() for p in block.moe.routed_experts.parameters())
            active -= experts - experts * block.moe.router.top_k // block.moe.router.num_experts
    return total, active


def run(args):
    model, config, loss_fn, full_layers = build(args)
    n_params, n_active = active_parameter_count(model, config)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)

    grad_accum = args.grad_accum or max(1, args.tokens_per_step // (args.micro_batch * args.seq_len))
    tokens_per_step = args.micro_batch * grad_accum * args.seq_len
    generator = torch.Generator(device="cuda").manual_seed(1234)
    ids = [torch.randint(0, config.vocab_size, (args.micro_batch, args.seq_len + 1), device="cuda",
                         generator=generator) for _ in range(grad_accum)]
    batches = [(x[:, :-1].contiguous(), x[:, 1:].contiguous()) for x in ids]
    positions = torch.arange(args.seq_len, device="cuda").expand(args.micro_batch, args.seq_len)
    masks = model.get_attention_masks(positions=positions)
    global_valid_tokens = torch.tensor(float(tokens_per_step), device="cuda")

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device="cuda", dtype=torch.float32)
        for inputs, labels in batches:
            hidden = model(inputs, attention_masks=masks)
            loss, _ = loss_fn(hidden, labels, global_valid_tokens)
            del hidden
            loss.backward()
            total += loss.detach().float()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
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
    attention = config.layers[0].attention
    d_attn = attention.n_heads * attention.head_dim
    flops = 6 * n_active * tokens_per_step + 6 * len(config.layers) * tokens_per_step * args.seq_len * d_attn
    layers = len(config.layers)
    result = {
        "model": f"torchtitan-qwen3-{args.flavor}" + (f"-{layers}l" if layers != full_layers else ""),
        "mode": "compile", "seq_len": args.seq_len, "tokens_per_step": tokens_per_step,
        "step_ms": round(mean_ms, 2), "tokens_per_s": round(tokens_per_step / mean_ms * 1e3, 1),
        "mfu": round(flops / (mean_ms * 1e-3) / H100_BF16_PEAK_FLOPS, 4),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "micro_batch": args.micro_batch, "grad_accum": grad_accum, "n_params": n_params,
        "n_active_params": n_active, "layers": layers,
        "step_ms_min": round(min(step_ms), 2), "step_ms_max": round(max(step_ms), 2),
        "final_loss": round(loss.item(), 4), "optimizer": "fused", "params": "bf16",
        "activation_checkpointing": args.ac, "attention": "flex",
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "torchtitan": importlib.metadata.version("torchtitan"),
    }
    del model, optimizer, batches, masks
    gc.collect()
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flavor", choices=list(DEFAULT_LAYERS), required=True, help="torchtitan qwen3 registry entry")
    parser.add_argument("--layers", type=int, default=None,
                        help="keep the first L transformer blocks (default: 12 for 8B, 4 for 30B-A3B, else all)")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=2, help="sequences per forward/backward")
    parser.add_argument("--grad-accum", type=int, default=0,
                        help="micro-batches per optimizer step (0: --tokens-per-step / (micro-batch x seq-len))")
    parser.add_argument("--tokens-per-step", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--ac", choices=["none", "selective", "full"], default="none",
                        help="torchtitan activation checkpointing (its SelectiveAC / FullAC)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torchtitan_bench: needs a CUDA GPU")
    print(json.dumps(run(args)), flush=True)


if __name__ == "__main__":
    main()
