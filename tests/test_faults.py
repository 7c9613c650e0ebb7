"""A target whose weights hold a NaN never gives silent output: the row stops at the first step
whose logits are not finite and the run ends with one error naming the target and the step (it
used to print garbage with exit status 0), in ``generate``, ``Stream``, a batch job and the CLI,
which writes no output file."""

from __future__ import annotations

import dataclasses
import io
import json

import jax.numpy as jnp
import pytest

from specjax.cli import decode as runner
from specjax.cli.app import error_line
from specjax.config_files import load_config
from specjax.decode import DecodeConfig, Stream, generate
from specjax.decode.batching import ContinuousBatch, Request
from specjax.decode.state import NonFiniteTarget
from specjax.drafters import NgramDrafter
from specjax.models import checkpoint
from specjax.models.pure import PureModel
from specjax.models.tokenizer import ByteTokenizer
from specjax.sampling import SamplingParams
from specjax.testing import random_model
from tests.test_batch_job import ROOT


@pytest.fixture(scope="module")
def broken():
    """The tiny random target with one NaN in its first block's query projection."""
    model = random_model(0)
    attn = model.layers[0].attn
    attn.wq[...] = attn.wq[...].at[0, 0, 0].set(jnp.nan)
    return model


def test_generate_and_stream_raise_one_error(broken):
    """(The check reads the logits themselves, so temperature does not matter: at 0 a NaN row
    still gives a one-hot law. This config is the CLI's below, so both share programs.)"""
    sampling = SamplingParams(temperature=1.0)
    config = DecodeConfig("block", sampling, max_new_tokens=8, widths=(0, 4))
    drafter = NgramDrafter(256, draft_len=4)
    with pytest.raises(NonFiniteTarget, match="target model's logits were not finite") as err:
        generate(broken, [[1, 2, 3], [4, 5]], config, drafter)
    assert "\n" not in error_line(err.value)
    with pytest.raises(NonFiniteTarget):
        for new in Stream(broken, [[1, 2, 3]], config, drafter):
            assert not new[0], "a token of a broken target was yielded"
    fixed = dataclasses.replace(config, widths=())  # a batch job at T > 0: one width
    engine = ContinuousBatch(PureModel.of(broken), drafter, fixed, slots=1)
    with pytest.raises(NonFiniteTarget):
        list(engine.run([Request(i, [1 + i, 2]) for i in range(3)]))


def test_cli_writes_nothing(broken, tmp_path):
    path = tmp_path / "broken"
    checkpoint.save(path, broken, broken.config, ByteTokenizer())
    cfg = load_config(ROOT / "configs" / "tiny_random.py")
    cfg.target, cfg.drafter, cfg.max_new_tokens = str(path), "ngram", 8
    cfg.metrics_json, cfg.output = str(tmp_path / "m.json"), str(tmp_path / "out.txt")
    with pytest.raises(NonFiniteTarget) as err:
        runner.run(cfg, out=io.StringIO())
    assert "step" in error_line(err.value)
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "out.txt").exists()
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(json.dumps({"id": 1, "prompt": "x"}) + "\n")
    cfg.output, cfg.metrics_json = "", ""
    cfg.input, cfg.results = str(prompts), str(tmp_path / "r.jsonl")
    with pytest.raises(NonFiniteTarget):
        runner.run(cfg, out=io.StringIO())
    results = tmp_path / "r.jsonl"
    assert not results.exists() or results.read_text() == ""  # no garbage record
