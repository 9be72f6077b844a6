#!/usr/bin/env python3
"""Builds the shipped training corpus: data/corpus.txt and data/corpus.jsonl.

Sources (all on a Debian 12 machine, all licensed for verbatim redistribution;
data/README.md says which license covers which part):
  1. every license text in /usr/share/common-licenses (symlinks skipped),
  2. CPython's LICENSE.txt (/usr/lib/python3.11/LICENSE.txt),
  3. the Python 3.11 documentation topics shipped as
     /usr/lib/python3.11/pydoc_data/topics.py (the text `help("topic")` shows).

corpus.txt is the sources in that order, each followed by one blank line.
corpus.jsonl holds one {"text": ...} document per group of consecutive
paragraphs of one source (at most ~MAX_DOC_CHARS characters), so a training
run sees a few hundred documents of natural length.

Usage: python3 data/make_corpus.py   (run from the repository root)
"""
import importlib.util
import json
import os

LICENSES = "/usr/share/common-licenses"
PYTHON_LICENSE = "/usr/lib/python3.11/LICENSE.txt"
PYDOC_TOPICS = "/usr/lib/python3.11/pydoc_data/topics.py"
MAX_DOC_CHARS = 3000
OUT_DIR = os.path.dirname(os.path.abspath(__file__))


def sources():
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.islink(path):
            continue
        with open(path, encoding="utf-8") as f:
            yield f"common-licenses/{name}", f.read()
    with open(PYTHON_LICENSE, encoding="utf-8") as f:
        yield "python3.11/LICENSE.txt", f.read()
    spec = importlib.util.spec_from_file_location("pydoc_topics", PYDOC_TOPICS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for topic in sorted(module.topics):
        yield f"pydoc_data/topics.py:{topic}", module.topics[topic]


def paragraph_groups(text):
    """Consecutive paragraphs joined until a group would pass MAX_DOC_CHARS."""
    group = []
    size = 0
    for para in text.strip("\n").split("\n\n"):
        if group and size + len(para) > MAX_DOC_CHARS:
            yield "\n\n".join(group)
            group, size = [], 0
        group.append(para)
        size += len(para) + 2
    if group:
        yield "\n\n".join(group)


def main():
    texts = list(sources())
    with open(os.path.join(OUT_DIR, "corpus.txt"), "w", encoding="utf-8") as f:
        for _, text in texts:
            f.write(text.rstrip("\n") + "\n\n")
    docs = 0
    with open(os.path.join(OUT_DIR, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for _, text in texts:
            for group in paragraph_groups(text):
                if group.strip():
                    f.write(json.dumps({"text": group}, ensure_ascii=False) + "\n")
                    docs += 1
    chars = sum(len(t) for _, t in texts)
    print(f"{len(texts)} sources, {chars} characters, {docs} documents")


if __name__ == "__main__":
    main()
