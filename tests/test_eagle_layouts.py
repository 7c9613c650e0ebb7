"""The published EAGLE-3 head layouts (``eagle``: EAGLE / SpecForge / ModelOpt, ``speculators``)
read and written by :mod:`specjax.models.eagle_formats`, against an independent NumPy statement
of the peers' forward (``tests/eagle_reference.py``):

* random heads of both layouts on tiny Qwen3 and Gemma 2 targets give the reference's logits
  (fp32, 1e-4) for the first step and three chained steps, with the EAGLE-3.1 switches on and
  off, several layers, attention biases, a Qwen3-type layer, a head narrower or wider than its
  target (own embedding), a draft vocabulary W < V and scaled RoPE; the feature drafter's own
  chain (``FeatureDrafter.propose``) draws from the reference's laws;
* the layer-id conventions, ``d2t`` offsets and ``t2d``, one-line refusals of what specjax
  does not implement, a PyTorch ``.bin`` head without torch;

Exports and round trips: ``tests/test_eagle_export.py``; the same heads against the speculators
package itself: ``tests/test_eagle_peer.py`` (slow).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from specjax.drafters.feature import FeatureDrafter
from specjax.models.eagle_formats import detect_format, load_head, save_head
from specjax.models.eagle_layouts import feature_layers_of
from specjax.sampling import SamplingParams
from tests import eagle_heads as heads
from tests import eagle_reference as ref
from tests.eagle_harness import (  # noqa: F401 (targets: a fixture)
    CASES,
    LLAMA3,
    SLOW_CASES,
    aux_of,
    check_parity,
    make_head,
    propose,
    targets,
    tokens_for,
)


@pytest.mark.parametrize("case", list(CASES))
def test_loaded_head_matches_the_reference(targets, tmp_path, case):  # noqa: F811
    check_parity(targets, tmp_path, *CASES[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SLOW_CASES))
def test_loaded_head_matches_the_reference_more(targets, tmp_path, case):  # noqa: F811
    check_parity(targets, tmp_path, *SLOW_CASES[case])


def test_every_switch_changes_the_reference(targets):  # noqa: F811
    """The random heads are sensitive to each switch (else parity would not test it): flipping
    one in the config (the tensors kept) moves the logits; norm_output moves only the chained
    steps."""
    target = targets["qwen3"]
    c = target.config
    cfg, tensors = heads.random_head(
        None,
        "eagle",
        vocab=c.vocab_size,
        target_dim=c.dim,
        layer_ids=[0, 1, 2],
        draft_vocab=100,
        num_layers=2,
        attention_bias=True,
        layer_type="qwen3",
        fc_norm=True,
        norm_output=True,
        norm_before_residual=True,
        rope_scaling=LLAMA3,
    )
    tokens = tokens_for(target)
    aux = aux_of(cfg, target, tokens)
    embed = np.asarray(target.embed[...])
    base = ref.draft_logits(cfg, tensors, aux, tokens, 3, embed)

    def moved(cfg2, tensors2=tensors, against=base):
        other = ref.draft_logits(cfg2, tensors2, aux, tokens, 3, embed)
        return [float(np.abs(other[j] - against[j]).max()) for j in range(3)]

    for key in ("norm_before_residual", "fc_norm", "norm_output"):
        d = moved(cfg | {key: not cfg[key]})
        if key == "norm_output":  # the same first step, other chained ones
            assert d[0] < 1e-9 and min(d[1:]) > 1e-2, (key, d)
        else:
            assert min(d) > 1e-2, (key, d)
    plain = cfg | {"fc_norm": False}  # norm_before_fc excludes fc_norm
    with_norm = tensors | {"input_norm.weight": 1.0 + 0.3 * np.sin(np.arange(3 * c.dim))}
    against = ref.draft_logits(plain, with_norm, aux, tokens, 3, embed)
    assert min(moved(plain | {"norm_before_fc": True}, with_norm, against)) > 1e-2
    assert min(moved(cfg | {"rope_scaling": None})) > 1e-2
    assert min(moved(cfg | {"model_type": "llama"})) > 1e-2  # the q/k norms
    no_bias = {k: v for k, v in tensors.items() if not k.endswith(".bias")}
    assert min(moved(cfg | {"attention_bias": False}, no_bias)) > 1e-2
    assert min(moved(cfg | {"num_hidden_layers": 1})) > 1e-2  # the second layer


def test_the_drafters_chain_draws_from_the_references_laws(targets, tmp_path):  # noqa: F811
    """FeatureDrafter's own path (prefill feed, pending pair with ``last``, tree-masked chain of
    own outputs) reports, at temperature 1, the laws of the peers' chained steps with the drafted
    tokens as teacher."""
    target = targets["qwen3"]
    cfg, tensors, path = make_head(tmp_path, target, "speculators", **CASES["speculators-3.1"][2])
    head = load_head(path, target)
    draft_len, prompt = 4, tokens_for(target, 7, seed=3)
    p = len(prompt)
    drafter = FeatureDrafter(
        head, num_paths=1, draft_len=draft_len, sampling=SamplingParams(temperature=1.0)
    )
    draft = propose(drafter, target, [prompt], seed=5)
    drafted = np.asarray(draft.tokens[0, 0])
    probs = np.asarray(draft.probs[0, 0])  # [L, V]
    seq = np.concatenate([prompt, drafted[:-1]])
    aux = aux_of(cfg, target, seq)
    want = ref.draft_logits(cfg, tensors, aux, seq, draft_len, np.asarray(target.embed[...]))
    ids = ref.target_ids(tensors, cfg["draft_vocab_size"])
    for j in range(draft_len):  # row p - 2: the last prompt pair, then its own chain
        law = np.exp(want[j, p - 2] - want[j, p - 2].max())
        np.testing.assert_allclose(probs[j, ids], law / law.sum(), atol=1e-5)
        assert probs[j].sum() == pytest.approx(1.0, abs=1e-5)


# --- conventions --------------------------------------------------------------------------------


def test_detect_format(tmp_path, targets):  # noqa: F811
    target = targets["qwen3"]
    for kind in ("eagle", "speculators"):
        _, _, path = make_head(tmp_path, target, kind, name=kind)
        assert detect_format(path) == kind
    save_head(tmp_path / "own", load_head(tmp_path / "eagle", target))
    assert detect_format(tmp_path / "own") == "specjax"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"]})
    )
    with pytest.raises(ValueError, match="no draft head"):
        detect_format(tmp_path / "other")
    with pytest.raises(FileNotFoundError):
        detect_format(tmp_path / "missing")


@pytest.mark.parametrize(
    "kind,ids,nested,fam,want",
    [
        ("eagle", [0, 1, 2], True, "qwen3", (0, 1, 2)),  # SpecForge: block outputs
        ("eagle", [0, 2, 3], False, "qwen3", (-1, 1, 2)),  # top level: block inputs
        ("speculators", [0, 1, 3], True, "qwen3", (-1, 0, 2)),  # id N: the final hidden state
        ("eagle", None, True, "qwen3", (1, 0, -1)),  # default inputs (2, N // 2, N - 3)
        ("speculators", None, True, "gemma2", (1, 1, 0)),
    ],
)
def test_layer_id_conventions(targets, tmp_path, kind, ids, nested, fam, want):  # noqa: F811
    target = targets[fam]
    cfg, _, path = make_head(tmp_path, target, kind, layer_ids=ids, nested_ids=nested)
    assert load_head(path, target).config.feature_layers == want
    assert feature_layers_of(cfg, kind, target.config.num_layers) == want
    # the peers' capture points, stated independently, are the same blocks' inputs
    assert tuple(i - 1 for i in ref.block_inputs(cfg, target.config.num_layers)) == want


def test_d2t_offsets_become_ids_and_t2d_is_checked(targets, tmp_path):  # noqa: F811
    target = targets["qwen3"]
    v = target.config.vocab_size
    cfg, tensors, path = make_head(tmp_path, target, "eagle", layer_ids=[0, 1, 2], draft_vocab=50)
    ids = np.arange(50) + tensors["d2t"]
    assert np.all(tensors["d2t"] >= 0) and np.any(tensors["d2t"] > 0)  # offsets, not ids
    np.testing.assert_array_equal(np.asarray(load_head(path, target).d2t[...]), ids)
    bad = tensors["t2d"].copy()
    bad[ids[7]] = False
    bad[np.flatnonzero(~tensors["t2d"])[0]] = True  # as many trues, one elsewhere
    heads.write_head(tmp_path / "bad", cfg, tensors | {"t2d": bad})
    with pytest.raises(ValueError, match="t2d"):
        load_head(tmp_path / "bad", target)
    heads.write_head(tmp_path / "short", cfg, tensors | {"t2d": bad[: v - 1]})
    with pytest.raises(ValueError, match="t2d"):
        load_head(tmp_path / "short", target)
    twice = tensors["d2t"].copy()
    twice[1] = ids[0] - 1  # draft ids 0 and 1 onto one target id
    heads.write_head(
        tmp_path / "twice", cfg, {k: x for k, x in tensors.items() if k != "t2d"} | {"d2t": twice}
    )
    with pytest.raises(ValueError, match="d2t"):
        load_head(tmp_path / "twice", target)


@pytest.mark.parametrize(
    "kind,change,names",
    [
        ("eagle", {"mlp_bias": True}, ["mlp_bias"]),
        ("speculators", {"mlp_bias": True}, ["mlp_bias"]),
        ("eagle", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ["yarn", "rope_scaling"]),
        ("speculators", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, ["yarn"]),
        ("eagle", {"model_type": "mistral"}, ["mistral", "model_type"]),
        ("speculators", {"model_type": "gemma2"}, ["gemma2", "model_type"]),
        ("eagle", {"hidden_act": "gelu"}, ["hidden_act"]),
        ("speculators", {"speculators_model_type": "mlp"}, ["speculators_model_type", "mlp"]),
    ],
)
def test_unsupported_keys_are_one_line_errors(targets, tmp_path, kind, change, names):  # noqa: F811
    target = targets["qwen3"]
    cfg, tensors, _ = make_head(tmp_path, target, kind, layer_ids=[1, 2, 3])
    if kind == "speculators" and "speculators_model_type" not in change:
        cfg["transformer_layer_config"] |= change
    else:
        cfg |= change
    heads.write_head(tmp_path / "bad", cfg, tensors)
    with pytest.raises(ValueError) as info:
        load_head(tmp_path / "bad", target)
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in names), message


def test_a_torch_bin_head_without_torch_names_the_conversion(tmp_path, monkeypatch, targets):  # noqa: F811
    cfg, _, _ = make_head(tmp_path, targets["qwen3"], "eagle", name="src", layer_ids=[0, 1, 2])
    path = tmp_path / "bin"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "pytorch_model.bin").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ValueError) as info:
        load_head(path, targets["qwen3"])
    message = str(info.value)
    assert "\n" not in message and "pytorch_model.bin" in message, message
    assert "torch" in message and "model.safetensors" in message and "python -c" in message


@pytest.mark.slow
def test_the_conversion_command_converts_a_torch_bin_head(tmp_path, targets):  # noqa: F811
    """The command the message gives, run as is, writes the safetensors file specjax reads."""
    torch = pytest.importorskip("torch")
    target = targets["qwen3"]
    cfg, tensors, src = make_head(
        tmp_path, target, "eagle", name="src", layer_ids=[0, 1, 2], draft_vocab=40
    )
    path = tmp_path / "bin"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    torch.save(
        {k: torch.from_numpy(np.asarray(x)) for k, x in tensors.items()}, path / "pytorch_model.bin"
    )
    direct = load_head(path, target)  # torch importable: read directly
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "torch", None)
        with pytest.raises(ValueError) as info:
            load_head(path, target)
    command = shlex.split(str(info.value).split("convert it once: ", 1)[1])
    assert command[0] == "python"
    subprocess.run([sys.executable, *command[1:]], check=True, timeout=300)
    (path / "pytorch_model.bin").unlink()
    converted, original = load_head(path, target), load_head(src, target)
    for a, b, c in zip(
        jax.tree.leaves(nnx.state(converted)),
        jax.tree.leaves(nnx.state(original)),
        jax.tree.leaves(nnx.state(direct)),
        strict=True,
    ):
        assert np.array_equal(a, b) and np.array_equal(a, c)


# --- round trip ---------------------------------------------------------------------------------
