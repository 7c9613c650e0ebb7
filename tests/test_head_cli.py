"""Downloaded heads as users run them: ``--config.drafter=eagle --config.draft=DIR`` with a head
in the speculators layout decodes a family fixture exactly (greedy == autoregressive), and
``scripts/convert_head.py`` turns it into the EAGLE layout and back into specjax's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from specjax.models import load_pretrained
from specjax.models.eagle_formats import detect_format, export_head, load_head
from specjax.train import eagle
from tests.family_fixtures import directory

ROOT = Path(__file__).resolve().parents[1]


def downloaded_head(family: str, where: Path) -> Path:
    """A random head for the family's fixture, in the speculators layout, as a user downloads
    one (its per-dimension scale folded into fc)."""
    model = load_pretrained(directory(family)).model
    head = eagle.new_head(model, eagle.HeadRecipe("eagle3"), np.arange(0, 160, 2))
    scale = np.random.default_rng(0).uniform(0.5, 2.0, head.feature_scale.shape)
    head.feature_scale[...] = scale.astype(np.float32)
    verifier = {"name_or_path": str(directory(family)), "architectures": ["Qwen3ForCausalLM"]}
    return export_head(where, head, "speculators", verifier=verifier)


def test_a_speculators_head_decodes_exactly_from_the_cli(tmp_path):
    head = downloaded_head("qwen3", tmp_path / "head")
    out = subprocess.run(
        [
            sys.executable, "-m", "specjax.decode", "--config", "configs/hf.py",
            f"--config.target={directory('qwen3')}", "--config.drafter=eagle",
            f"--config.draft={head}", "--config.widths=fixed", "--config.max_new_tokens=24",
            "--config.compare_autoregressive=True",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "greedy output == autoregressive output: yes" in out.stdout + out.stderr


def test_convert_head_between_layouts(tmp_path):
    src = downloaded_head("qwen3", tmp_path / "speculators")
    for fmt, dst in (("eagle", tmp_path / "eagle"), ("specjax", tmp_path / "specjax")):
        out = subprocess.run(
            [
                sys.executable, "scripts/convert_head.py", f"--src={src}", f"--dst={dst}",
                f"--format={fmt}", f"--target={directory('qwen3')}",
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        assert detect_format(dst) == fmt
    model = load_pretrained(directory("qwen3")).model
    a, b = load_head(src, model), load_head(tmp_path / "eagle", model)
    x = np.random.default_rng(1).normal(size=(1, 3, 3, model.config.dim)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(a.fuse(x)), np.asarray(b.fuse(x)))
    bad = subprocess.run(
        [sys.executable, "scripts/convert_head.py", f"--src={tmp_path}", f"--dst={tmp_path / 'x'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "no config.json" in bad.stderr
