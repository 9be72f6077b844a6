#!/usr/bin/env python3
"""Writes the committed seed corpus of every fuzz target into tests/fuzz/corpus/<target>/:
for each parser a few valid files (so mutations start deep inside it) and hostile
ones (huge lengths, overlapping offsets, wrong dtypes and JSON types, deep nesting,
truncation, non-UTF-8, negative and overflowing numbers, ...). Run from anywhere:
    python3 tests/fuzz/make_seeds.py
The file name says what each seed is; rerunning rewrites the same files."""
import json
import os
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(ROOT))


def write(target, name, data):
    folder = os.path.join(ROOT, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    elif not isinstance(data, bytes):
        data = json.dumps(data).encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def copy(target, name, repo_path):
    with open(os.path.join(REPO, repo_path), "rb") as f:
        write(target, name, f.read())


def deep(n, open_, close):
    return open_ * n + close * n


# ---- safetensors_header -------------------------------------------------------------------
def safetensors(header, data=b"", length=None):
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def tensor(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


S = "safetensors_header"
write(S, "valid_two_tensors", safetensors(
    {"__metadata__": {"format": "pt"}, "a": tensor("F32", [2, 2], 0, 16), "b": tensor("BF16", [3], 16, 22)},
    bytes(range(22))))
write(S, "valid_empty", safetensors({}))
write(S, "valid_scalar_and_zero_size", safetensors(
    {"s": tensor("F64", [], 0, 8), "z": tensor("I32", [0, 5], 8, 8)}, b"\0" * 8))
write(S, "valid_unaligned_u8_then_f32", safetensors(
    {"u": tensor("U8", [3], 0, 3), "f": tensor("F32", [1], 3, 7)}, b"\1\2\3" + struct.pack("<f", 1.5)))
write(S, "valid_unsupported_dtypes", safetensors(
    {"b": tensor("BOOL", [2], 0, 2), "e": tensor("F8_E4M3", [2], 2, 4)}, b"\0\1\2\3"))
write(S, "hostile_huge_header_length", safetensors({}, length=2**63))
write(S, "hostile_header_length_past_end", safetensors({"a": tensor("F32", [1], 0, 4)}, b"\0" * 4, length=4096))
write(S, "hostile_truncated_length", b"\x10\0\0")
write(S, "hostile_empty", b"")
write(S, "hostile_overlapping_offsets", safetensors(
    {"a": tensor("F32", [2], 0, 8), "b": tensor("F32", [2], 4, 12)}, b"\0" * 12))
write(S, "hostile_gap", safetensors({"a": tensor("F32", [1], 4, 8)}, b"\0" * 8))
write(S, "hostile_offsets_past_data", safetensors({"a": tensor("F32", [4], 0, 16)}, b"\0" * 4))
write(S, "hostile_offsets_reversed", safetensors({"a": tensor("F32", [1], 8, 4)}, b"\0" * 8))
write(S, "hostile_negative_shape", safetensors({"a": tensor("F32", [-1, 4], 0, 16)}, b"\0" * 16))
write(S, "hostile_shape_overflow", safetensors(
    {"a": tensor("F32", [2**32, 2**32, 2**32], 0, 0)}))
write(S, "hostile_shape_bytes_overflow", safetensors({"a": tensor("F64", [2**62], 0, 0)}))
write(S, "hostile_offset_u64_max", safetensors({"a": tensor("U8", [1], 2**64 - 1, 0)}))
write(S, "hostile_float_offsets", safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.5]}},
                                               b"\0" * 4))
write(S, "hostile_unknown_dtype", safetensors({"a": tensor("F4", [2], 0, 1)}, b"\0"))
write(S, "hostile_dtype_not_string", safetensors({"a": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4))
write(S, "hostile_shape_not_array", safetensors({"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}},
                                                 b"\0" * 4))
write(S, "hostile_missing_fields", safetensors({"a": {"dtype": "F32"}}))
write(S, "hostile_entry_not_object", safetensors({"a": [1, 2, 3]}))
write(S, "hostile_metadata_not_strings", safetensors({"__metadata__": {"format": 1}}))
write(S, "hostile_repeated_key", safetensors(
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    b"\0" * 8))
write(S, "hostile_header_array", safetensors([1, 2]))
write(S, "hostile_deep_nesting", safetensors(deep(5000, "[", "]").encode()))
write(S, "hostile_not_utf8", safetensors(b'{"\xff\xfe": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\0"))
write(S, "hostile_invalid_json", safetensors(b'{"a": {"dtype": "F32", "shape": [1], "data_off'))
write(S, "hostile_nul_in_header", safetensors(b'{"a\0b": 1}'))

# ---- hf_index -----------------------------------------------------------------------------------
H = "hf_index"
copy(H, "valid_fixture_qwen3_sharded", "tests/fixtures/qwen3_mha_sharded/model.safetensors.index.json")
write(H, "valid_small", {"metadata": {"total_size": 16, "bb_save_id": "ab12"},
                         "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
write(H, "valid_empty_map", {"weight_map": {}})
write(H, "hostile_path_traversal", {"weight_map": {"a": "../../etc/passwd"}})
write(H, "hostile_absolute_path", {"weight_map": {"a": "/etc/passwd"}})
write(H, "hostile_dot_names", {"weight_map": {"a": ".", "b": "..", "c": ""}})
write(H, "hostile_file_not_string", {"weight_map": {"a": 3, "b": None, "c": ["x"]}})
write(H, "hostile_weight_map_array", {"weight_map": ["a", "b"]})
write(H, "hostile_no_weight_map", {"metadata": {"total_size": -1}})
write(H, "hostile_metadata_wrong_types", {"metadata": {"bb_save_id": 12, "total_size": "x"}, "weight_map": {}})
write(H, "hostile_top_level_string", "\"weight_map\"")
write(H, "hostile_deep_nesting", '{"weight_map": ' + deep(5000, "{\"a\":", "}").replace("}", "", 1) + "}")
write(H, "hostile_not_utf8", b'{"weight_map": {"\xff": "m\xc0.safetensors"}}')
write(H, "hostile_truncated", '{"weight_map": {"a": "model-000')
write(H, "hostile_nul_in_name", '{"weight_map": {"a": "model\\u0000.safetensors"}}')
write(H, "hostile_lone_surrogate", '{"weight_map": {"\\ud800": "x.safetensors"}}')

# ---- hf_config ----------------------------------------------------------------------------------
C = "hf_config"
qwen = json.load(open(os.path.join(REPO, "configs/qwen3-tiny/config.json")))
llama = json.load(open(os.path.join(REPO, "tests/fixtures/llama3_gqa/config.json")))
write(C, "valid_qwen3_tiny", qwen)
write(C, "valid_llama3_gqa", llama)
write(C, "valid_rope_parameters_v5", {**{k: v for k, v in llama.items() if k not in ("rope_theta", "rope_scaling")},
                                      "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                          "original_max_position_embeddings": 8192}})


def config_with(**changes):
    c = dict(qwen)
    c.update(changes)
    return c


write(C, "hostile_eps_string", config_with(rms_norm_eps="1e-6"))
write(C, "hostile_tie_string", config_with(tie_word_embeddings="true"))
write(C, "hostile_rope_scaling_string", config_with(rope_scaling="llama3"))
write(C, "hostile_rope_scaling_no_type", config_with(rope_scaling={"factor": 8.0}))
write(C, "hostile_rope_theta_zero", config_with(rope_theta=0))
write(C, "hostile_rope_theta_string", config_with(rope_theta="1e4"))
write(C, "hostile_rope_factor_zero", config_with(rope_scaling={"rope_type": "llama3", "factor": 0, "low_freq_factor": 1,
                                                               "high_freq_factor": 4,
                                                               "original_max_position_embeddings": 8192}))
write(C, "hostile_rope_type_number", config_with(rope_scaling={"rope_type": 3}))
write(C, "hostile_vocab_2_62", config_with(vocab_size=2**62))
write(C, "hostile_vocab_u64_max", config_with(vocab_size=2**64 - 1))
write(C, "hostile_hidden_negative", config_with(hidden_size=-128))
write(C, "hostile_heads_zero", config_with(num_attention_heads=0))
write(C, "hostile_kv_heads_float", config_with(num_key_value_heads=2.5))
write(C, "hostile_max_pos_string", config_with(max_position_embeddings="1024"))
write(C, "hostile_act_number", config_with(hidden_act=1))
write(C, "hostile_model_type_array", config_with(model_type=["qwen3"]))
write(C, "hostile_top_level_array", [qwen])
write(C, "hostile_deep_nesting", config_with(rope_scaling=json.loads(deep(400, "[", "]"))))
write(C, "hostile_nan_like", '{"vocab_size": 2048, "rms_norm_eps": -1e400}')

# ---- tokenizer_json -----------------------------------------------------------------------------
T = "tokenizer_json"


def byte_level_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


chars = byte_level_chars()
vocab = {c: i for i, c in enumerate(chars)}
merges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["l", "l"], ["e", "ll"]]
for a, b in merges:
    vocab[a + b] = len(vocab)
small = {
    "version": "1.0",
    "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": {"type": "ByteLevel", "trim_offsets": False},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": merges},
}
write(T, "valid_small_gpt2_layout", small)
copy(T, "valid_fixture_llama3", "tests/fixtures/tokenizer/llama3_tokenizer.json")


def tok_with(path, value):
    t = json.loads(json.dumps(small))
    node = t
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return t


write(T, "valid_split_template", tok_with(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+|\\d{1,3}"}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]}))
write(T, "hostile_vocab_id_int32_max", tok_with(["model", "vocab", "Ġt"], 2**31 - 1))
write(T, "hostile_vocab_id_negative", tok_with(["model", "vocab", "Ġt"], -5))
write(T, "hostile_vocab_id_huge", tok_with(["model", "vocab", "Ġt"], 2**40))
write(T, "hostile_vocab_id_string", tok_with(["model", "vocab", "Ġt"], "3"))
write(T, "hostile_vocab_duplicate_ids", tok_with(["model", "vocab", "Ġt"], 0))
write(T, "hostile_added_id_int32_max", tok_with(["added_tokens", 0, "id"], 2**31 - 1))
write(T, "hostile_added_id_negative", tok_with(["added_tokens", 0, "id"], -1))
write(T, "hostile_added_content_empty", tok_with(["added_tokens", 0, "content"], ""))
write(T, "hostile_merge_unknown_token", tok_with(["model", "merges"], [["zz", "qq"], ["Ġt", "he"]]))
write(T, "hostile_merge_three_parts", tok_with(["model", "merges"], ["a b c", "x"]))
write(T, "hostile_merges_object", tok_with(["model", "merges"], {"a": "b"}))
write(T, "hostile_vocab_array", tok_with(["model", "vocab"], ["a", "b"]))
write(T, "hostile_missing_bytes", tok_with(["model", "vocab"], {"a": 0, "b": 1}))
write(T, "hostile_bad_regex", tok_with(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(unclosed[\\p{"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}))
write(T, "hostile_backtracking_regex", tok_with(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(a*)*b|(\\w+\\s?)*$"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}))
write(T, "hostile_empty_match_regex", tok_with(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "x*"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}))
write(T, "hostile_pattern_not_string", tok_with(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": 5}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}))
write(T, "hostile_template_unknown_special", tok_with(["post_processor"], {"type": "TemplateProcessing", "single": [
    {"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {}}))
write(T, "hostile_template_id_out_of_range", tok_with(["post_processor"], {"type": "TemplateProcessing", "single": [
    {"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"ids": [10**6]}}}))
write(T, "hostile_template_item_scalar", tok_with(["post_processor"], {"type": "TemplateProcessing", "single": [1],
                                                                      "special_tokens": {}}))
write(T, "hostile_nested_sequences", tok_with(["normalizer"], json.loads(
    deep(300, '{"type": "Sequence", "normalizers": [', "]}").replace("[]", "[{\"type\": \"NFC\"}]"))))
write(T, "hostile_normalizer_type_number", tok_with(["normalizer"], {"type": 1}))
write(T, "hostile_not_utf8", b'{"model": {"type": "BPE", "vocab": {"\xff\xfe": 0}, "merges": []}}')
write(T, "hostile_truncated", json.dumps(small)[:700])

# ---- indexed_dataset_idx ------------------------------------------------------------------------
I = "indexed_dataset_idx"
MAGIC = b"MMIDIDX\0\0"


def idx(lengths, pointers, docs, dtype=8, version=1, count=None, doc_count=None, magic=MAGIC, tail=b""):
    head = magic + struct.pack("<Q", version) + struct.pack("<B", dtype)
    head += struct.pack("<Q", len(lengths) if count is None else count)
    head += struct.pack("<Q", len(docs) if doc_count is None else doc_count)
    body = struct.pack(f"<{len(lengths)}i", *lengths) + struct.pack(f"<{len(pointers)}q", *pointers)
    body += struct.pack(f"<{len(docs)}q", *docs)
    return head + body + tail


write(I, "valid_three_sequences_uint16", idx([3, 1, 2], [0, 6, 8], [0, 2, 3]))
write(I, "valid_int32", idx([4, 4], [0, 16], [0, 1, 2], dtype=4))
write(I, "valid_empty", idx([], [], [0]))
write(I, "hostile_bad_magic", idx([1], [0], [0, 1], magic=b"MMIDIDY\0\0"))
write(I, "hostile_version_2", idx([1], [0], [0, 1], version=2))
write(I, "hostile_dtype_float", idx([1], [0], [0, 1], dtype=6))
write(I, "hostile_dtype_unknown", idx([1], [0], [0, 1], dtype=200))
write(I, "hostile_count_u64_max", idx([1], [0], [0, 1], count=2**64 - 1))
write(I, "hostile_doc_count_huge", idx([1], [0], [0, 1], doc_count=2**61))
write(I, "hostile_truncated_header", idx([1], [0], [0, 1])[:20])
write(I, "hostile_truncated_arrays", idx([1, 2], [0, 2], [0, 2])[:-5])
write(I, "hostile_extra_bytes", idx([1], [0], [0, 1], tail=b"\0" * 16))
write(I, "hostile_negative_length", idx([-7], [0], [0, 1]))
write(I, "hostile_length_int32_max", idx([2**31 - 1, 2**31 - 1], [0, 2**32 - 2], [0, 2]))
write(I, "hostile_overlapping_pointers", idx([4, 4], [0, 4], [0, 2]))
write(I, "hostile_negative_pointer", idx([1], [-2], [0, 1]))
write(I, "hostile_docs_decreasing", idx([1, 1, 1], [0, 2, 4], [0, 2, 1, 3]))
write(I, "hostile_docs_past_end", idx([1], [0], [0, 9]))
write(I, "hostile_docs_not_from_zero", idx([1], [0], [1, 1]))
write(I, "hostile_no_docs", idx([1], [0], []))

# ---- recipe ---------------------------------------------------------------------------------------
R = "recipe"
copy(R, "valid_tiny_pretrain", "recipes/qwen3_tiny_pretrain.json")
base = {"model": {"hf_path": "configs/qwen3-tiny", "load_hf_weights": False},
        "data": {"tokenizer": "data/tokenizer.json", "jsonl": "data/corpus.jsonl", "seq_len": 16},
        "train": {"steps": 2}}
write(R, "valid_minimal", base)
write(R, "valid_sft_blend", {**base, "data": {"kind": "sft", "tokenizer": "data/tokenizer.json",
                                              "jsonl": "data/corpus.jsonl", "split": [9, 1]}})


def recipe_with(section, key, value):
    r = json.loads(json.dumps(base))
    r.setdefault(section, {})[key] = value
    return r


write(R, "hostile_unknown_key", recipe_with("train", "lr", 1e-3))
write(R, "hostile_unknown_section", {**base, "optimiser": {"lr": 1}})
write(R, "hostile_section_not_object", {**base, "train": 5})
write(R, "hostile_steps_string", recipe_with("train", "steps", "10"))
write(R, "hostile_steps_negative", recipe_with("train", "steps", -1))
write(R, "hostile_steps_huge_float", recipe_with("train", "steps", 1e300))
write(R, "hostile_steps_u64_max", recipe_with("train", "steps", 2**64 - 1))
write(R, "hostile_seed_negative", recipe_with("train", "seed", -1))
write(R, "hostile_lr_zero", recipe_with("optimizer", "lr", 0))
write(R, "hostile_lr_overflow", '{"model": {"hf_path": "configs/qwen3-tiny"}, "optimizer": {"lr": 1e999}}')
write(R, "hostile_clip_grad_string", recipe_with("optimizer", "clip_grad", "nan"))
write(R, "hostile_tp_huge", recipe_with("parallel", "tp", 99999999999))
write(R, "hostile_split_three", recipe_with("data", "split", [1, 2, 3]))
write(R, "hostile_split_negative", recipe_with("data", "split", [-1, 0]))
write(R, "hostile_split_huge", recipe_with("data", "split", [1e308, 1e308]))
write(R, "hostile_blend_mismatch", {**base, "data": {"prefixes": ["a", "b"], "blend": [1], "tokenizer": "data/tokenizer.json"}})
write(R, "hostile_prefixes_not_strings", recipe_with("data", "prefixes", [1, None]))
write(R, "hostile_overrides_array", recipe_with("model", "overrides", [1]))
write(R, "hostile_long_path", recipe_with("model", "hf_path", "x" * 5000))
write(R, "hostile_long_tokenizer_path", recipe_with("data", "tokenizer", "/" + "y" * 5000))
write(R, "hostile_nul_path", recipe_with("model", "hf_path", "configs/qwen3-tiny\0/x"))
write(R, "hostile_directory_paths", {**base, "data": {"tokenizer": "data", "jsonl": "data"}})
write(R, "hostile_top_level_array", [base])
write(R, "hostile_deep_nesting", '{"model": {"overrides": ' + deep(3000, '{"a":', "}").replace("}", "1}", 1) + "}}")
write(R, "hostile_not_utf8", b'{"description": "\xff\xfe", "model": {"hf_path": "\xc0\xaf"}}')
write(R, "hostile_truncated", json.dumps(base)[:40])

# ---- sharded_metadata -----------------------------------------------------------------------
S = "sharded_metadata"
SHARDED = "bumblebee-sharded-1"
FILES = {"rank-00000.safetensors": {"bytes": 1024, "crc32c": 305419896},
         "rank-00001.safetensors": {"bytes": 512, "crc32c": 4023233417}}


def piece(file, name, offsets, extent):
    return {"file": file, "name": name, "offsets": offsets, "extent": extent}


VALID = {"format": SHARDED, "files": FILES, "tensors": {
    "model/w": {"shape": [4, 6], "dtype": "F32", "shards": [piece("rank-00000.safetensors", "model/w.0", [0, 0], [2, 6]),
                                                            piece("rank-00001.safetensors", "model/w.1", [2, 0], [2, 6])]},
    "master/w": {"shape": [4, 6], "dtype": "F32", "shards": [piece("rank-00000.safetensors", "master/w.0", [0, 0], [4, 3]),
                                                             piece("rank-00001.safetensors", "master/w.1", [0, 3], [4, 3])]},
    "model/norm": {"shape": [6], "dtype": "BF16", "shards": [piece("rank-00000.safetensors", "model/norm", [0], [6])]},
    "model/empty": {"shape": [0, 3], "dtype": "F32", "shards": []}}}


def with_tensor(shape, dtype, shards):
    return {"format": SHARDED, "files": FILES, "tensors": {"t": {"shape": shape, "dtype": dtype, "shards": shards}}}


R0 = "rank-00000.safetensors"
write(S, "valid_two_ranks", VALID)
write(S, "valid_no_tensors", {"format": SHARDED, "files": {}, "tensors": {}})
write(S, "hostile_wrong_format", {**VALID, "format": "bumblebee-sharded-0"})
write(S, "hostile_path_traversal", {**VALID, "files": {"../../etc/passwd": {"bytes": 1, "crc32c": 1}}})
write(S, "hostile_dot_file", {**VALID, "files": {"..": {"bytes": 1, "crc32c": 1}, "": {"bytes": 0, "crc32c": 0}}})
write(S, "hostile_unlisted_file", with_tensor([2], "F32", [piece("other.safetensors", "t", [0], [2])]))
write(S, "hostile_overlap", with_tensor([4], "F32", [piece(R0, "a", [0], [3]), piece(R0, "b", [2], [2])]))
write(S, "hostile_outside_shape", with_tensor([4], "F32", [piece(R0, "a", [2], [3])]))
write(S, "hostile_missing_piece", with_tensor([4, 4], "F32", [piece(R0, "a", [0, 0], [4, 2])]))
write(S, "hostile_rank_mismatch", with_tensor([4, 4], "F32", [piece(R0, "a", [0], [4])]))
write(S, "hostile_negative", with_tensor([-4], "F32", [piece(R0, "a", [-1], [-3])]))
write(S, "hostile_huge_shape", with_tensor([2 ** 62, 2 ** 62], "F32", [piece(R0, "a", [0, 0], [2 ** 62, 2 ** 62])]))
write(S, "hostile_overflowing_offsets", with_tensor([8], "F32", [piece(R0, "a", [2 ** 63 - 1], [2 ** 63 - 1])]))
write(S, "hostile_bad_dtype", with_tensor([1], "Q4", [piece(R0, "a", [0], [1])]))
write(S, "hostile_wrong_types", {"format": SHARDED, "files": {R0: {"bytes": "x", "crc32c": -1}},
                                 "tensors": {"t": {"shape": "4", "dtype": 3, "shards": {}}}})
write(S, "hostile_crc_too_large", {**VALID, "files": {R0: {"bytes": 1, "crc32c": 2 ** 40}}})
write(S, "hostile_top_level_array", [VALID])
write(S, "hostile_deep_nesting", '{"format": "' + SHARDED + '", "files": ' + deep(3000, '{"a":', "}").replace("}", "1}", 1) + "}")
write(S, "hostile_not_utf8", b'{"format": "bumblebee-sharded-1", "files": {"\xff": {"bytes": 1, "crc32c": 1}}, "tensors": {}}')
