#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizers Bumblebee ships and tests against.

No real Qwen or Llama tokenizer can be downloaded here, so we train our own
with the Hugging Face `tokenizers` package (pip install tokenizers), shaped
exactly like the real ones so the C++ loader meets the same JSON:

  data/tokenizer.json
      Qwen2/Qwen3 layout: NFC normalizer; pre_tokenizer Sequence of
      Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=false); BPE with
      merges saved as [a, b] pairs; ByteLevel decoder and post-processor;
      special tokens <|endoftext|>, <|im_start|>, <|im_end|> appended after
      the learned vocabulary. 2048 ids in all.
  tests/fixtures/tokenizer/llama3_tokenizer.json
      Llama 3 layout: no normalizer; Split(Llama 3 regex, digits in groups of
      up to three); BPE with ignore_merges=true and merges saved as "a b"
      strings (the older spelling); post-processor Sequence[ByteLevel,
      TemplateProcessing] that prepends <|begin_of_text|>; Llama 3 special
      tokens plus one non-special added token. 768 ids in all.

Both are trained on data/corpus.txt (see data/README.md). Run from the
repository root: python3 scripts/make_tokenizer.py
"""
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# The pre-tokenizer split patterns, verbatim from the published tokenizer.json files.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "data", "corpus.txt")


def byte_level_bpe(pattern, normalizer):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train(tok, learned_vocab_size):
    trainer = trainers.BpeTrainer(vocab_size=learned_vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([CORPUS], trainer)


def make_qwen2_style(path):
    tok = byte_level_bpe(QWEN2_PATTERN, normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    train(tok, 2048 - len(QWEN_SPECIAL))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIAL])
    tok.save(path)
    return tok


def make_llama3_style(path):
    tok = byte_level_bpe(LLAMA3_PATTERN, None)
    train(tok, 768 - len(LLAMA3_SPECIAL) - 1)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIAL])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    spec = json.loads(tok.to_str())
    # Llama 3 files set ignore_merges and were written by tokenizers versions
    # that spelled merges as "a b" strings; reproduce both.
    spec["model"]["ignore_merges"] = True
    spec["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in spec["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=2)
    return Tokenizer.from_file(path)


def main():
    qwen = make_qwen2_style(os.path.join(ROOT, "data", "tokenizer.json"))
    llama = make_llama3_style(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "llama3_tokenizer.json"))
    for name, tok in (("qwen2-style", qwen), ("llama3-style", llama)):
        print(f"{name}: {tok.get_vocab_size()} ids; 'Hello world' -> {tok.encode('Hello world').ids}")


if __name__ == "__main__":
    main()
