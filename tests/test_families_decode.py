"""Greedy speculative decoding == autoregressive decoding, token for token, for every family:
the n-gram drafter, the self-draft and a draft model of the same family (loaded from its own
Hugging Face directory), each as one chain and as a tree of three paths. The reference is
transformers' own greedy continuation (``reference.json``), which specjax's autoregressive
decoding equals (``tests/test_families.py``); prompts and continuations are longer than the
sliding windows. Each run must also accept drafts, so that the equality is not trivial.

The default tier runs one drafter and shape per family, every drafter and shape at least once;
the slow tier runs the whole matrix."""

from __future__ import annotations

import shutil

import pytest

from specjax.decode import DecodeConfig, generate
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.models import load_model, load_pretrained, truncated
from specjax.models.checkpoint import to_params
from specjax.models.safetensors_loader import save_safetensors
from specjax.sampling import SamplingParams
from tests.family_fixtures import FAMILIES, directory, reference

GREEDY = SamplingParams(temperature=0.0)
DEFAULT = {  # family -> (drafter, paths) run in the default tier
    "llama": ("ngram", 1),
    "gemma3_text": ("ngram", 3),
    "gemma2": ("self", 1),
    "qwen3": ("self", 3),
    "mistral": ("pair", 1),
    "qwen2": ("pair", 3),
}
CASES = [
    pytest.param(f, d, k, marks=() if DEFAULT[f] == (d, k) else pytest.mark.slow, id=f"{f}-{d}-{k}")
    for f in FAMILIES
    for d in ("ngram", "self", "pair")
    for k in (1, 3)
]


def draft_directory(family: str, where):
    """A draft of the same family in its own HF directory: the target's first layer, saved
    with specjax's writer (config.json in the family's own terms) and the target's tokenizer."""
    target = load_pretrained(directory(family))
    draft = truncated(target.model, 1)
    save_safetensors(where, to_params(draft), draft.config)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(directory(family) / name, where / name)
    return where


def drafter_of(kind: str, paths: int, target, family: str, tmp_path):
    shape = dict(num_paths=paths, draft_len=3)
    if kind == "ngram":
        return NgramDrafter(target.config.vocab_size, **shape, max_ngram=2)
    if kind == "self":
        layers = min(2, target.config.num_layers - 1)
        return ModelDrafter(truncated(target, layers), **shape, sampling=GREEDY)
    draft, _ = load_model(str(draft_directory(family, tmp_path / "draft")), role="draft")
    assert draft.config.family == target.config.family
    return ModelDrafter(draft, **shape, sampling=GREEDY)


@pytest.mark.parametrize("family, kind, paths", CASES)
def test_greedy_speculative_equals_transformers_greedy(family, kind, paths, tmp_path):
    ref = reference(family)
    target = load_pretrained(directory(family)).model
    drafter = drafter_of(kind, paths, target, family, tmp_path)
    verifier = "greedy" if paths == 1 else "specinfer"
    config = DecodeConfig(verifier, GREEDY, max_new_tokens=32)
    out = generate(target, ref["prompts"], config, drafter=drafter)
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]
    assert out.metrics.accepted_tokens > 0, "no draft token was accepted: the check is trivial"


def test_continuous_batching_with_a_sliding_window_family():
    """A batch job's loop (rows refilled between decode chunks: prompts written over old
    caches) on Gemma 3's five sliding layers: each request gets transformers' greedy tokens."""
    from specjax.decode.batching import ContinuousBatch, Request

    family = "gemma3_text"
    ref = reference(family)
    target = load_pretrained(directory(family)).model
    drafter = NgramDrafter(target.config.vocab_size, num_paths=1, draft_len=3, max_ngram=2)
    config = DecodeConfig("greedy", GREEDY, max_new_tokens=32)
    engine = ContinuousBatch(target, drafter, config, slots=2)
    done = {c.id: c for c in engine.run([Request(i, p) for i, p in enumerate(ref["prompts"])])}
    assert [done[i].token_ids for i in range(3)] == ref["greedy"]


def test_ssd_with_a_sliding_window_family():
    """Speculative speculative decoding (its branches grown level by level over a speculation
    cache) with Mistral's every-layer window, drafted by the target's first layer."""
    from specjax.decode.ssd import SSDConfig, SSDDrafter

    family = "mistral"
    ref = reference(family)
    target = load_pretrained(directory(family)).model
    ssd = SSDConfig(fan_out=(2, 1, 1, 2))
    drafter = SSDDrafter(truncated(target, 1), ssd=ssd, sampling=GREEDY)
    out = generate(target, ref["prompts"], DecodeConfig("greedy", GREEDY, 32), drafter)
    assert out.ssd is not None
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]
