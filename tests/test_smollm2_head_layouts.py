"""The shipped SmolLM2 head in the published layouts (slow tier: SmolLM2's GGUF through pip):
exported to the speculators layout and read back, it decodes the same tokens with the same block
efficiency, and speculators -> specjax -> speculators writes the same tensors bit for bit. A head
standardised with a shift is exported only with ``drop_shift`` (then compared without it)."""

from __future__ import annotations

import numpy as np
import pytest

from specjax.decode import DecodeConfig, generate
from specjax.drafters.feature import FeatureDrafter
from specjax.models import load_pretrained
from specjax.models.eagle_formats import export_head, load_head
from specjax.models.fetch import fetch_smollm2
from specjax.models.pairs import EAGLE_HEAD_DIR
from specjax.models.safetensors_file import SafetensorsFile
from specjax.sampling import SamplingParams
from specjax.train import eagle

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0)
QUESTIONS = [
    "Name three colors and say which one you like best.",
    "Write a haiku about rain on a window.",
    "Explain what a hash table is in two sentences.",
]


def tensors(path) -> dict[str, np.ndarray]:
    f = SafetensorsFile(path / "model.safetensors")
    return {k: f.get(k) for k in f.keys()}


def test_the_shipped_head_round_trips_through_the_speculators_layout(tmp_path):
    pre = load_pretrained(fetch_smollm2())
    head = load_head(EAGLE_HEAD_DIR, pre.model)
    shifted = bool(np.any(np.asarray(head.feature_shift[...])))
    if shifted:
        head = eagle.without_shift(head)
    first = export_head(tmp_path / "a", head, "speculators")
    back = load_head(first, pre.model)
    second = export_head(tmp_path / "b", back, "speculators")
    a, b = tensors(first), tensors(second)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    tok = pre.tokenizer
    prompts = [tok.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    runs = []
    for h in (head, back):
        drafter = FeatureDrafter(h, num_paths=1, draft_len=3, sampling=GREEDY)
        runs.append(generate(pre.model, prompts, DecodeConfig("greedy", GREEDY, 48), drafter))
    assert runs[0].tokens == runs[1].tokens
    assert runs[0].metrics.block_efficiency == pytest.approx(runs[1].metrics.block_efficiency)
    assert runs[0].metrics.block_efficiency > 1.3  # the head drafts: the check is not trivial
