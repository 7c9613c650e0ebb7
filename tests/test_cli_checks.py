"""Every CLI config key is checked before any work: one ``error:`` line naming the fix.

In-process: each case calls the CLI's ``run`` (or its check) on a config record and asserts the
error it raises renders as one line; ``tests/test_decode_cli.py`` runs the one end-to-end check
of the exit status and stderr contract.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specjax.cli import decode as runner
from specjax.cli import distill as distill_cli
from specjax.cli import train as train_cli
from specjax.cli import validate
from specjax.cli.app import error_line, run_or_exit
from specjax.config_files import load_config
from specjax.models import checkpoint
from specjax.testing import random_model

ROOT = Path(__file__).resolve().parents[1]


def config(name: str, **overrides):
    cfg = load_config(ROOT / "configs" / f"{name}.py")
    for key, value in overrides.items():
        block, _, leaf = key.rpartition("__")
        (cfg[block] if block else cfg)[leaf] = value
    return cfg


def one_error_line(fn, cfg) -> str:
    """The ``error:`` line ``fn(cfg)`` exits with (asserting it is one line)."""
    with pytest.raises(SystemExit) as exit_info:
        run_or_exit(fn, cfg)
    line = str(exit_info.value.code)
    assert line.startswith("error: ") and "\n" not in line, line
    assert len(line) < 400, line
    return line


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(verifier="nope"), "unknown verifier 'nope'"),
        (dict(prompt="x" * 1100), "exceed the model's max_seq_len"),
        (dict(target="/no/such/checkpoint"), "not found"),
        (dict(drafter="model", target="random:0", draft="/no/such/draft"), "draft '/no/such"),
        (dict(drafter="magic"), "unknown drafter"),
        (dict(draft_placement="nowhere"), "unknown draft_placement"),
        (dict(dtype="float8"), "unknown dtype"),
        (dict(temperature=-1.0), "temperature must be >= 0"),
        (dict(temperature=float("nan")), "temperature must be a finite number"),
        (dict(top_p=0.0), "top_p must be in (0, 1] (1 keeps every token)"),
        (dict(top_k=-1), "top_k must be >= 0"),
        (dict(num_speculative_tokens=0), "num_speculative_tokens must be in [1, 64]"),
        (dict(num_paths=3, verifier="block"), "one chain but the drafter proposes 3 paths"),
        (dict(drafter="ngram", num_paths=2, verifier="specinfer"), "fixed draft paths"),
        (dict(top_paths=True), "top_paths branches a feature head's draft"),
        (
            dict(drafter="eagle", top_paths=True, num_paths=3, verifier="specinfer"),
            "exact at temperature 0 only",
        ),
        (dict(ngram_min=3, ngram_max=2, drafter="ngram"), "ngram_max must be in [3, 64]"),
        (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
        (dict(batch_size=0), "batch_size must be >= 1"),
        (dict(verifier="greedy"), "verifier 'greedy' decodes at temperature 0 only"),
        (dict(replacement=False), "set replacement=True"),
        (dict(output="/proc/nope/out.txt"), "not writable"),
        (dict(metrics_json="/dev/null/m.json"), "is a file, not a directory"),
        (dict(output="/tmp"), "is a directory"),
        (dict(prompts_file="/no/prompts.txt"), "prompts_file /no/prompts.txt not found"),
        (dict(prompt=""), "prompt is empty"),
        (dict(stop_tokens=(300,)), "must be a token id in [0, 256): 300"),
        (dict(stop_tokens=(-2,)), "stop_tokens[0] must be a token id"),
        (dict(seed=99999999999), "does not fit the PRNG's int32"),
        (dict(coordinator_address="localhost"), "must be host:port"),
        (dict(prompt_buckets="64,x"), "comma-separated integers"),
        (dict(compilation_cache="/dev/null/x"), "is a file, not a directory"),
        (dict(mesh_shape="3,5"), "needs 15 devices"),
        (dict(mesh_shape="1,1", stream=True), "stream=True decodes on one device"),
        (dict(draft_placement="submesh"), "needs mesh_shape and draft_mesh_shape"),
        (dict(num_processes=2, process_id=2), "process_id must be in [0, 1]"),
        (dict(init_timeout=0.0), "init_timeout must be in (0.0, 2147483617]"),
        (dict(num_cpu_devices=-1), "num_cpu_devices must be in [0, 1024]"),
        (dict(mode="sdd"), "unknown mode 'sdd'"),
        (dict(mode="ssd", drafter="ngram"), "mode=ssd drafts with a model"),
        (dict(mode="ssd", verifier="gbv", num_paths=2), "mode=ssd serves one chain"),
        (dict(mode="ssd", ssd_fan_out="1,2"), "ssd: fan-out '1,2' needs L + 1 = 5"),
        (dict(mode="ssd", ssd_fan_out="uniform", ssd_budget=7), "multiple of L + 1"),
        (dict(mode="ssd", ssd_fan_out_miss="5,1,1,1,1"), "length and sum of fan_out"),
        (dict(mode="ssd", ssd_saguaro=0.0), "ssd_saguaro must be in (0.0, 1.0]"),
        (dict(mode="ssd", ssd_backup="fast"), "unknown ssd_backup 'fast'"),
        (dict(mode="ssd", ssd_draft_device="gpu"), "unknown ssd_draft_device 'gpu'"),
        (dict(widths="0,x"), "widths='0,x': give auto, fixed or comma-separated"),
        (dict(widths="0,9"), "within 0 .. L = 4"),
        (dict(widths="2,0"), "distinct ascending"),
        (dict(widths="0,4", mode="ssd"), "keep one width"),
        (dict(widths="0,4", width_costs="1"), "one positive cost per width of (0, 4)"),
        (dict(width_costs="1,-2"), "one positive cost per width"),
        # Told by the sources' configs before they load:
        (dict(max_new_tokens=5000), "exceed the target's max_seq_len 1024; lower max_new_tokens"),
        (dict(drafter="self", draft_layers=2), "draft_layers must be in [1, 1]"),
        (dict(chat=True), "the target's tokenizer has no chat template; set chat=False"),
    ],
)
def test_decode_bad_input(overrides, message):
    line = one_error_line(runner.run, config("tiny_random", **overrides))
    assert message in line, line


def test_decode_checks_every_shipped_config():
    for name in ("shakespeare", "tiny_random", "smollm2"):
        validate.check_decode(config(name))


# Each SSD key at its boundaries on tiny_random (draft V = 256; L = 4 unless given): the value
# just inside passes the checks, the value just outside is one error line naming the key. After
# k < L accepted tokens V - 1 tokens can be the bonus (the rejected drafted one cannot), after L
# any of the V.
SSD_INSIDE = [
    dict(ssd_budget=1),
    dict(ssd_budget=1024),  # L = 4: (L + 1)(V - 1) = 1275 > 1024, the geometric terms capped
    dict(num_speculative_tokens=1, ssd_budget=510),  # (L + 1)(V - 1) = 510
    dict(num_speculative_tokens=1, ssd_budget=510, ssd_fan_out="uniform"),
    dict(ssd_fan_out="255,0,0,0,256"),
    dict(ssd_fan_out="255,1,0,0,0", ssd_fan_out_miss="0,0,0,0,256"),
    dict(ssd_saguaro_top=0),
    dict(ssd_saguaro_top=256),
    dict(ssd_saguaro=1.0),
    dict(ssd_saguaro=1e-6),
    dict(ssd_alpha=1e-6),
    dict(ssd_alpha=0.999),
]
SSD_OUTSIDE = [
    (dict(ssd_budget=0), "ssd_budget must be in [1, 1024], got 0"),
    (dict(ssd_budget=1025), "ssd_budget must be in [1, 1024], got 1025"),
    (dict(num_speculative_tokens=1, ssd_budget=511), "ssd_budget=511 exceeds (L + 1)(V - 1) = 510"),
    (
        dict(num_speculative_tokens=1, ssd_budget=512, ssd_fan_out="uniform"),
        "ssd_budget=512 exceeds (L + 1)(V - 1) = 510",
    ),
    (dict(ssd_fan_out="256,0,0,0,0"), "ssd_fan_out='256,0,0,0,0': F_0 = 256 exceeds V - 1 = 255"),
    (dict(ssd_fan_out="0,0,0,0,257"), "ssd_fan_out='0,0,0,0,257': F_4 = 257 exceeds V = 256"),
    (dict(ssd_fan_out="0,0,0,0,0"), "at least one > 0"),
    (dict(ssd_fan_out="-1,1,1,1,1"), "non-negative ints"),
    (
        dict(ssd_fan_out="255,1,0,0,0", ssd_fan_out_miss="0,256,0,0,0"),
        "ssd_fan_out_miss='0,256,0,0,0': F_1 = 256 exceeds V - 1 = 255",
    ),
    (dict(ssd_saguaro_top=257), "ssd_saguaro_top must be in [0, 256], got 257"),
    (dict(ssd_saguaro_top=-1), "ssd_saguaro_top must be in [0, 256], got -1"),
    (dict(ssd_saguaro=1.000001), "ssd_saguaro must be in (0.0, 1.0]"),
    (dict(ssd_saguaro=0.0), "ssd_saguaro must be in (0.0, 1.0]"),
    (dict(ssd_alpha=0.0), "ssd_alpha must be in (0.0, 1.0]"),
    (dict(ssd_alpha=1.0), "ssd_alpha must be in (0, 1)"),
]


def test_ssd_keys_at_their_boundaries():
    """Every SSD key just inside its range passes the checks; just outside it is one error line
    naming the key and the bound, before any model is loaded (these used to pass the checks and
    fail inside JAX's top_k, naming no key)."""
    for overrides in SSD_INSIDE:
        cfg = config("tiny_random", mode="ssd", **overrides)
        validate.check_decode(cfg)
        ssd = validate.ssd_config(cfg)
        ssd.check_vocab(256)  # what generate_ssd checks before compiling
        for fans in (ssd.fan_out, ssd.miss_fan_out):
            assert max(fans[:-1]) <= 255 and fans[-1] <= 256, (overrides, ssd)
    assert validate.ssd_config(config("tiny_random", mode="ssd", ssd_budget=1024)).branches == 1024
    for overrides, message in SSD_OUTSIDE:
        line = one_error_line(runner.run, config("tiny_random", mode="ssd", **overrides))
        assert message in line, (overrides, line)


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    """A tiny random checkpoint saved without its tokenizer."""
    model = random_model(0)
    return checkpoint.save(tmp_path_factory.mktemp("ck") / "ck", model, model.config)


def test_checkpoint_without_tokenizer(saved_tiny):
    line = one_error_line(runner.run, config("tiny_random", target=str(saved_tiny)))
    assert "has no tokenizer/ directory" in line, line


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_corrupt_checkpoint_is_one_short_line(saved_tiny, tmp_path):
    """Orbax's message for garbled data files is a 60-line spec dump; the user sees one line."""
    broken = tmp_path / "broken"
    model = random_model(0)
    from specjax.models import ByteTokenizer

    checkpoint.save(broken, model, model.config, ByteTokenizer())
    for f in (broken / "params").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(b"\0" * 7)
    line = one_error_line(runner.run, config("tiny_random", target=str(broken)))
    assert "the params could not be restored" in line and "corrupt" in line, line
    (broken / "config.json").write_text("{ not json")
    line = one_error_line(runner.run, config("tiny_random", target=str(broken)))
    assert "is not a complete specjax checkpoint" in line, line


def train_config(tmp_path, **overrides):
    where = dict(corpus="shakespeare_slice", workdir=str(tmp_path / "w"))
    where["export_dir"] = str(tmp_path / "e")
    return config("shakespeare_target", **{**where, **overrides})


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(model__vocab_size=100), "smaller than the byte tokenizer's vocabulary"),
        (dict(corpus="/no/such/dir"), "/no/such/dir"),
        (dict(tokenizer="sentencepiece"), "unknown tokenizer 'sentencepiece'"),
        (dict(val_fraction=0.0), "val_fraction must be in (0.0, 0.5]"),
        (dict(seed=2**40), "does not fit the PRNG's int32"),
        (dict(train__steps=0), "train: TrainConfig.steps must be >= 1"),
        (dict(train__learning_rate=-1.0), "learning_rate and clip_norm must be positive"),
        (dict(train__warmup_steps=400), "warmup_steps must be in [0, steps=300)"),
        (dict(train__checkpoint_every=0), "checkpoint_every must be >= 1"),
        (dict(train__seq_len=2048), "exceeds model.max_seq_len 1024"),
        (dict(model__num_kv_heads=3), "num_kv_heads (3) must divide num_heads (8)"),
        (dict(model__dim=0), "dim must be >= 1"),
    ],
)
def test_train_bad_input(tmp_path, overrides, message):
    line = one_error_line(train_cli.run, train_config(tmp_path, **overrides))
    assert message in line, line
    assert not (tmp_path / "w").exists() and not (tmp_path / "e").exists()  # before any work


def test_train_unknown_block_key(tmp_path):
    cfg = train_config(tmp_path)
    with cfg.train.unlocked():
        cfg.train.stepz = 3
    line = one_error_line(train_cli.run, cfg)
    assert "unknown train key(s) stepz" in line, line


def test_train_directories_checked_first(tmp_path):
    (tmp_path / "file").write_text("x")
    cfg = train_config(tmp_path, workdir=str(tmp_path / "file" / "run"))
    assert "is a file, not a directory" in one_error_line(train_cli.run, cfg)
    cfg = train_config(tmp_path, workdir=str(tmp_path / "file"))
    assert "is a file, not a directory" in one_error_line(train_cli.run, cfg)
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep")
    cfg = train_config(tmp_path, export_dir=str(tmp_path / "precious"))
    assert "is not a specjax checkpoint" in one_error_line(train_cli.run, cfg)
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        cfg = train_config(tmp_path, workdir=str(tmp_path / "ro" / "w"))
        assert "not writable" in one_error_line(train_cli.run, cfg)


def distill_config(tmp_path, target, **overrides):
    where = dict(corpus="shakespeare_slice", workdir=str(tmp_path / "w"))
    where["export_dir"] = str(tmp_path / "e")
    return config("shakespeare_draft", target=str(target), **{**where, **overrides})


@pytest.fixture(scope="module")
def byte_target(tmp_path_factory):
    """A tiny byte-level target checkpoint with its tokenizer (max_seq_len 1024)."""
    from specjax.models import ByteTokenizer

    model = random_model(0)
    path = tmp_path_factory.mktemp("target") / "t"
    return checkpoint.save(path, model, model.config, ByteTokenizer())


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(loss="kl"), "unknown loss 'kl'"),
        (dict(data="web"), "unknown data 'web'"),
        (dict(temperature=0.0), "temperature must be > 0"),
        (dict(data="target_samples", num_samples=8, sample_batch=32), "num_samples must be >= 32"),
        (dict(data="target_samples", sample_len=2000), "exceeds the target's max_seq_len"),
        (dict(model__vocab_size=512), "model.vocab_size (512) != the target's vocab_size (256)"),
    ],
)
def test_distill_bad_input(tmp_path, byte_target, overrides, message):
    line = one_error_line(distill_cli.run, distill_config(tmp_path, byte_target, **overrides))
    assert message in line, line
    assert not (tmp_path / "w").exists()


def test_distill_target_problems(tmp_path, saved_tiny):
    cfg = distill_config(tmp_path, "/nonexistent")
    assert "target '/nonexistent' not found" in one_error_line(distill_cli.run, cfg)
    cfg = distill_config(tmp_path, saved_tiny)
    assert "has no tokenizer/ directory" in one_error_line(distill_cli.run, cfg)


def test_error_line_joins_lines():
    assert error_line(ValueError("a\n  b\n")) == "error: a; b"
    assert error_line(KeyError()) == "error: KeyError"


def test_ssd_vocabulary_bounds_in_the_library():
    """Library users' SSDConfig is bounded by the loaded draft's vocabulary (the CLI cannot read
    a GGUF draft's V before loading it): one ValueError naming the knob, before compiling.
    (Placed after the tests that build random_model(0), whose first build is the slow one.)"""
    from specjax.decode import DecodeConfig
    from specjax.decode.seams import generate_ssd
    from specjax.decode.ssd import SSDConfig, SSDDrafter
    from specjax.sampling import SamplingParams

    model = random_model(0)
    sampling = SamplingParams(1.0)
    cfg = DecodeConfig("block", sampling, max_new_tokens=4)
    for ssd, message in [
        (SSDConfig(fan_out=(256, 0)), "fan_out (256, 0): F_0 = 256 exceeds V - 1 = 255"),
        (SSDConfig(fan_out=(0, 257)), "fan_out (0, 257): F_1 = 257 exceeds V = 256"),
        (
            SSDConfig(fan_out=(1, 255), fan_out_miss=(256, 0)),
            "fan_out_miss (256, 0): F_0 = 256 exceeds V - 1 = 255",
        ),
        (SSDConfig(fan_out=(1, 1), saguaro_top=257), "set ssd_saguaro_top in [0, 256]"),
    ]:
        with pytest.raises(ValueError, match="SSD") as info:
            generate_ssd(model, [[1, 2, 3]], cfg, SSDDrafter(model, ssd=ssd, sampling=sampling))
        assert message in str(info.value) and "\n" not in str(info.value), info.value
