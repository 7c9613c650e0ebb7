"""A seed fixes the output: the CLI run in separate processes with one seed gives the same tokens
at temperature 1 with the default (adaptive) widths, for the README's main job (Shakespeare,
block verification) and, in the slow tier, the SmolLM2 head config; in one process, what ran
before does not change a generation either."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from specjax.decode import DecodeConfig, generate
from specjax.sampling import SamplingParams
from specjax.testing import pair


def _cli_tokens(tmp_path, config: str, *flags: str, runs: int = 3) -> list[dict]:
    """The metrics records of ``runs`` processes of ``python -m specjax.decode`` (two at a time)."""

    def one(i: int) -> dict:
        out = tmp_path / f"run{i}.json"
        cmd = [sys.executable, "-m", "specjax.decode", f"--config={config}"]
        cmd += [*flags, f"--config.metrics_json={out}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(out.read_text())

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, range(runs)))


def test_the_readme_main_job_repeats_its_sample_across_processes(tmp_path):
    records = _cli_tokens(tmp_path, "configs/shakespeare.py", "--config.max_new_tokens=60")
    first = records[0]
    assert first["width_steps"]["4"] > 0, first["width_steps"]  # it drafts
    for other in records[1:]:
        assert other["tokens"] == first["tokens"]
        assert other["width_steps"] == first["width_steps"]  # widths from no clock


@pytest.mark.slow
def test_the_smollm2_head_config_repeats_its_sample_across_processes(tmp_path):
    flags = ("--config.temperature=1", "--config.max_new_tokens=48")
    records = _cli_tokens(tmp_path, "configs/smollm2_eagle.py", *flags)
    for other in records[1:]:
        assert other["tokens"] == records[0]["tokens"]


def test_what_ran_before_in_the_process_does_not_change_a_sample():
    target, draft = pair(sigma=0.3)
    from specjax.drafters import ModelDrafter

    sampling = SamplingParams(temperature=1.0)
    drafter = ModelDrafter(draft, draft_len=3, sampling=sampling)
    config = DecodeConfig("block", sampling, 24, widths=(0, 3))
    prompts = [[1, 2, 3], [4, 5]]
    first = generate(target, prompts, config, drafter, seed=7).tokens
    for other_seed in (1, 2):  # other generations of the same programs in between
        generate(target, prompts, config, drafter, seed=other_seed)
    greedy = DecodeConfig("block", SamplingParams(temperature=0.0), 24, widths=(0, 3))
    generate(
        target, prompts, greedy, ModelDrafter(draft, draft_len=3, sampling=greedy.sampling)
    )  # measured costs
    assert generate(target, prompts, config, drafter, seed=7).tokens == first
