"""Bumblebee's runtime API in Python (docs/python.md).

    import numpy as np, bumblebee as bb
    rt = bb.create_runtime(bb.RuntimeConfig(backend="bb", hf_path=DIR,
             backend_cfg=bb.BBConfig(model_name="qwen3", parallel=bb.ParallelConfig(tp=1))))
    h = rt.build_model()
    batch = bb.PackedBatch(input_ids=np.array(ids, dtype=np.int64), seq_lens=[37, 37])
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, batch, loss_fn=None, num_microbatches=1)
        ok, grad_norm, num_zeros = rt.optimizer_step(h)
        rt.lr_scheduler_step(h)
"""

from ._bumblebee import Error, load_plugin
from .batch import PackedBatch
from .config import BBConfig, ExportConfig, OptimizerConfig, ParallelConfig, PeftConfig, RuntimeConfig, config_help
from .loss import torch_loss
from .outputs import ForwardResult, LossContext, ModelOutputs
from .runtime import ModelHandle, Runtime, create_runtime

__all__ = [
    "BBConfig",
    "Error",
    "ForwardResult",
    "LossContext",
    "ModelHandle",
    "ModelOutputs",
    "ExportConfig",
    "PeftConfig",
    "OptimizerConfig",
    "PackedBatch",
    "ParallelConfig",
    "Runtime",
    "RuntimeConfig",
    "config_help",
    "create_runtime",
    "load_plugin",
    "torch_loss",
]
