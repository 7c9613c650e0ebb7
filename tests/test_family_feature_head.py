"""The feature drafter (an EAGLE-3 head) on Qwen3 and Gemma targets: the law training recomputes
from the last block's features is the target's own (Gemma's ``1 + w`` final norm and final
soft-cap included), a head decodes exactly (greedy == transformers' greedy tokens), and (slow
tier) ``scripts/train_draft_head.py`` trains one for a Gemma 2 target end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import DecodeConfig, generate
from specjax.drafters.feature import FeatureDrafter
from specjax.models import load_pretrained
from specjax.models.decoder import softcap
from specjax.models.eagle import rms
from specjax.models.eagle_formats import detect_format, load_head
from specjax.sampling import SamplingParams
from specjax.train import eagle
from tests.family_fixtures import directory, reference

ROOT = Path(__file__).resolve().parents[1]
GREEDY = SamplingParams(temperature=0.0)


def fresh_head(model, vocab: int = 64):
    d2t = np.arange(0, 2 * vocab, 2)  # every other id: a draft vocabulary W < V
    head = eagle.new_head(model, eagle.HeadRecipe("eagle3", ttt_steps=2), d2t)
    return eagle.attach_target(head, model)


@pytest.mark.parametrize("family", ["gemma2", "qwen3"])
def test_training_recomputes_the_targets_own_law(family):
    model = load_pretrained(directory(family)).model
    head = fresh_head(model)
    prompt = jnp.asarray([reference(family)["prompts"][2]], jnp.int32)
    last = model.config.num_layers - 1
    logits, _, hidden = model(prompt, features=(last,))  # [1, T, V], [1, T, 1, D]
    x = hidden[:, :, 0]
    recomputed = rms(x, model.config.norm_eps, head.target_norm[...]) @ head.target_rows[...].T
    recomputed = softcap(recomputed, head.target_softcap)
    want = np.asarray(logits)[..., np.asarray(head.d2t[...])]
    np.testing.assert_allclose(np.asarray(recomputed), want, atol=2e-4, rtol=0)


def test_a_head_on_a_gemma_target_decodes_exactly():
    """Greedy with a (fresh) head drafting equals transformers' greedy continuation; the
    head's K = 2 paths through the sliding windows."""
    family = "gemma2"
    model = load_pretrained(directory(family)).model
    drafter = FeatureDrafter(fresh_head(model), num_paths=2, draft_len=3, sampling=GREEDY)
    ref = reference(family)
    out = generate(model, ref["prompts"], DecodeConfig("specinfer", GREEDY, 32), drafter)
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]


@pytest.mark.slow
@pytest.mark.parametrize("family, layout", [("gemma2", "specjax"), ("qwen3", "speculators")])
def test_train_draft_head_trains_a_head_for_the_family(family, layout, tmp_path):
    """The one training command at toy sizes on the family's fixture (ShareGPT prompts through
    pip), written in the layout asked for, then its head decoding exactly."""
    command = [
        sys.executable, str(ROOT / "scripts" / "train_draft_head.py"),
        f"--target={directory(family)}",
        "--num_shards=2", "--holdout_shards=1", "--prompts_per_shard=3", "--max_new_tokens=12",
        "--steps=6", "--batch_size=2", "--seq_len=32", "--eval_batches=1", "--draft_vocab=128",
        f"--data={tmp_path / 'data'}", f"--workdir={tmp_path / 'run'}",
        f"--out={tmp_path / 'head'}", f"--format={layout}",
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "head" / "summary.json").read_text())
    assert summary["training"]["steps"] == 6 and summary["heldout"]["tokens"] > 0
    assert detect_format(tmp_path / "head") == layout
    model = load_pretrained(directory(family)).model
    head = load_head(tmp_path / "head", model)
    drafter = FeatureDrafter(head, num_paths=1, draft_len=3, sampling=GREEDY)
    ref = reference(family)
    out = generate(model, ref["prompts"], DecodeConfig("block", GREEDY, 32), drafter)
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]
