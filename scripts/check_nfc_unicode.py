#!/usr/bin/env python3
"""Where the NFC of utf8proc (ours), HF tokenizers and Python's unicodedata differ.

Each follows its own Unicode version (docs/data.md, "Unicode versions"). This
normalises every code point c as c, "a c U+0316", "c U+0301" and "U+1100 c"
with all three and prints how many strings and code points each pair differs
on, then compares HF and utf8proc on every line of data/corpus.txt.
Needs libutf8proc2 and `pip install tokenizers==0.23.3` (the fixtures' version).
Run from the repository root: python3 scripts/check_nfc_unicode.py
"""
import ctypes
import ctypes.util
import os
import unicodedata

from tokenizers.normalizers import NFC

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UTF8PROC_STABLE, UTF8PROC_COMPOSE = 1 << 1, 1 << 3

lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
lib.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
lib.utf8proc_map.restype = ctypes.c_ssize_t
lib.utf8proc_unicode_version.restype = ctypes.c_char_p
libc = ctypes.CDLL(None)


def utf8proc_nfc(s):
    raw = s.encode("utf-8")
    out = ctypes.c_void_p()
    n = lib.utf8proc_map(raw, len(raw), ctypes.byref(out), UTF8PROC_STABLE | UTF8PROC_COMPOSE)
    assert n >= 0, s
    text = ctypes.string_at(out, n).decode("utf-8")
    libc.free(out)
    return text


def main():
    hf = NFC()
    print(f"utf8proc: Unicode {lib.utf8proc_unicode_version().decode()}; "
          f"Python unicodedata: Unicode {unicodedata.unidata_version}")
    probes = ("a", "\u0316", "\u0301", "\u1100")
    differ = {"utf8proc vs HF": [], "unicodedata vs HF": [], "unicodedata vs utf8proc": []}
    count = 0
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        for s in (c, "a" + c + "\u0316", c + "\u0301", "\u1100" + c):
            count += 1
            ours, theirs, py = utf8proc_nfc(s), hf.normalize_str(s), unicodedata.normalize("NFC", s)
            for key, x, y in (("utf8proc vs HF", ours, theirs), ("unicodedata vs HF", py, theirs),
                              ("unicodedata vs utf8proc", py, ours)):
                if x != y:
                    differ[key].append(s)
    print(f"{count} strings")
    for key, strings in differ.items():
        cps = sorted({ord(ch) for s in strings for ch in s if ch not in probes})
        print(f"{key}: {len(strings)} strings, {len(cps)} code points: {' '.join(f'U+{c:04X}' for c in cps)}")
    with open(os.path.join(ROOT, "data", "corpus.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    print(f"data/corpus.txt: {sum(utf8proc_nfc(l) != hf.normalize_str(l) for l in lines)} of {len(lines)} lines differ")


if __name__ == "__main__":
    main()
