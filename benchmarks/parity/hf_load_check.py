"""Does HF transformers load what bumblebee exports? (issue 14, item 7)

Two steps around a bumblebee run (benchmarks/h200_session.sh, stage hfload):

  make   --out DIR --model dense|moe
         writes DIR/model (a random-init Qwen3 or Qwen3-MoE, HF's own init, saved in bf16 by save_pretrained) and
         DIR/tokens.json (4 sequences of 256 random token ids).
  (bumblebee trains DIR/model 20 AdamW steps on the GPU and exports it with save_hf_checkpoint to DIR/trained,
   then computes the logits of DIR/trained on tokens.json: DIR/bb_logits_<dtype>.bin, float32 [B, T, V])
  check  --out DIR --model dense|moe [--adapter DIR/adapter]
         loads DIR/trained with AutoModelForCausalLM (what a user of the export would do), computes its logits on the
         same tokens in float32 and in bf16 on the GPU and compares them with bumblebee's. Prints one JSON line.
         With --adapter (issue 16: a LoRA adapter bumblebee trained on DIR/model and saved in HF peft's format), HF
         loads DIR/model and peft's PeftModel.from_pretrained puts the adapter on it; bumblebee's logits are then
         those of DIR/model with the same adapter loaded (peft.adapter_path).

Pass: in float32 the logits agree to 1e-3 of the largest logit (a wrong name, transposition, fused-expert split or
dropped tensor moves them by O(1)); in bf16, within bf16 rounding (5e-2 of the largest logit) and the top-1 token
agrees at >= 97 % of positions.
"""

import argparse
import json
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

COMMON = dict(vocab_size=4096, hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
              head_dim=64, max_position_embeddings=1024, rms_norm_eps=1e-6, use_cache=False,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
MODELS = {
    "dense": lambda: Qwen3ForCausalLM(Qwen3Config(intermediate_size=1536, tie_word_embeddings=True, **COMMON)),
    "moe": lambda: Qwen3MoeForCausalLM(Qwen3MoeConfig(intermediate_size=1536, moe_intermediate_size=256, num_experts=16,
                                                       num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                                                       output_router_logits=False, tie_word_embeddings=False,
                                                       **COMMON)),
}
BATCH, SEQ = 4, 256


def make(out, model):
    torch.manual_seed(0)
    m = MODELS[model]().to(torch.bfloat16)
    m.save_pretrained(os.path.join(out, "model"))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, COMMON["vocab_size"], size=(BATCH, SEQ)).tolist()
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump(tokens, f)


def load(out, dtype, device, adapter):
    if not adapter:
        return AutoModelForCausalLM.from_pretrained(os.path.join(out, "trained"), dtype=dtype).to(device).eval()
    from peft import PeftModel
    base = AutoModelForCausalLM.from_pretrained(os.path.join(out, "model"), dtype=dtype)
    return PeftModel.from_pretrained(base, adapter).to(device).eval()


def check(out, model, device, adapter):
    tokens = torch.tensor(json.load(open(os.path.join(out, "tokens.json"))), device=device)
    report = {"check": "peft_load" if adapter else "hf_load", "model": model}
    ok = True
    for dtype, name, bound in ((torch.float32, "float32", 1e-3), (torch.bfloat16, "bfloat16", 5e-2)):
        m = load(out, dtype, device, adapter)
        with torch.no_grad():
            hf = m(tokens).logits.float().cpu().numpy()
        bb = np.fromfile(os.path.join(out, f"bb_logits_{name}.bin"), dtype=np.float32).reshape(hf.shape)
        scale = float(np.abs(hf).max())
        max_diff = float(np.abs(hf - bb).max())
        top1 = float((hf.argmax(-1) == bb.argmax(-1)).mean())
        report[name] = {"max_abs_diff": max_diff, "max_abs_logit": scale, "rel": max_diff / scale, "top1_agree": top1}
        ok = ok and max_diff <= bound * scale and (dtype == torch.float32 or top1 >= 0.97)
        del m
    report["pass"] = ok
    print(json.dumps(report))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("step", choices=["make", "check"])
    p.add_argument("--out", required=True)
    p.add_argument("--model", choices=sorted(MODELS), default="dense")
    p.add_argument("--device", default="cuda")
    p.add_argument("--adapter", default="")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    make(a.out, a.model) if a.step == "make" else check(a.out, a.model, a.device, a.adapter)
