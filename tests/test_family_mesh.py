"""Every family on a 2 x 2 emulated mesh (data x model) equals one device: weights read slice by
slice onto their shardings, transformers' greedy tokens autoregressively and with a
tensor-parallel self-draft tree (``tests/family_mesh_check.py``, in a process of its own with 4
CPU devices). Gemma 3's fixture has one KV head, replicated over the model axis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.family_fixtures import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
FOUR = dict(
    os.environ,
    XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip(),
    JAX_PLATFORMS="cpu",
)
QUICK = ("qwen2", "gemma3_text")  # biases and a window; one KV head on two devices


def run(families):
    out = subprocess.run(
        [sys.executable, "-m", "tests.family_mesh_check", *families],
        cwd=ROOT,
        env=FOUR,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    for f in families:
        assert out.returncode == 0 and f"{f}-ok" in out.stdout, out.stderr[-3000:]


def test_families_on_a_two_by_two_mesh_equal_one_device():
    run(QUICK)


@pytest.mark.slow
def test_every_family_on_a_two_by_two_mesh_equals_one_device():
    run([f for f in FAMILIES if f not in QUICK])
