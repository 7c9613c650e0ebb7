"""specjax's heads written in the published layouts
(:func:`specjax.models.eagle_formats.export_head`) and read back: bitwise (``fc`` with the
feature scale folded in), drafting the same tokens; a shifted head only with ``drop_shift``, a
scale behind a feature norm never; the exported config as vLLM and SGLang read it."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.decode import DecodeConfig, generate
from specjax.drafters.feature import FeatureDrafter
from specjax.models.eagle import Frozen
from specjax.models.eagle_formats import detect_format, export_head, load_head
from specjax.sampling import SamplingParams
from specjax.train import eagle
from tests.eagle_harness import CASES, make_head, propose, targets  # noqa: F401
from tests.family_fixtures import reference

GREEDY = SamplingParams(temperature=0.0)


def leaves(head) -> dict:
    return {
        jax.tree_util.keystr(k): np.asarray(v)
        for k, v in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(head)))[0]
    }


@pytest.fixture(scope="module")
def trained_like(targets):  # noqa: F811
    """A specjax head as training makes it: ``new_head`` on the Qwen3 fixture with a
    per-dimension feature scale (no shift), and its drafts on the fixture's prompts."""
    target = targets["qwen3"]
    c = target.config
    rng = np.random.default_rng(0)
    d2t = np.sort(rng.choice(c.vocab_size, 96, replace=False))
    recipe = eagle.HeadRecipe("eagle3")
    scale = np.exp(rng.normal(size=(len(recipe.feature_layers(c.num_layers)), c.dim)))
    head = eagle.new_head(target, recipe, d2t, scale=scale.astype(np.float32), seed=1)
    return head, drafts(head, target)


def drafts(head, target) -> tuple:
    """Chains of 4 drawn at temperature 1 from every reference prompt (tokens and their laws),
    and a greedy decode's tokens and accepted-length histogram."""
    prompts = reference("qwen3")["prompts"]
    sampled = FeatureDrafter(head, draft_len=4, sampling=SamplingParams(temperature=1.0))
    draft = propose(sampled, target, prompts, seed=7)
    drafter = FeatureDrafter(head, num_paths=1, draft_len=4, sampling=GREEDY)
    out = generate(target, prompts, DecodeConfig("greedy", GREEDY, 16), drafter)
    tokens = [list(map(int, t)) for t in out.tokens]
    return (
        np.asarray(draft.tokens),
        np.asarray(draft.probs),
        tokens,
        out.metrics.accepted_length_histogram,
    )


@pytest.mark.parametrize("kind", ["eagle", "speculators"])
def test_exported_head_loads_back_and_drafts_the_same(targets, trained_like, tmp_path, kind):  # noqa: F811
    target = targets["qwen3"]
    head, want = trained_like
    scale = np.asarray(head.feature_scale[...])
    assert np.ptp(scale) > 0.5 and not np.any(np.asarray(head.feature_shift[...]))
    export_head(tmp_path / kind, head, kind)
    assert detect_format(tmp_path / kind) == kind
    back = load_head(tmp_path / kind, target)
    assert back.config == head.config
    ours, theirs = leaves(head), leaves(back)
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        if name == "['fc']":  # the scale folded into fc's rows, in fp32
            folded = np.asarray(head.fc[...]) / scale.reshape(-1, 1).astype(np.float32)
            assert np.array_equal(theirs[name], folded)
        elif name == "['feature_scale']":
            assert np.all(theirs[name] == 1.0)
        else:
            assert np.array_equal(theirs[name], value), name
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 5, *scale.shape)) * 5, jnp.float32)
    np.testing.assert_allclose(back.fuse(x), head.fuse(x), rtol=1e-5, atol=1e-5)
    tokens, probs, decoded, histogram = drafts(back, target)
    assert np.array_equal(tokens, want[0]) and decoded == want[2] and histogram == want[3]
    np.testing.assert_allclose(probs, want[1], atol=1e-6)


def test_a_shifted_head_exports_only_with_drop_shift(trained_like, tmp_path, targets):  # noqa: F811
    head, _ = trained_like
    shifted = nnx.clone(head)
    shifted.feature_shift = Frozen(jnp.full(head.feature_shift[...].shape, 0.25))
    with pytest.raises(ValueError, match="shift"):
        export_head(tmp_path / "a", shifted, "speculators")
    export_head(tmp_path / "b", shifted, "eagle", drop_shift=True)
    back = load_head(tmp_path / "b", targets["qwen3"])
    assert not np.any(np.asarray(back.feature_shift[...]))
    with pytest.raises(ValueError, match="layout"):
        export_head(tmp_path / "c", head, "sglang")


def test_a_scale_behind_a_feature_norm_is_refused(targets, tmp_path):  # noqa: F811
    """A per-dimension scale does not fold into fc behind fc_norm / norm_before_fc."""
    target = targets["qwen3"]
    for switch in ("fc_norm", "norm_before_fc"):
        _, _, path = make_head(tmp_path, target, "eagle", name=switch, **{switch: True})
        head = load_head(path, target)
        export_head(tmp_path / f"{switch}-ok", head, "speculators")  # scale 1: fine
        head.feature_scale = Frozen(jnp.full(head.feature_scale[...].shape, 2.0))
        with pytest.raises(ValueError, match="cannot fold"):
            export_head(tmp_path / f"{switch}-bad", head, "speculators")


def test_an_eagle_export_has_no_null_target_hidden_size(trained_like, tmp_path):
    """vLLM's and SGLang's Eagle-3 models build fc from target_hidden_size * 3 whenever the key
    is there: a null would be a TypeError."""
    head, _ = trained_like
    export_head(tmp_path / "eagle", head, "eagle")
    cfg = json.loads((tmp_path / "eagle" / "config.json").read_text())
    assert cfg.get("target_hidden_size", head.config.target_dim) is not None


def test_a_loaded_head_reexports_to_the_other_layout_bitwise(targets, tmp_path):  # noqa: F811
    """Every tensor of a random multi-layer head with the switches on survives eagle ->
    specjax -> speculators -> specjax, and the re-exported file holds the same tensors."""
    target = targets["qwen3"]
    kw = CASES["speculators-3.1"][2] | {"layer_ids": [0, 1, 2]}
    _, tensors, path = make_head(tmp_path, target, "eagle", **kw)
    head = load_head(path, target)
    export_head(tmp_path / "spec", head, "speculators")
    back = load_head(tmp_path / "spec", target)
    assert back.config == head.config
    assert all(
        np.array_equal(a, b)
        for a, b in zip(leaves(head).values(), leaves(back).values(), strict=True)
    )
    from safetensors.numpy import load_file

    written = load_file(tmp_path / "spec" / "model.safetensors")
    for name, value in tensors.items():
        theirs = name.replace("midlayer.", "layers.")
        assert np.array_equal(written[theirs], value), name
