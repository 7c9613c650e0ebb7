"""specjax's speculators export against the speculators package itself (slow tier): random heads
exported by :func:`specjax.models.eagle_formats.export_head` load with
``speculators.models.eagle3.Eagle3DraftModel.from_pretrained`` with no missing or unexpected
keys, and the peer's own training-time-test forward (eager attention, ``ttt_steps=3``: the first
step and two chained ones, teacher-forced) gives specjax's logits (fp32, 1e-4), and the NumPy
reference's (``tests/eagle_reference.py``), on the tiny Qwen3 and Gemma 2 targets.

speculators 0.9.0 pins transformers<=5.19 and torchvision/torchaudio, which clash with the
project's, so it is installed without its dependencies::

    pip install --no-deps speculators==0.9.0 && \\
        pip install pydantic-settings loguru openai datasets hs-connectors

The tests skip (with that command as the reason) where it cannot be imported.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from tests import eagle_reference as ref
from tests.eagle_harness import (
    LINEAR,
    LLAMA3,
    aux_of,
    make_head,
    max_differences,
    specjax_logits,
    tokens_for,
)
from tests.family_fixtures import directory

pytestmark = pytest.mark.slow

INSTALL = (
    "pip install --no-deps speculators==0.9.0 && "
    "pip install pydantic-settings loguru openai datasets hs-connectors"
)
TOL = 1e-4
TTT_STEPS = 3
ARCHITECTURES = {"qwen3": ["Qwen3ForCausalLM"], "gemma2": ["Gemma2ForCausalLM"]}
# speculators' verifier-owned weights: loaded from the verifier, never saved with a head
VERIFIER_OWNED = {"verifier_lm_head.weight", "verifier_norm.weight"}


@pytest.fixture(scope="module")
def peer():
    """The speculators package (imported here, not at collection: the default tier never pays
    for torch), offline (HF_HUB_OFFLINE=1 while this module runs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        try:
            import safetensors.torch
            import torch
            from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
        except ImportError as e:
            pytest.skip(f"speculators is not importable ({e}); install it with: {INSTALL}")
        torch.manual_seed(0)
        yield types.SimpleNamespace(
            torch=torch,
            load_file=safetensors.torch.load_file,
            model=Eagle3DraftModel,
            config=Eagle3SpeculatorConfig,
        )


@pytest.fixture(scope="module")
def targets():
    from specjax.models import load_pretrained

    return {f: load_pretrained(directory(f)).model for f in ("qwen3", "gemma2")}


def load_peer(peer, path):
    """speculators' model of the head at ``path`` with eager attention, and its load report
    ``(missing, unexpected)`` of the file's tensors."""
    config = peer.config.from_pretrained(path)
    config.transformer_layer_config._attn_implementation = "eager"
    model = peer.model.from_pretrained(path, config=config).eval()
    assert model._attn_impl == "eager"
    assert model.layers[0].self_attn.config._attn_implementation == "eager"
    assert model.dtype == peer.torch.float32
    report = model.load_state_dict(peer.load_file(path / "model.safetensors"), strict=False)
    return model, set(report.missing_keys), set(report.unexpected_keys)


def peer_logits(peer, model, aux: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``[J, n - 1, W]``: each training-time-test step's ``lm_head`` output (a forward hook) of
    the peer's forward on the rows its data pipeline makes (``shift_batch``: the hidden states of
    positions 0 .. n - 2 with the tokens of 1 .. n - 1 at positions 1 .. n - 1; one document)."""
    torch = peer.torch
    n = len(tokens)
    outputs = []
    hook = model.lm_head.register_forward_hook(
        lambda _m, _i, out: outputs.append(out.detach().double().numpy()[0])
    )
    try:
        with torch.no_grad():
            model(
                hidden_states=torch.tensor(aux[:-1][None], dtype=torch.float32),
                input_ids=torch.tensor(np.asarray(tokens[1:])[None], dtype=torch.long),
                document_ids=torch.zeros(1, n - 1, dtype=torch.long),
                position_ids=torch.arange(1, n, dtype=torch.long)[None],
                ttt_steps=TTT_STEPS,
            )
    finally:
        hook.remove()
    assert len(outputs) == TTT_STEPS
    return np.stack(outputs)


CASES = {
    # one llama layer, every switch off, W < V, a per-dimension feature scale folded into fc
    "plain-scaled": ("qwen3", dict(layer_ids=[0, 1, 2], draft_vocab=100), True),
    # EAGLE-3.1 (fc_norm, norm_output) with norm_before_residual, two layers, biases, Llama 3.1
    # RoPE
    "3.1-two-layers": (
        "qwen3",
        dict(
            layer_ids=[0, 1, 2],
            draft_vocab=64,
            num_layers=2,
            attention_bias=True,
            fc_norm=True,
            norm_output=True,
            norm_before_residual=True,
            rope_scaling=LLAMA3,
        ),
        False,
    ),
    # a Qwen3-type layer, norm_before_fc, linear RoPE; feature layers -1 (the embeddings, id 0)
    # and N - 1 (the final hidden state, id N)
    "qwen3-layer": (
        "gemma2",
        dict(
            layer_ids=[-1, 1, 3],
            draft_vocab=200,
            layer_type="qwen3",
            norm_before_fc=True,
            rope_scaling=LINEAR,
        ),
        False,
    ),
    # one feature (EAGLE-1's last block: speculators' id N), fc_norm over it
    "one-feature": ("qwen3", dict(layer_ids=[2], draft_vocab=80, fc_norm=True), False),
    "3.1-norm-output-only": (
        "gemma2",
        dict(layer_ids=[0, 2, 3], draft_vocab=150, norm_output=True, num_kv_heads=1),
        True,
    ),
}


def export_for_peer(targets, tmp_path, fam, kw, scaled):
    """A random head loaded by specjax (from the eagle layout), a feature scale set if asked,
    exported as speculators with the fixture as verifier: ``(head, target, exported dir)``."""
    from specjax.models.eagle import Frozen
    from specjax.models.eagle_formats import export_head, load_head

    target = targets[fam]
    _, _, src = make_head(tmp_path, target, "eagle", name="src", **kw)
    head = load_head(src, target)
    if scaled:
        import jax.numpy as jnp

        rng = np.random.default_rng(4)
        scale = np.exp(rng.normal(size=head.feature_scale[...].shape)).astype(np.float32)
        head.feature_scale = Frozen(jnp.asarray(scale))
    verifier = {"name_or_path": str(directory(fam)), "architectures": ARCHITECTURES[fam]}
    path = export_head(tmp_path / "speculators", head, "speculators", verifier=verifier)
    return head, target, path


def compare(peer, targets, tmp_path, fam, kw, scaled, allowed_unexpected=frozenset()):
    head, target, path = export_for_peer(targets, tmp_path, fam, kw, scaled)
    model, missing, unexpected = load_peer(peer, path)
    assert missing <= VERIFIER_OWNED, missing
    assert unexpected <= allowed_unexpected, unexpected
    for name, p in model.named_parameters():  # speculators starts lm_head and embed at NaN
        if name.split(".")[0] not in ("verifier_lm_head", "verifier_norm"):
            assert not peer.torch.isnan(p).any(), name
    cfg = json.loads((path / "config.json").read_text())
    inv = model.rotary_emb.inv_freq.double().numpy()  # the head's RoPE, scaled, as read
    np.testing.assert_allclose(
        inv, ref.rope_inverse_frequencies(cfg["transformer_layer_config"]), rtol=1e-6
    )
    np.testing.assert_allclose(inv, head.config.inverse_frequencies, rtol=1e-6)
    ids = [i + 1 for i in head.config.feature_layers]
    assert list(model.config.eagle_aux_hidden_state_layer_ids) == ids
    tokens = tokens_for(target, 11, seed=2)
    aux = aux_of(cfg, target, tokens)
    theirs = peer_logits(peer, model, aux, tokens)
    ours = specjax_logits(head, target, tokens, TTT_STEPS)
    tensors = {k: v.numpy() for k, v in peer.load_file(path / "model.safetensors").items()}
    numpy_ref = ref.draft_logits(cfg, tensors, aux, tokens, TTT_STEPS)
    d_spec, d_ref = max_differences(ours, theirs), max_differences(numpy_ref, theirs)
    print(f"{fam} {kw} scaled={scaled}: max |specjax - speculators| per step {d_spec}, "
          f"|reference - speculators| {d_ref}")  # fmt: skip
    assert max(d_spec) < TOL and max(d_ref) < TOL, (d_spec, d_ref)
    return unexpected


@pytest.mark.parametrize("case", list(CASES))
def test_exported_head_matches_speculators(peer, targets, tmp_path, case):
    compare(peer, targets, tmp_path, *CASES[case])


FULL_VOCAB = ("gemma2", dict(layer_ids=[0, 1, 2], fc_norm=True), False)


def test_full_vocabulary_head_matches_speculators(peer, targets, tmp_path):
    """W = V: the peer's forward agrees (its model then has no d2t / t2d buffers, and specjax
    writes none: see the next test)."""
    compare(peer, targets, tmp_path, *FULL_VOCAB)


def test_full_vocabulary_export_has_only_expected_keys(peer, targets, tmp_path):
    unexpected = compare(peer, targets, tmp_path, *FULL_VOCAB)
    assert not unexpected, unexpected
