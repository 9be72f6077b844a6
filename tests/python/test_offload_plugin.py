"""rt.to (offload, runtime/offload.h) and bb.load_plugin (model/plugin.h) from Python:
the plugin examples/my_model builds registers my_llama, a missing file is a clear
error, and on a CPU runtime to(h, "cpu") leaves training as it was."""
import os

import numpy as np
import pytest

import bumblebee as bb

PLUGIN = os.path.join(os.environ.get("BB_BINARY_DIR", "build"), "lib", "libmy_model.so")


def my_llama_runtime():
    bb.load_plugin(PLUGIN)
    return bb.create_runtime(bb.RuntimeConfig(hf_path="examples/my_model/hf",
                                              backend_cfg=bb.BBConfig(model_name="my_llama", load_hf_weights=False)))


def test_load_plugin_registers_my_llama_and_to_cpu_is_a_no_op_on_the_cpu():
    rt = my_llama_runtime()
    h = rt.build_model()
    batch = bb.PackedBatch(input_ids=np.arange(16) % 11, seq_lens=[16])
    rt.to(h, "cpu", model=True, optimizer=True, grad=True)
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, batch)
        ok, _, _ = rt.optimizer_step(h)
    assert ok and np.isfinite(r.metrics["loss"][0])
    with pytest.raises(bb.Error, match="neither the host"):
        rt.to(h, "cuda")


def test_a_missing_plugin_names_the_file():
    with pytest.raises(bb.Error, match="no_such_plugin.so: no such file"):
        bb.load_plugin("no_such_plugin.so")
