"""Every bounded key of the decode config at its boundaries, on ``configs/tiny_random.py``.

The value just inside a key's range passes the checks and the library's own checks before
compiling (on weightless models: no load, no compile); the value just outside is one ``error:``
line naming the key. The slow test decodes with every inside value (the SSD keys' checks are
enumerated in ``tests/test_cli_checks.py``). tiny_random: V = 256, max_seq_len S = 1024, L = 4,
K = 1, a draft tree of K·L + 2 = 6 positions and the prompt "Hello" (5 byte tokens).
"""

from __future__ import annotations

import functools
import io
import json
import subprocess
import sys

import pytest

from specjax.cli import batch_job, validate
from specjax.cli import decode as runner
from specjax.decode.batching import ContinuousBatch
from specjax.decode.inputs import prepare
from tests.test_cli_checks import ROOT, config, one_error_line
from tests.test_sharding import free_port

F32_TINY = 2.0**-126  # float32's smallest normal number: a smaller top_p is 0 on the device
F32_MAX = 3.4028234663852886e38
SEED_MAX = 2**31 - 2**20 - 1  # batch i decodes with seed + i: 2**20 batches of headroom
GREEDY = dict(temperature=0.0)

INSIDE = [
    dict(temperature=0.0),
    dict(temperature=1e-6),
    dict(temperature=sys.float_info.max),  # float32 inf: the uniform law
    dict(top_p=F32_TINY),
    dict(top_p=1.0),
    dict(top_k=0),
    dict(top_k=256),
    dict(top_k=2**40),  # k >= V keeps every token
    dict(num_speculative_tokens=1),
    dict(num_speculative_tokens=64),
    dict(verifier="block", num_paths=1),
    *(dict(verifier=v, num_paths=64) for v in ("specinfer", "spectr", "gbv")),
    dict(verifier="specinfer", num_paths=64, replacement=False),
    dict(drafter="ngram", verifier="specinfer", num_paths=64, **GREEDY),
    dict(verifier="spectr", num_paths=15, num_speculative_tokens=64),  # 15·64 + 2 + 5 + 24 <= S
    dict(drafter="self", draft_layers=1),  # the target has 2 layers
    dict(drafter="ngram", ngram_min=1, ngram_max=1),
    dict(drafter="ngram", ngram_min=64, ngram_max=64),
    dict(max_new_tokens=1),
    dict(max_new_tokens=1013),  # 5 + 1013 + 6 = S
    dict(drafter="none", max_new_tokens=1017),  # no draft: a tree of 2
    dict(verifier="gbv", num_paths=64, max_new_tokens=761),  # 5 + 761 + (64·4 + 2) = S
    dict(prompt="x" * 994),  # 994 + 24 + 6 = S
    dict(batch_size=1),
    dict(seed=-(2**31)),
    dict(seed=SEED_MAX),
    dict(stop_tokens=(0, 255)),
    dict(widths="auto"),
    dict(widths="fixed"),
    dict(widths="4"),
    dict(widths="0,1,2,3,4"),
    dict(widths="0,4", width_costs=f"{F32_TINY!r},{F32_MAX!r}"),
    dict(prompt_buckets="1", batch_buckets="1"),
    dict(prompt_buckets="", batch_buckets=""),
    dict(init_timeout=5e-324),
    dict(init_timeout=2**31 - 31),  # jax.distributed waits int(init_timeout) + 30: int32 s
    dict(num_cpu_devices=0),
    dict(num_cpu_devices=1024),
    dict(coordinator_address="127.0.0.1:1", num_processes=2, process_id=1),
    dict(coordinator_address="127.0.0.1:65535", num_processes=1, process_id=0),
]

# Caught by validate.check_decode, before any model is loaded.
CHECKS_OUTSIDE = [
    (dict(temperature=-5e-324), "temperature must be >= 0.0, got -5e-324"),
    (dict(temperature=float("inf")), "temperature must be a finite number"),
    (dict(top_p=2.0**-127), "top_p must be in [1.1754943508222875e-38, 1.0], got 5.87"),
    (dict(top_p=0.0), "top_p must be in (0, 1] (1 keeps every token), got 0.0"),
    (dict(top_p=1.0000000000000002), "top_p must be in [1.1754943508222875e-38, 1.0]"),
    (dict(top_k=-1), "top_k must be >= 0, got -1"),
    (dict(num_speculative_tokens=0), "num_speculative_tokens must be in [1, 64], got 0"),
    (dict(num_speculative_tokens=65), "num_speculative_tokens must be in [1, 64], got 65"),
    (dict(verifier="gbv", num_paths=0), "num_paths must be in [1, 64], got 0"),
    (dict(verifier="gbv", num_paths=65), "num_paths must be in [1, 64], got 65"),
    (dict(verifier="block", num_paths=2), "verifies one chain but the drafter proposes 2 paths"),
    (dict(drafter="self", draft_layers=0), "draft_layers must be >= 1, got 0"),
    (dict(drafter="ngram", ngram_min=0), "ngram_min must be in [1, 64], got 0"),
    (dict(drafter="ngram", ngram_min=3, ngram_max=2), "ngram_max must be in [3, 64], got 2"),
    (dict(drafter="ngram", ngram_max=65), "ngram_max must be in [1, 64], got 65"),
    (dict(drafter="ngram", ngram_min=65), "ngram_min must be in [1, 64], got 65"),
    (dict(max_new_tokens=0), "max_new_tokens must be >= 1, got 0"),
    (dict(batch_size=0), "batch_size must be >= 1, got 0"),
    (dict(seed=-(2**31) - 1), "seed -2147483649 does not fit the PRNG's int32"),
    (dict(seed=SEED_MAX + 1), f"seed {SEED_MAX + 1} does not fit the PRNG's int32"),
    (dict(stop_tokens=(0, 256)), "stop_tokens[1] must be a token id in [0, 256): 256"),
    (dict(stop_tokens=(-1,)), "stop_tokens[0] must be a token id in [0, 256): -1"),
    (dict(widths="0"), "widths=(0,) never speculates"),
    (dict(widths="0,5"), "widths: widths (0, 5) must be distinct ascending draft lengths"),
    (dict(widths="-1,4"), "within 0 .. L = 4"),
    *(
        (dict(widths="0,4", width_costs=f"1,{c}"), f"width_costs='1,{c}': give one positive cost")
        for c in ("0", "nan", "inf", "1e-39", "3.5e38")
    ),
    (dict(prompt_buckets="0"), "prompt buckets must be ascending positive sizes"),
    (dict(batch_buckets="0"), "batch buckets must be ascending positive sizes"),
    (dict(init_timeout=0.0), "init_timeout must be in (0.0, 2147483617], got 0.0"),
    (dict(init_timeout=2**31 - 30), "init_timeout must be in (0.0, 2147483617], got 2147483618"),
    (dict(num_cpu_devices=-1), "num_cpu_devices must be in [0, 1024], got -1"),
    (dict(num_cpu_devices=1025), "num_cpu_devices must be in [0, 1024], got 1025"),
    (dict(num_processes=0), "num_processes must be >= 1, got 0"),
    (dict(num_processes=2, process_id=2), "process_id must be in [0, 1], got 2"),
    (dict(process_id=-1), "process_id must be in [0, 0], got -1"),
    (dict(coordinator_address="127.0.0.1:0"), "coordinator_address '127.0.0.1:0' must be host"),
    (dict(coordinator_address="h:65536"), "coordinator_address 'h:65536' must be host:port"),
]

# Caught once the models' shapes are known, still before compiling.
LIBRARY_OUTSIDE = [
    (dict(max_new_tokens=1014), "prompt (5 tokens) + max_new_tokens (1014) + draft tree (6)"),
    (dict(drafter="none", max_new_tokens=1018), "max_new_tokens (1018) + draft tree (2) = 1025"),
    (dict(prompt="x" * 995), "prompt (995 tokens) + max_new_tokens (24) + draft tree (6) = 1025"),
    (dict(drafter="self", draft_layers=2), "draft_layers must be in [1, 1] (the target has 2"),
    (
        dict(verifier="spectr", num_paths=16, num_speculative_tokens=64),
        "leaves no room in the target's max_seq_len 1024; lower num_paths",
    ),
]


@functools.cache
def _weightless(source: str):
    """``random:<seed>`` as shapes only: the model's config and structure, no parameters."""
    from flax import nnx

    from specjax.models.random import random_model
    from specjax.models.tokenizer import ByteTokenizer

    return nnx.eval_shape(lambda: random_model(int(source.split(":")[1]))), ByteTokenizer()


@pytest.fixture
def weightless(monkeypatch):
    """The decode CLI's ``random:`` models without weights (building them is what is slow)."""
    monkeypatch.setattr(runner, "load_model", lambda source, *args, **kw: _weightless(source))


def before_compiling(cfg):
    """What the decode CLI checks before its first compile: ``check_decode``, then the target,
    drafter and DecodeConfig ``build`` makes, and the prompts' padding (or the batch engine)."""
    validate.check_decode(cfg)
    target, tokenizer, drafter, decode_config = runner.build(cfg)
    buckets = validate.shape_buckets(cfg)
    if batch_job.is_batch_job(cfg):
        return ContinuousBatch(
            target, drafter, decode_config, slots=cfg.batch_size, seed=cfg.seed, buckets=buckets
        )
    _, prompts = runner.read_prompts(cfg, tokenizer)
    return prepare(target, drafter, prompts, decode_config, buckets)


def prompts_file(tmp_path) -> str:
    """Two prompts, one per line: a batch job (its rows are ``batch_size`` slots)."""
    path = tmp_path / "prompts.txt"
    path.write_text("Hello\nA second prompt\n")
    return str(path)


def test_inside_values_pass_every_check_before_compiling(weightless, tmp_path):
    """Each key's values just inside its range (alone, on tiny_random) pass ``check_decode``
    and the library's checks before compiling."""
    job = dict(prompts_file=prompts_file(tmp_path), batch_size=128, **GREEDY)
    for overrides in [*INSIDE, job]:
        before_compiling(config("tiny_random", **overrides))
    batch = before_compiling(config("tiny_random", max_new_tokens=1013))
    assert batch.capacity == 1024  # the prompt, the new tokens and the tree fill S exactly


def test_outside_values_are_one_error_line_before_any_model_is_loaded():
    """Each key's values just outside its range are one error line naming the key and the
    bound, from ``check_decode``: before a model is loaded or a process waited for. (Before
    these checks, top_p below float32's smallest normal number kept every token, init_timeout
    over 2**31 - 31 s and num_cpu_devices = 2**31 were TypeErrors inside JAX, and a NaN
    width cost made the width controller pick that width at every step.)"""
    for overrides, message in CHECKS_OUTSIDE:
        line = one_error_line(validate.check_decode, config("tiny_random", **overrides))
        assert message in line, (overrides, line)


@pytest.mark.parametrize("overrides,message", LIBRARY_OUTSIDE)
def test_outside_the_models_shape_is_one_error_line(weightless, overrides, message):
    """Values the target's shape bounds (max_seq_len, its layers) pass ``check_decode`` and are
    one error line naming the key once the models' shapes are known, before compiling."""
    line = one_error_line(before_compiling, config("tiny_random", **overrides))
    assert message in line, line


# The inside values, grouped into decodes that can share one run (max_new_tokens=3 unless given).
REFERENCE = dict(drafter="ngram", verifier="specinfer", num_paths=64, ngram_max=64, **GREEDY)
AS_GREEDY = [  # laws that keep only the likeliest token: the greedy reference's tokens
    dict(temperature=1e-6, top_k=256, seed=SEED_MAX, stop_tokens=(0, 255), widths="4"),
    dict(top_p=F32_TINY, drafter="self", draft_layers=1),
]
RUNS = [
    dict(
        temperature=sys.float_info.max,
        top_k=2**40,
        seed=-(2**31),
        max_new_tokens=1,
        widths="0,4",
        width_costs=f"{F32_TINY!r},{F32_MAX!r}",
    ),
    dict(verifier="gbv", num_paths=64),
    dict(verifier="specinfer", num_paths=64, replacement=False),
    dict(verifier="spectr", num_paths=15, num_speculative_tokens=64),
    dict(max_new_tokens=1013),
    dict(prompt="x" * 1014, max_new_tokens=4, prompt_buckets="1", batch_buckets="1"),
    dict(mode="ssd", ssd_budget=1024, ssd_saguaro_top=256, ssd_saguaro=1e-6, ssd_alpha=0.999),
    dict(mode="ssd", num_speculative_tokens=1, ssd_budget=510, ssd_fan_out="uniform"),
    dict(mode="ssd", ssd_fan_out="255,0,0,0,256", ssd_fan_out_miss="0,0,0,255,256"),
]


def decode(tmp_path, **overrides) -> list[list[int]]:
    """The tokens ``runner.run`` decodes, as the CLI would (its metrics file written)."""
    metrics = tmp_path / "metrics.json"
    cfg = config("tiny_random", **{"max_new_tokens": 3, "metrics_json": str(metrics), **overrides})
    tokens = runner.run(cfg, out=io.StringIO())["tokens"]
    assert metrics.is_file(), overrides
    metrics.unlink()
    return tokens


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # T = 1.8e308: inf in float32
def test_every_inside_value_decodes(tmp_path):
    """Each inside value decodes to the end: the in-process CLI on tiny_random, and one CLI
    process for the keys only ``main`` reads (num_cpu_devices, coordinator, init_timeout)."""
    greedy = decode(tmp_path, **REFERENCE)[0]
    assert len(greedy) == 3
    for overrides in AS_GREEDY:
        tokens = decode(tmp_path, **overrides)[0]
        assert tokens and tokens == greedy[: len(tokens)], (overrides, tokens, greedy)
    job = dict(prompts_file=prompts_file(tmp_path), batch_size=128, **GREEDY)
    assert decode(tmp_path, **job)[0] == greedy  # row 0 is "Hello"
    for overrides in RUNS:
        rows = decode(tmp_path, **overrides)
        wanted = overrides.get("max_new_tokens", 3)
        assert [len(row) for row in rows] == [wanted], (overrides, rows)
        assert all(0 <= t < 256 for t in rows[0]), (overrides, rows)
    keys = dict(
        num_cpu_devices=1024,
        init_timeout=2**31 - 31,
        coordinator_address=f"127.0.0.1:{free_port()}",  # a one-process coordinator
    )
    keys.update(num_processes=1, process_id=0, prompt_buckets="", batch_buckets="")
    keys.update(max_new_tokens=3, metrics_json=tmp_path / "cli.json")
    args = [f"--config.{key}={value}" for key, value in keys.items()]
    out = subprocess.run(
        [sys.executable, "-m", "specjax.decode", "--config", "configs/tiny_random.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert [len(row) for row in json.loads((tmp_path / "cli.json").read_text())["tokens"]] == [3]


def test_library_width_costs_are_positive_and_finite():
    """``DecodeConfig`` refuses a NaN or infinite width cost (the controller's argmax would pick
    that width at every step), as the CLI does."""
    from specjax.decode import DecodeConfig

    for costs in ((1.0, float("nan")), (1.0, float("inf")), (0.0, 1.0)):
        with pytest.raises(ValueError, match="positive, finite cost per width"):
            DecodeConfig("block", widths=(0, 4), width_costs=costs)
    DecodeConfig("block", widths=(0, 4), width_costs=(1.0, 1e-30))


def test_a_draft_tree_with_no_room_is_refused_by_the_library():
    """The library's own bound (sources whose configs are read only when loaded: GGUF)."""
    from specjax.decode import DecodeConfig
    from specjax.drafters import ModelDrafter
    from specjax.sampling import SamplingParams
    from specjax.testing import pair

    target, draft = pair(48)  # max_seq_len 256
    drafter = ModelDrafter(draft, num_paths=16, draft_len=16, sampling=SamplingParams(0.0))
    with pytest.raises(ValueError, match="leaves no room in the model's max_seq_len 256"):
        prepare(target, drafter, [[1, 2]], DecodeConfig("specinfer", SamplingParams(0.0), 8))
