"""RuntimeConfig, BBConfig, ParallelConfig, OptimizerConfig, PeftConfig and ExportConfig: dataclasses made
from the library's configuration schema, one field per key, with the schema's
defaults (``bumblebee.config_help()`` lists every key with its meaning).

    RuntimeConfig.backend, .hf_path          keys backend, hf_path
    RuntimeConfig.backend_cfg: BBConfig      keys backend.X (field X)
    BBConfig.parallel: ParallelConfig        keys backend.parallel.X
    BBConfig.optimizer: OptimizerConfig      keys optimizer.X
    BBConfig.peft: PeftConfig                keys peft.X (LoRA / DoRA, docs/peft.md)
    RuntimeConfig.export_cfg: ExportConfig   keys export.X

A config reaches the library as key=value words (``to_words()``), so every
value gets the tools' checks and errors, and ``override("backend.parallel.tp=2",
...)`` takes the tools' syntax for any key.
"""

import dataclasses
import json
import numbers

from . import _bumblebee as _native

_SCHEMA = json.loads(_native.schema_keys())
_TYPES = {"string": str, "int": int, "float": float, "bool": bool, "json": dict}


def config_help():
    """Every configuration key with its type, default and meaning."""
    return _native.config_help()


def _place(key):
    """The (class name, field) of a schema key."""
    parts = key.split(".")
    if len(parts) == 1:
        return "RuntimeConfig", key
    if parts[0] == "optimizer" and len(parts) == 2:
        return "OptimizerConfig", parts[1]
    if parts[0] == "backend" and len(parts) == 2:
        return "BBConfig", parts[1]
    if parts[:2] == ["backend", "parallel"] and len(parts) == 3:
        return "ParallelConfig", parts[2]
    if parts[0] == "export" and len(parts) == 2:
        return "ExportConfig", parts[1]
    if parts[0] == "peft" and len(parts) == 2:
        return "PeftConfig", parts[1]
    raise _native.Error(f"configuration key '{key}' has no place in the Python dataclasses (python/bumblebee/config.py)")


def _field(spec):
    py_type = _TYPES[spec["type"]]
    default = spec["default"]
    if default is None:
        return (_place(spec["name"])[1], py_type | None, dataclasses.field(default=None))
    if py_type is dict:
        return (_place(spec["name"])[1], dict, dataclasses.field(default_factory=lambda d=default: json.loads(json.dumps(d))))
    return (_place(spec["name"])[1], py_type, dataclasses.field(default=py_type(default)))


def _make(name, extra_fields, doc):
    specs = [k for k in _SCHEMA if _place(k["name"])[0] == name]
    lines = [doc, "", "Fields (schema key: meaning):"]
    lines += [f"    {_place(k['name'])[1]} ({k['name']}, {k['type']}): {k['doc']}" for k in specs]
    cls = dataclasses.make_dataclass(name, [_field(k) for k in specs] + extra_fields)
    cls.__module__ = __name__
    cls.__doc__ = "\n".join(lines)
    return cls


ParallelConfig = _make("ParallelConfig", [], "Parallel layout: the backend.parallel.* keys.")
OptimizerConfig = _make("OptimizerConfig", [], "AdamW and learning-rate schedule: the optimizer.* keys.")
PeftConfig = _make("PeftConfig", [], "Parameter-efficient fine-tuning (LoRA, DoRA): the peft.* keys.")
BBConfig = _make(
    "BBConfig",
    [
        ("parallel", ParallelConfig, dataclasses.field(default_factory=ParallelConfig)),
        ("optimizer", OptimizerConfig, dataclasses.field(default_factory=OptimizerConfig)),
        ("peft", PeftConfig, dataclasses.field(default_factory=PeftConfig)),
    ],
    "The native backend's configuration: the backend.* keys, parallel, optimizer and peft.",
)
ExportConfig = _make("ExportConfig", [], "Hugging Face export: the export.* keys.")
_RuntimeConfigFields = _make(
    "RuntimeConfig",
    [
        ("backend_cfg", BBConfig, dataclasses.field(default_factory=BBConfig)),
        ("export_cfg", ExportConfig, dataclasses.field(default_factory=ExportConfig)),
    ],
    "What create_runtime takes: backend, hf_path, backend_cfg and export_cfg.",
)


def _section(cfg, key):
    cls, _ = _place(key)
    return {
        "RuntimeConfig": cfg,
        "BBConfig": cfg.backend_cfg,
        "ParallelConfig": cfg.backend_cfg.parallel,
        "OptimizerConfig": cfg.backend_cfg.optimizer,
        "PeftConfig": cfg.backend_cfg.peft,
        "ExportConfig": cfg.export_cfg,
    }[cls]


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


class RuntimeConfig(_RuntimeConfigFields):
    __doc__ = _RuntimeConfigFields.__doc__

    def to_words(self):
        """Every key as key=value, as the tools' command lines write it (unset keys left out)."""
        words = []
        for spec in _SCHEMA:
            key = spec["name"]
            value = getattr(_section(self, key), _place(key)[1])
            if value is not None:
                words.append(f"{key}={_text(value)}")
        return words

    def override(self, *words):
        """A copy with key=value words applied, parsed and checked by the schema."""
        cfg = dataclasses.replace(
            self,
            backend_cfg=dataclasses.replace(
                self.backend_cfg,
                parallel=dataclasses.replace(self.backend_cfg.parallel),
                optimizer=dataclasses.replace(self.backend_cfg.optimizer),
                peft=dataclasses.replace(self.backend_cfg.peft),
            ),
            export_cfg=dataclasses.replace(self.export_cfg),
        )
        for key, value in json.loads(_native.parse_config(list(words))).items():
            setattr(_section(cfg, key), _place(key)[1], value)
        return cfg

    @classmethod
    def from_words(cls, words):
        """A config from key=value words over the schema's defaults."""
        return cls().override(*words)
