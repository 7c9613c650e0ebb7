"""Where the width policy's step costs come from (:mod:`specjax.decode.costs`): given costs are
used; at temperature > 0 (a verifier other than ``gumbel``) they are guessed and nothing reads a
clock, so a seed repeats its sample; at temperature 0 and with ``gumbel`` they are measured once
per compiled program, before the timing; ``measure`` on a scratch and on live rows; the costs
file (``record`` / ``lookup``); ``python -m specjax.calibrate`` writing one and
``python -m specjax.decode`` reading it."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from specjax import config_files, sampling
from specjax.cli import calibrate, width_keys
from specjax.cli import decode as runner
from specjax.cli.checks import ConfigError
from specjax.decode import DecodeConfig, generate
from specjax.decode import costs as cost_source
from specjax.decode import widths as W
from specjax.decode.buckets import DEFAULT
from specjax.decode.seams import PROGRAMS, Run, outputs
from specjax.drafters import ModelDrafter
from tests.test_widths import (  # noqa: F401 (fixtures)
    GREEDY,
    NEW_TOKENS,
    PROMPTS,
    autoregressive,
    models,
)

ROOT = Path(__file__).resolve().parents[1]
HOT = sampling.SamplingParams(1.0)
MEASURED = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))
"""Greedy with widths and no costs: measured (one program for the tests below)."""


def drafter_of(pair, params=GREEDY):
    return ModelDrafter(pair[1], num_paths=1, draft_len=3, sampling=params)


def fresh_run(target, drafter, cfg, prompts=PROMPTS) -> Run:
    """The run of ``prompts`` with its program's measured costs forgotten."""
    run = Run.of(target, drafter, prompts, cfg, 0, None, DEFAULT)
    PROGRAMS.costs.pop(run.programs.key, None)
    return run


def never_measure(monkeypatch):
    def measure(*args, **kwargs):
        raise AssertionError("the width costs were measured")

    monkeypatch.setattr(cost_source, "measure", measure)


def counting_measure(monkeypatch) -> list:
    """Makes ``measure`` record whether each call had a ``restart`` (a scratch)."""
    calls, real = [], cost_source.measure

    def measure(run, state, restart=None, **kwargs):
        calls.append(restart is not None)
        return real(run, state, restart, **kwargs)

    monkeypatch.setattr(cost_source, "measure", measure)
    return calls


def test_costs_are_measured_only_where_the_output_cannot_depend_on_them():
    widths = dict(widths=(0, 4))
    may = cost_source.may_measure
    assert may(DecodeConfig("block", GREEDY, 8, **widths))
    assert may(DecodeConfig("gumbel", HOT, 8, **widths))
    assert may(DecodeConfig("block", GREEDY, 8, **widths, width_policy=W.Goodput(margin=1.0)))
    assert not may(DecodeConfig("block", HOT, 8, **widths))
    assert not may(DecodeConfig("specinfer", HOT, 8, **widths))
    assert not may(DecodeConfig("block", GREEDY, 8, **widths, width_costs=(1.0, 2.0)))
    assert not may(DecodeConfig("block", GREEDY, 8))  # no widths: no policy
    for policy in ("random", "fixed", W.Fixed(0)):  # they read no costs
        cfg = DecodeConfig("block", GREEDY, 8, **widths, width_policy=policy)
        assert not cost_source.reads_costs(cfg) and not may(cfg)
    assert cost_source.reads_costs(DecodeConfig("block", HOT, 8, **widths))


def test_given_costs_are_the_costs_and_nothing_is_measured(models, autoregressive, monkeypatch):  # noqa: F811
    target, _ = models
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3), width_costs=(1.0, 1.7))
    run = fresh_run(target, drafter_of(models), cfg)
    np.testing.assert_array_equal(run.costs, np.asarray([1.0, 1.7], np.float32))
    assert run.measured
    never_measure(monkeypatch)
    out = generate(target, PROMPTS, cfg, drafter_of(models))
    assert out.metrics.calibration_seconds == 0.0 and run.programs.key not in PROGRAMS.costs
    assert out.tokens == autoregressive


@pytest.mark.parametrize("policy", ["auto", "random"])
def test_at_temperature_one_a_sample_repeats_whatever_the_timing(models, policy, monkeypatch):  # noqa: F811
    """At T = 1 the block verifier spends randomness differently at each width, so the costs
    read no clock: the controller weighs ``guess_costs`` (never measured: no time spent, no
    entry for the program), the random policy none. A seed then gives one sample and one
    sequence of widths, also when every step looks 50 times slower (as on a loaded machine)."""
    target, _ = models
    cfg = DecodeConfig("block", HOT, 12, widths=(0, 3), width_policy=policy)
    drafter = drafter_of(models, HOT)
    run = fresh_run(target, drafter, cfg)
    np.testing.assert_allclose(run.costs, W.guess_costs((0, 3), 1))
    assert run.measured
    state = run.start()
    assert run.calibrate(state) is state  # nothing to measure
    never_measure(monkeypatch)
    first = generate(target, PROMPTS, cfg, drafter, seed=6)
    assert first.metrics.calibration_seconds == 0.0 and run.programs.key not in PROGRAMS.costs
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: 50.0 * real())
    again = generate(target, PROMPTS, cfg, drafter, seed=6)
    assert again.tokens == first.tokens
    assert again.metrics.width_steps == first.metrics.width_steps
    if policy == "random":
        assert all(n > 0 for n in first.metrics.width_steps.values())


def test_at_temperature_zero_the_costs_are_measured_once_per_program_before_the_timing(
    models,  # noqa: F811
    autoregressive,  # noqa: F811
    monkeypatch,
):
    """Thirty tokens are too few for the measurement's forced steps (5 rounds of 2 x (1 + 8)
    steps): ``generate`` measures on a scratch prefill of its prompts, refilled as its rows
    finish, before its timing starts, and reports the time apart (``calibration_seconds``);
    the next call of the program measures nothing. The costs are width 0's 1 and at least 1
    for the drafting width, and the tokens are the greedy ones."""
    target, _ = models
    run = fresh_run(target, drafter_of(models), MEASURED)
    assert not run.measured
    calls = counting_measure(monkeypatch)
    first = generate(target, PROMPTS, MEASURED, drafter_of(models))
    assert calls == [True]  # once, on a scratch
    assert first.metrics.calibration_seconds > 0.0 and run.measured
    costs = PROGRAMS.costs[run.programs.key]
    assert costs.dtype == np.float32 and costs.shape == (2,)
    assert costs[0] == 1.0 and costs[1] >= 1.0, costs
    np.testing.assert_array_equal(run.costs, costs)
    assert first.tokens == autoregressive
    again = generate(target, PROMPTS, MEASURED, drafter_of(models))
    assert calls == [True] and again.metrics.calibration_seconds == 0.0
    assert again.tokens == first.tokens


def test_a_short_generation_at_temperature_zero_also_measures_its_costs_once(models):  # noqa: F811
    """One row of 14 greedy tokens: a drafting width measured after width 0's calls finds the
    rows nearly done, its long call cut to one step. The measurement still completes its rounds
    on refilled scratches (it used to return none: nothing stored, and every later generation
    of the program measured again)."""
    target, _ = models
    cfg = DecodeConfig("block", GREEDY, 14, widths=(0, 3))
    run = fresh_run(target, drafter_of(models), cfg, PROMPTS[:1])
    first = generate(target, PROMPTS[:1], cfg, drafter_of(models))
    assert first.metrics.calibration_seconds > 0.0 and run.programs.key in PROGRAMS.costs
    again = generate(target, PROMPTS[:1], cfg, drafter_of(models))
    assert again.metrics.calibration_seconds == 0.0


def test_gumbel_at_temperature_one_measures_its_costs_and_keeps_the_autoregressive_sample(
    models,  # noqa: F811
):
    """With ``gumbel`` every width emits the autoregressive sample of the seed, so a clock may
    choose the widths: the costs are measured, and the sample is still ``drafter=none``'s."""
    target, _ = models
    cfg = DecodeConfig("gumbel", HOT, 12, widths=(0, 3))
    drafter = drafter_of(models, HOT)
    run = fresh_run(target, drafter, cfg)
    out = generate(target, PROMPTS, cfg, drafter, seed=4)
    assert out.metrics.calibration_seconds > 0.0 and run.programs.key in PROGRAMS.costs
    baseline = generate(target, PROMPTS, DecodeConfig("autoregressive", HOT, 12), seed=4)
    assert out.tokens == baseline.tokens


def test_measure_refills_a_scratch_and_stops_with_live_rows(models, autoregressive):  # noqa: F811
    """On a scratch (``restart`` given) the rounds go on over refills and give a cost per
    width; on live rows (a batch job's slots) the measurement stops once every row is done,
    and its forced steps leave the greedy tokens."""
    target, _ = models
    run = fresh_run(target, drafter_of(models), MEASURED)
    refills = []

    def restart():
        refills.append(1)
        return run.start()

    costs, _ = cost_source.measure(run, run.start(), restart=restart, rounds=2)
    assert refills  # 2 x 2 forced calls of 1 and 9 or more steps: over 30 tokens per row
    assert costs.shape == (2,) and costs[0] == 1.0 and costs[1] >= 1.0, costs
    assert run.programs.key not in PROGRAMS.costs  # (measure only measures)
    costs, state = cost_source.measure(run, run.start())
    assert bool(np.all(state.done))
    assert outputs(state, len(PROMPTS)) == autoregressive
    assert costs is None or (costs[0] == 1.0 and costs[1] >= 1.0), costs


def test_calibrate_measures_live_rows_once_per_program(models, monkeypatch):  # noqa: F811
    """``Run.calibrate`` (a batch job's) measures on the rows it is given, without refills,
    keeps what it measured for the program and counts the time; once kept, it hands the state
    back untouched. A measurement that completed no round keeps nothing: the next call
    measures again."""
    target, _ = models
    run = fresh_run(target, drafter_of(models), MEASURED)
    results, calls = [None, np.asarray([1.0, 1.25], np.float32)], []

    def measure(run_, state, restart=None, **kwargs):
        calls.append(restart)
        return results[len(calls) - 1], state

    monkeypatch.setattr(cost_source, "measure", measure)
    state = run.start()
    run.calibrate(state)
    assert calls == [None] and not run.measured and run.programs.key not in PROGRAMS.costs
    run.calibrate(state)
    assert calls == [None, None] and run.measured and run.calibration_seconds > 0.0
    np.testing.assert_array_equal(run.costs, results[1])
    assert run.calibrate(state) is state and len(calls) == 2


def test_a_costs_file_keeps_one_entry_per_pair_hardware_batch_and_widths(tmp_path):
    path = str(tmp_path / "costs.json")
    with pytest.raises(ValueError, match=r"python -m specjax\.calibrate"):
        cost_source.lookup(path, "pair A", 4, (0, 4))  # no file yet
    entry = cost_source.record(path, "pair A", 4, (0, 4), np.asarray([1.0, 1.83456]))
    assert entry["costs"] == [1.0, 1.8346] and entry["hardware"] == cost_source.hardware()
    assert (entry["pair"], entry["batch"], entry["widths"]) == ("pair A", 4, [0, 4])
    assert cost_source.lookup(path, "pair A", 4, (0, 4)) == (1.0, 1.8346)
    cost_source.record(path, "pair A", 8, (0, 4), [1.0, 2.5])
    cost_source.record(path, "pair B", 4, (0, 4), [1.0, 3.0])
    cost_source.record(path, "pair A", 4, (0, 4), [1.0, 1.5])  # replaces its entry
    with open(path) as f:
        data = json.load(f)
    assert data["format"] == cost_source.FORMAT and len(data["entries"]) == 3
    assert cost_source.lookup(path, "pair A", 4, (0, 4)) == (1.0, 1.5)
    assert cost_source.lookup(path, "pair A", 8, (0, 4)) == (1.0, 2.5)
    assert cost_source.lookup(path, "pair B", 4, (0, 4)) == (1.0, 3.0)
    assert sorted(os.listdir(tmp_path)) == ["costs.json"]  # (written atomically)
    for key in [("pair A", 16, (0, 4)), ("pair A", 4, (0, 2, 4)), ("pair C", 4, (0, 4))]:
        with pytest.raises(ValueError, match=r"no width costs for .* python -m specjax\.calibrate"):
            cost_source.lookup(path, *key)
    data["entries"][0]["hardware"] = "another machine x8"  # measured elsewhere: not these costs
    with open(path, "w") as f:
        json.dump(data, f)
    with pytest.raises(ValueError, match="no width costs"):
        cost_source.lookup(path, "pair A", 8, (0, 4))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something else", "entries": []}))
    with pytest.raises(ValueError, match="is not a specjax costs file"):
        cost_source.lookup(str(other), "pair A", 4, (0, 4))
    with pytest.raises(ValueError, match="is not a specjax costs file"):
        cost_source.record(str(other), "pair A", 4, (0, 4), [1.0, 2.0])


def test_a_file_that_is_no_costs_file_is_one_clear_error(tmp_path):
    """A JSON list, an entry missing a key, and text that is not JSON: each a ValueError (one
    error line from the CLI), never a traceback."""
    cases = {
        "list.json": "[]",
        "entry.json": json.dumps({"format": cost_source.FORMAT, "entries": [{"pair": "A"}]}),
        "text.json": "not json",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match="is not"):
            cost_source.lookup(str(path), "pair A", 4, (0, 4))


def shakespeare(tmp_path, **overrides):
    """The committed Shakespeare config, greedy, 16 tokens, with costs in ``tmp_path``."""
    cfg = config_files.load_config(ROOT / "configs" / "shakespeare.py")
    cfg.max_new_tokens, cfg.temperature = 16, 0.0
    cfg.width_costs = str(tmp_path / "costs.json")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def test_calibrate_writes_the_costs_a_decode_with_the_same_flags_reads(tmp_path, monkeypatch):
    """``python -m specjax.calibrate`` measures the config's widths into the file; a decode with
    the same flags takes its costs from there and measures nothing (at T = 0 it would measure
    without them)."""
    monkeypatch.chdir(ROOT)
    cfg = shakespeare(tmp_path)
    text = io.StringIO()
    entry = calibrate.run(cfg, out=text)
    assert entry["pair"] == width_keys.pair_name(cfg) and entry["batch"] == 1
    assert entry["widths"] == [0, 4] and entry["costs"][0] == 1.0 and entry["costs"][1] >= 1.0
    assert text.getvalue().startswith(f"{cfg.width_costs}: {entry['pair']}")
    assert width_keys.width_costs(cfg) == tuple(entry["costs"])
    record = runner.run(cfg, out=io.StringIO())
    assert record["calibration_seconds"] == 0.0
    assert sum(record["width_steps"].values()) == record["target_forwards"]


def test_calibrate_and_decode_refuse_a_costs_file_they_cannot_use(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    for costs in ("", "1,1.8"):  # calibrate writes a file
        with pytest.raises(ConfigError, match=r"set --config\.width_costs=<name>\.json"):
            calibrate.run(shakespeare(tmp_path, width_costs=costs), out=io.StringIO())
    with pytest.raises(ConfigError, match="calibrate measures the widths a step chooses among"):
        calibrate.run(shakespeare(tmp_path, widths="fixed"), out=io.StringIO())
    # A decode whose file holds no entry for its flags names the command that measures them.
    cfg = shakespeare(tmp_path)
    cost_source.record(cfg.width_costs, "another pair", 1, (0, 4), [1.0, 2.0])
    with pytest.raises(ConfigError, match=r"width_costs: .* python -m specjax\.calibrate"):
        runner.run(cfg, out=io.StringIO())
    with pytest.raises(ConfigError, match="widths=fixed has none"):
        runner.run(shakespeare(tmp_path, widths="fixed"), out=io.StringIO())
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(ConfigError, match="is not a specjax costs file"):
        runner.run(shakespeare(tmp_path, width_costs=str(other)), out=io.StringIO())
