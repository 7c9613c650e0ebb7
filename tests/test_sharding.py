"""Sharded decoding: 8 emulated CPU devices give the single-device tokens with parameters and
caches really split; two processes over a 2 x 4 global mesh (jax.distributed, gloo on loopback)
give the single-process tokens; bad meshes fail with one clear error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specjax import sharding

ROOT = Path(__file__).resolve().parents[1]
EIGHT = dict(
    os.environ,  # the session's XLA_FLAGS too (tests/conftest.py), 8 devices added
    XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip(),
    JAX_PLATFORMS="cpu",
)


def run_check(which: str):
    out = subprocess.run(
        [sys.executable, "-m", "tests.sharded_check", which],
        cwd=ROOT,
        env=EIGHT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0 and f"{which}-ok" in out.stdout, out.stderr[-3000:]


def test_params_and_caches_are_sharded():
    run_check("shapes")


def test_sharded_greedy_output_equals_single_device():
    run_check("greedy-quick")  # GBV (K = 3, a tensor-parallel draft); the rest in the slow tier


@pytest.mark.slow
def test_sharded_greedy_output_equals_single_device_for_every_verifier():
    run_check("greedy")


@pytest.mark.slow
def test_sharded_sampled_output_equals_single_device_with_the_same_seed():
    run_check("sampled")


@pytest.mark.slow
def test_sharded_feature_drafter_gives_the_single_device_tokens():
    run_check("feature")


@pytest.mark.slow
def test_sharded_adaptive_widths_give_the_single_device_tokens():
    run_check("widths")  # random widths at T = 1 (same seed, same draws) and the controller


@pytest.mark.slow
def test_draft_on_its_own_devices_gives_the_same_tokens():
    run_check("submesh")


@pytest.mark.slow
def test_checkpoints_and_gguf_load_straight_onto_the_mesh():
    run_check("loading")


@pytest.mark.slow
def test_verification_does_not_gather_the_vocabulary():
    run_check("nogather")


@pytest.mark.slow
def test_bad_meshes_name_both_numbers():
    run_check("errors")


def test_spec_follows_the_rules_table():
    assert sharding.spec(("embed", "heads", "head_dim")) == sharding.P(None, "model", None)
    assert sharding.spec(("vocab", "embed")) == sharding.P("model", None)
    assert sharding.spec(None) == sharding.P()
    assert sharding.parse_mesh_shape("2,4") == (2, 4) == sharding.parse_mesh_shape("2x4")
    with pytest.raises(ValueError, match="integers"):
        sharding.parse_mesh_shape("two,4")


def cli(*args, env=None, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "specjax.decode", "--config", "configs/tiny_random.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


COMMON = ("--config.temperature=0", "--config.batch_size=4", "--config.max_new_tokens=12")


def job_file(tmp_path) -> str:
    """Six prompts of different lengths for a batch job through 4 slots (rows are refilled)."""
    path = tmp_path / "prompts.jsonl"
    texts = ["Hello", "To be", "A much longer prompt than the others", "x", "ROMEO:", "Why?"]
    path.write_text("".join(json.dumps({"id": i, "prompt": t}) + "\n" for i, t in enumerate(texts)))
    return f"--config.input={path}"


@pytest.mark.slow
def test_cli_mesh_matches_single_device(tmp_path):
    single, sharded = tmp_path / "single.json", tmp_path / "sharded.json"
    out = cli(*COMMON, f"--config.metrics_json={single}")
    assert out.returncode == 0, out.stderr[-2000:]
    out = cli(
        *COMMON,
        "--config.mesh_shape=2,4",
        "--config.num_cpu_devices=8",
        "--config.draft_placement=sharded",
        f"--config.metrics_json={sharded}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(sharded.read_text())["tokens"] == json.loads(single.read_text())["tokens"]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (for a run's coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env() -> dict:
    """The environment of one process of a multi-process CPU run (its devices come from
    ``num_cpu_devices``, not from this test session's ``XLA_FLAGS``)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    return env


@pytest.mark.slow
def test_cli_batch_job_on_a_mesh_matches_single_device(tmp_path):
    """Continuous batching on a 2 x 4 mesh: the same records as on one device, at T = 0 and
    at T = 1 (a prompt's draws depend only on the seed and its id)."""
    for temperature in ("0", "1"):
        common = (*COMMON, job_file(tmp_path), f"--config.temperature={temperature}")
        single, sharded = tmp_path / f"single{temperature}", tmp_path / f"sharded{temperature}"
        out = cli(*common, f"--config.results={single}")
        assert out.returncode == 0, out.stderr[-2000:]
        out = cli(
            *common,
            "--config.mesh_shape=2,4",
            "--config.num_cpu_devices=8",
            f"--config.results={sharded}",
        )
        assert out.returncode == 0, out.stderr[-2000:]
        records = lambda p: {r["id"]: r["token_ids"] for r in map(json.loads, p.open())}
        assert records(sharded) == records(single) and len(records(single)) == 6


@pytest.mark.slow
def test_two_processes_over_a_global_mesh_match_one_process(tmp_path):
    """Every process runs the same batch job (the same refills); process 0 alone writes."""
    common = (*COMMON, job_file(tmp_path))
    single = tmp_path / "single.json"
    out = cli(*common, f"--config.metrics_json={single}")
    assert out.returncode == 0, out.stderr[-2000:]
    port = free_port()
    env = process_env()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specjax.decode",
                "--config",
                "configs/tiny_random.py",
                *common,
                "--config.mesh_shape=2,4",
                "--config.num_cpu_devices=4",
                f"--config.coordinator_address=127.0.0.1:{port}",
                "--config.num_processes=2",
                f"--config.process_id={i}",
                f"--config.metrics_json={tmp_path / f'p{i}.json'}",
                f"--config.results={tmp_path / f'r{i}.jsonl'}",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        results = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, stderr) in zip(procs, results, strict=True):
        assert p.returncode == 0, stderr[-3000:]
    # Only process 0 prints (gloo's own connection lines aside).
    assert "block efficiency" in results[0][0] and "batch job: 6 prompts" in results[0][0]
    assert "block efficiency" not in results[1][0] and "batch job" not in results[1][0]
    assert not (tmp_path / "p1.json").exists()  # only process 0 writes
    assert not (tmp_path / "r1.jsonl").exists()
    assert len((tmp_path / "r0.jsonl").read_text().splitlines()) == 6
    got = json.loads((tmp_path / "p0.json").read_text())["tokens"]
    assert got == json.loads(single.read_text())["tokens"]
