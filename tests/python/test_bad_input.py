"""Bad input from Python: a bumblebee.Error with a clear message, and the
runtime still usable after it (the next step gives the numbers of a clean run)."""

import math

import numpy as np
import pytest

import bumblebee as bb
from conftest import ADAMW_WORDS, fixture_batch, ref_config

FIXTURE = "qwen3_tp"


def clean_step(rt, h):
    with rt.train_mode(h):
        rt.zero_grad(h)
        loss = rt.forward_backward(h, fixture_batch(FIXTURE)).loss
        _, grad_norm, _ = rt.optimizer_step(h)
    return loss, grad_norm


@pytest.fixture(scope="module")
def clean():
    rt = bb.create_runtime(ref_config(FIXTURE, *ADAMW_WORDS))
    return clean_step(rt, rt.build_model())


def bad_loss(returned):
    return lambda outputs, batch, ctx: returned(outputs)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda rt, h: rt.optimizer_step(h), "optimizer_step with no gradients"),
        (lambda rt, h: rt.forward_backward(h, fixture_batch(FIXTURE), num_microbatches=3), "num_microbatches 3 exceeds"),
        (lambda rt, h: rt.forward_backward(h, bb.PackedBatch(input_ids=[1, 999], seq_lens=[2])), "token id 999"),
        (
            lambda rt, h: rt.forward_backward(
                h,
                fixture_batch(FIXTURE),
                bad_loss(lambda o: (0.0, {}, -o.log_probs, np.zeros(2))),
                calculate_entropy=True,
            ),
            r"dentropy has shape \(2,\), expected \(22,\)",
        ),
        (
            lambda rt, h: rt.forward_backward(
                h, fixture_batch(FIXTURE), bad_loss(lambda o: (0.0, {}, -o.log_probs, -o.log_probs))
            ),
            r"must return \(loss, metrics, dlog_probs\);",
        ),
        (
            lambda rt, h: rt.forward_backward(h, fixture_batch(FIXTURE), bad_loss(lambda o: (0.0, {}, np.zeros(3)))),
            r"dlog_probs has shape \(3,\), expected \(22,\)",
        ),
        (
            lambda rt, h: rt.forward_backward(h, fixture_batch(FIXTURE), bad_loss(lambda o: (math.nan, {}, -o.log_probs))),
            "non-finite loss",
        ),
        (
            lambda rt, h: rt.forward_backward(
                h, fixture_batch(FIXTURE), bad_loss(lambda o: (0.0, {}, np.full(o.log_probs.size, np.inf)))
            ),
            "dlog_probs holds non-finite values",
        ),
        (
            lambda rt, h: rt.forward_backward(h, fixture_batch(FIXTURE), bad_loss(lambda o: (o.log_probs.sum(), {}))),
            r"must return \(loss, metrics, dlog_probs\)",
        ),
        (
            lambda rt, h: rt.forward_backward(h, fixture_batch(FIXTURE), bad_loss(lambda o: ("x", {}, -o.log_probs))),
            "loss of type str",
        ),
        (lambda rt, h: rt.forward_backward(h, fixture_batch(FIXTURE), bad_loss(lambda o: 1 / 0)), "division by zero"),
    ],
)
def test_bad_calls_raise_and_leave_the_runtime_usable(call, message, clean):
    rt = bb.create_runtime(ref_config(FIXTURE, *ADAMW_WORDS))
    h = rt.build_model()
    with pytest.raises((bb.Error, ZeroDivisionError), match=message):
        with rt.train_mode(h):
            call(rt, h)
    assert clean_step(rt, h) == clean


def test_forward_backward_with_gradients_in_eval_mode_is_an_error():
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    with rt.eval_mode(h):
        with pytest.raises(bb.Error, match="forward_backward with gradients in eval mode"):
            rt.forward_backward(h, fixture_batch(FIXTURE))
        assert rt.forward_backward(h, fixture_batch(FIXTURE), forward_only=True).loss > 0


def test_unknown_model_name_lists_the_registered_ones():
    rt = bb.create_runtime(ref_config(FIXTURE))
    with pytest.raises(bb.Error, match=r"unknown model_name 'nope' \(registered models: .*qwen3"):
        rt.build_model(bb.BBConfig(model_name="nope"))
    assert rt.build_model().vocab_size == 157


@pytest.mark.parametrize(
    "words, message",
    [
        (["backend=ref", "backend.parallel.tp=2"], "backend=ref runs on one rank"),
        (["hf_path=/nonexistent"], "no config.json in hf_path /nonexistent"),
        (["backend.device=cuda"], "device=cuda"),
    ],
)
def test_bad_configs_are_errors(words, message):
    with pytest.raises(bb.Error, match=message):
        bb.create_runtime(ref_config(FIXTURE), *words).build_model()


def test_export_in_an_unsupported_dtype_is_an_error():
    rt = bb.create_runtime(ref_config(FIXTURE))
    with pytest.raises(bb.Error, match="export_weights: dtype 'int8'"):
        next(rt.export_weights(rt.build_model(), dtype="int8"))
