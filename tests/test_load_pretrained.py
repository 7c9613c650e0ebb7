"""load_pretrained: one entry point for GGUF files, Hugging Face directories and checkpoints."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.hf_params import params_to_hf
from specjax.models.pretrained import load_pretrained
from specjax.models.safetensors_loader import save_safetensors
from tests.loader_fixtures import TOKENS, hf_reference_logits, write_gguf


def test_load_pretrained_from_every_format(tmp_path, untied):
    config, params = untied
    hf = params_to_hf(params, config)
    want = hf_reference_logits(hf, config)
    gguf_path = write_gguf(tmp_path / "m.gguf", config, hf)
    hf_dir = save_safetensors(tmp_path / "hf", params, config)
    from_gguf = load_pretrained(gguf_path)
    ck = from_gguf.save(tmp_path / "ck")
    for source in (gguf_path, hf_dir, ck):
        pre = load_pretrained(source)
        logits = np.asarray(pre.model(jnp.asarray([TOKENS])).logits)
        assert logits.shape == (1, len(TOKENS), config.vocab_size)
        np.testing.assert_allclose(logits[0], want, atol=2e-4, rtol=1e-4)
    assert load_pretrained(ck).tokenizer.encode("hello") == from_gguf.tokenizer.encode("hello")
    assert load_pretrained(ck, dtype="bfloat16").config.param_dtype == "bfloat16"
    with pytest.raises(FileNotFoundError, match=r"does not exist; pass a \.gguf file"):
        load_pretrained(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    for bad in ("empty", "notes.txt"):
        with pytest.raises(ValueError, match=r"is not a \.gguf file, a Hugging Face directory"):
            load_pretrained(tmp_path / bad)
