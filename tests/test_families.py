"""Every family against transformers, from the committed fixtures (no torch needed): prompt
logits within 1e-4, the 32 greedy tokens transformers generated, both config styles, and the
tokenizer (ids with each family's BOS rule, the chat template, the stop tokens); and a bf16
checkpoint loads and decodes."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import AUTOREGRESSIVE, DecodeConfig, generate
from specjax.drafters import ModelDrafter
from specjax.models import load_pretrained, truncated
from specjax.models.safetensors_loader import read_config
from specjax.sampling import SamplingParams
from tests.family_fixtures import FAMILIES, directory, hub_style, reference

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    return request.param, load_pretrained(directory(request.param))


def test_prompt_logits_equal_transformers(family):
    name, pre = family
    for prompt, want in zip(
        reference(name)["prompts"], reference(name)["prompt_logits"], strict=True
    ):
        got = np.asarray(pre.model(jnp.asarray([prompt], jnp.int32)).logits)[0]
        np.testing.assert_allclose(got, np.asarray(want, np.float32), atol=1e-4, rtol=0)


def test_greedy_tokens_equal_transformers(family):
    """32 tokens past prompts longer than the window, through the cache (one program)."""
    name, pre = family
    ref = reference(name)
    config = DecodeConfig(AUTOREGRESSIVE, GREEDY, max_new_tokens=32)
    out = generate(pre.model, ref["prompts"], config)
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]


def test_both_config_styles_give_one_model(family, tmp_path):
    name, pre = family
    hub = read_config(hub_style(name, tmp_path))
    assert dataclasses.replace(hub, name=pre.config.name) == pre.config


def test_tokenizer_equals_transformers(family):
    """Plain text with the family's BOS rule, the rendered chat and its ids (no second BOS),
    and the stop tokens of generation_config.json."""
    name, pre = family
    tok, ref = pre.tokenizer, reference(name)["tokenizer"]
    assert tok.encode(ref["text"]) == ref["input_ids"]
    assert tok.apply_chat_template(ref["messages"]) == ref["chat_text"]
    assert tok.encode_chat(ref["messages"]) == ref["chat_ids"]
    assert set(tok.stop_ids) == set(ref["stop_token_ids"])


def write_bf16(src, dst):
    """``src``'s model.safetensors as BF16, written byte by byte: each float32 rounded to its
    upper 16 bits (to nearest even), the header naming dtype BF16."""
    import json
    import shutil
    import struct

    from safetensors.numpy import load_file

    dst.mkdir()
    for f in src.iterdir():
        if f.name not in ("model.safetensors", "reference.json", "config.hub.json"):
            shutil.copy(f, dst / f.name)
    header, blobs, offset = {}, [], 0
    for name, x in load_file(str(src / "model.safetensors")).items():
        bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        half = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        header[name] = {"dtype": "BF16", "shape": list(x.shape)}
        header[name]["data_offsets"] = [offset, offset + half.nbytes]
        blobs.append(half.tobytes())
        offset += half.nbytes
    text = json.dumps(header).encode()
    (dst / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return dst


def test_bf16_weights_load_and_run(tmp_path):
    """A bf16 checkpoint loads to its values exactly (float32 here), and in bfloat16 it runs:
    prompt logits near float32's, speculative decoding (a self-draft tree) accepting drafts.
    (Greedy speculative == autoregressive is a float32 property: in bf16 a many-token
    verification rounds differently from a one-token step, so near-ties may go either way.)"""
    src = directory("gemma2")
    path = write_bf16(src, tmp_path / "bf16")
    exact = load_pretrained(src).params
    wide = load_pretrained(path).params
    rounded = lambda x: np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))
    for a, b in zip(jax.tree.leaves(wide), jax.tree.leaves(exact), strict=True):
        np.testing.assert_array_equal(np.asarray(a), rounded(b))
    pre = load_pretrained(path, "bfloat16")
    assert pre.model.layers[0].attn.wq[...].dtype == jnp.bfloat16
    prompts = reference("gemma2")["prompts"]
    for prompt, want in zip(prompts, reference("gemma2")["prompt_logits"], strict=True):
        got = np.asarray(pre.model(jnp.asarray([prompt], jnp.int32)).logits)[0]
        want = np.asarray(want, np.float32)
        assert np.abs(got - want).max() < 0.15 * np.abs(want).max()  # bf16: ~0.1 of 2.7
    drafter = ModelDrafter(truncated(pre.model, 2), num_paths=3, draft_len=3, sampling=GREEDY)
    sd = generate(pre.model, prompts, DecodeConfig("specinfer", GREEDY, 24), drafter=drafter)
    assert all(len(t) == 24 for t in sd.tokens) and sd.metrics.accepted_tokens > 0
