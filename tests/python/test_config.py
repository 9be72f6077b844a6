"""RuntimeConfig and friends (python/bumblebee/config.py): one field per schema
key with the schema's defaults, key=value overrides through the schema, and its errors."""

import dataclasses
import json

import pytest

import bumblebee as bb
from bumblebee import _bumblebee


def test_every_schema_key_is_a_field_with_the_schema_default():
    cfg = bb.RuntimeConfig()
    words = dict(w.split("=", 1) for w in cfg.to_words())
    for spec in json.loads(_bumblebee.schema_keys()):
        if spec["default"] is None:
            assert spec["name"] not in words   # unset keys stay unset
            continue
        value = json.loads(words[spec["name"]]) if spec["type"] in ("int", "float", "bool", "json") else words[spec["name"]]
        assert value == spec["default"], spec["name"]
    assert {f.name for f in dataclasses.fields(bb.ParallelConfig)} == {"tp", "etp", "ep", "pp", "vpp", "cp", "pp_layout"}


def test_the_seed_names_build_a_config():
    cfg = bb.RuntimeConfig(
        backend="ref",
        hf_path="x",
        backend_cfg=bb.BBConfig(model_name="qwen3", parallel=bb.ParallelConfig(tp=2), optimizer=bb.OptimizerConfig(lr=3e-4)),
    )
    words = cfg.to_words()
    assert "backend=ref" in words and "backend.parallel.tp=2" in words and "optimizer.lr=0.0003" in words
    assert "backend.model_name=qwen3" in words


def test_overrides_go_through_the_schema():
    base = bb.RuntimeConfig(hf_path="x")
    cfg = base.override("backend.parallel.tp=4", "optimizer.lr=2e-3", "backend.model_overrides={\"num_layers\": 1}")
    assert cfg.backend_cfg.parallel.tp == 4 and cfg.backend_cfg.optimizer.lr == 2e-3
    assert cfg.backend_cfg.model_overrides == {"num_layers": 1}
    assert base.backend_cfg.parallel.tp == 1   # override returns a copy
    assert bb.RuntimeConfig.from_words(["backend.router_aux_loss_coef=0.5"]).backend_cfg.router_aux_loss_coef == 0.5


@pytest.mark.parametrize(
    "word, message",
    [
        ("tp=2", "backend.parallel.tp"),                 # the nearest key
        ("backend.parallel.tp=two", "backend.parallel.tp"),
        ("backend.dtype=float16", "float16"),
        ("optimizer.lr=nan", "optimizer.lr"),
        ("no_equals_sign", "no_equals_sign"),
    ],
)
def test_bad_overrides_are_errors_naming_the_key(word, message):
    with pytest.raises(bb.Error, match=message):
        bb.RuntimeConfig().override(word)


def test_a_bad_field_value_is_an_error_naming_the_key():
    cfg = bb.RuntimeConfig(hf_path="x", backend_cfg=bb.BBConfig(parallel=bb.ParallelConfig(tp=0)))
    with pytest.raises(bb.Error, match="backend.parallel.tp"):
        bb.create_runtime(cfg)


def test_error_is_a_runtime_error():
    assert issubclass(bb.Error, RuntimeError)
    assert "backend.parallel.tp" in bb.config_help()
