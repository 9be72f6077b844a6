#!/usr/bin/env python3
"""Writes data/chat.jsonl: conversations in HF's chat format built from data/corpus.jsonl, for the SFT recipes.

Each of the first 160 documents gives one conversation: a fixed system message, then for each of its first two
paragraphs that split (first sentence of at least 16 characters ending in '.', '?' or '!' and a rest) a user turn
asking for the continuation of the first sentence and an assistant turn answering with the rest. Deterministic, no
randomness:  python3 data/make_chat.py
"""
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM = "You continue texts: given the first sentence of a paragraph, you write the rest of it."
SENTENCE_END = re.compile(r"[.?!]\s")


def split_paragraph(paragraph):
    p = paragraph.strip()
    for m in SENTENCE_END.finditer(p, 15):
        rest = p[m.start() + 1:].strip()
        if rest:
            return p[:m.start() + 1], rest
        break
    return None


def main():
    out = []
    with open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    for text in docs[:160]:
        messages = [{"role": "system", "content": SYSTEM}]
        for paragraph in text.split("\n\n"):
            pair = split_paragraph(paragraph)
            if pair is None:
                continue
            messages.append({"role": "user", "content": "Continue: " + pair[0]})
            messages.append({"role": "assistant", "content": pair[1]})
            if len(messages) == 5:
                break
        if len(messages) > 1:
            out.append({"messages": messages})
    with open(os.path.join(HERE, "chat.jsonl"), "w", encoding="utf-8") as f:
        for conversation in out:
            f.write(json.dumps(conversation, ensure_ascii=False) + "\n")
    print(f"wrote {len(out)} conversations")


if __name__ == "__main__":
    main()
