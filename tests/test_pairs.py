"""One loader for the shipped model pairs (``specjax.models.load_pair``): the committed Shakespeare
pair in the default tier (small), SmolLM2's three pairs in the slow tier."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specjax.models import ShippedPair, load_pair
from specjax.models.pairs import NAMES, ROOT


def leaves(model) -> list:
    return jax.tree.leaves(model.state)


@pytest.fixture(scope="module")
def shakespeare() -> ShippedPair:
    return load_pair("shakespeare")


def test_the_shakespeare_pair(shakespeare):
    pair = shakespeare
    assert pair.name == "shakespeare"
    target, draft = pair.target.config, pair.draft.config
    assert (target.name, target.vocab_size, target.dim, target.num_layers) == (
        "shakespeare-target", 256, 256, 4
    )  # fmt: skip
    assert (draft.name, draft.vocab_size, draft.dim, draft.num_layers) == (
        "shakespeare-draft", 256, 128, 2
    )  # fmt: skip
    assert target.param_dtype == draft.param_dtype == "float32"
    assert pair.target_module.config == target  # the module behind the PureModel, not a copy
    for a, b in zip(leaves(pair.target), jax.tree.leaves(pair.target_module), strict=True):
        assert a is b or np.array_equal(a, b)
    text = "ROMEO:\nO, she doth teach the torches to burn bright!"
    assert pair.tokenizer.decode(pair.tokenizer.encode(text)) == text


def test_a_relative_source_and_a_dtype(shakespeare, monkeypatch, tmp_path):
    """A relative directory not under the working directory is read from the repository root;
    ``dtype`` casts both models."""
    monkeypatch.chdir(tmp_path)
    pair = load_pair("shakespeare", source="checkpoints/shakespeare", dtype="bfloat16")
    assert pair.target.config.param_dtype == pair.draft.config.param_dtype == "bfloat16"
    assert pair.target.config.name == shakespeare.target.config.name
    with pytest.raises(FileNotFoundError, match="not found"):
        load_pair("shakespeare", source=tmp_path / "absent")


def test_an_unknown_name_names_the_shipped_pairs():
    with pytest.raises(ValueError, match="unknown model pair 'llama'") as err:
        load_pair("llama")
    assert all(name in str(err.value) for name in NAMES)
    assert NAMES == ("shakespeare", "smollm2", "smollm2_self", "smollm2_eagle")


def test_a_self_draft_and_a_shared_target(shakespeare):
    """The SmolLM2 names' code paths on a tiny random source: the self-draft shares the
    target's weights; ``reuse`` shares a loaded target; bad layers or reuse are errors."""
    base = load_pair("smollm2", source="random:0")
    assert base.draft is None and base.target.config.num_layers == 2
    pair = load_pair("smollm2_self", draft_layers=1, reuse=base)
    assert pair.target is base.target and pair.tokenizer is base.tokenizer
    assert pair.draft.config.num_layers == 1
    embed = base.target_module.embed[...]
    assert np.array_equal(pair.draft.module.embed[...], embed)  # weights shared
    with pytest.raises(ValueError, match=r"self-draft keeps 1 \.\. 1"):
        load_pair("smollm2_self", draft_layers=2, reuse=base)
    with pytest.raises(ValueError, match="reuse"):
        load_pair("smollm2_self", reuse=shakespeare)
    with pytest.raises(ValueError, match="reuse"):
        load_pair("shakespeare", reuse=base)


@pytest.mark.slow
def test_the_smollm2_pairs(request):
    """SmolLM2 once (the conftest fixture's cached GGUF), then its self-draft and its committed
    feature head sharing that target."""
    from specjax.models import fetch

    path = fetch.fetch_smollm2(request.config.cache.mkdir("specjax-smollm2"), verify=True)
    smol = load_pair("smollm2", source=path)
    assert smol.draft is None
    assert (smol.target.config.vocab_size, smol.target.config.num_layers) == (49152, 30)
    assert smol.tokenizer.decode(smol.tokenizer.encode("def f(x):")) == "def f(x):"
    self_draft = load_pair("smollm2_self", reuse=smol)
    assert self_draft.draft.config.num_layers == 8  # configs/smollm2.py's draft_layers
    eagle = load_pair("smollm2_eagle", reuse=smol)
    head = eagle.draft.config
    assert tuple(head.feature_layers) == (1, 14, 26) and head.draft_vocab == 8192
    assert (ROOT / "checkpoints" / "smollm2_eagle" / "params.npz").is_file()
