"""Hugging Face directories (config.json + safetensors): logits against the NumPy reference,
sharded and tied bfloat16 files, Llama 3 configs, and errors that name the fix."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from specjax.models import config as cfgs
from specjax.models.hf_config import config_from_hf, config_to_hf
from specjax.models.hf_params import params_to_hf
from specjax.models.safetensors_loader import load_safetensors, save_safetensors
from tests.loader_fixtures import assert_trees_equal, hf_reference_logits, logits_of


def test_hf_directory_reproduces_model_logits(tmp_path, untied):
    config, params = untied
    hf = params_to_hf(params, config)
    save_file(hf, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    loaded_cfg, loaded, tok = load_safetensors(tmp_path)
    assert tok is None
    assert dataclasses.replace(loaded_cfg, name=config.name) == config
    assert_trees_equal(loaded, params)
    want = logits_of(config, params)
    np.testing.assert_array_equal(logits_of(loaded_cfg, loaded), want)
    np.testing.assert_allclose(want, hf_reference_logits(hf, config), atol=2e-4, rtol=1e-4)


def test_hf_sharded_tied_bfloat16_and_llama3_config(tmp_path, tied):
    config, params = tied
    save_safetensors(tmp_path, params, config, max_shard_bytes=20_000)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    cfg16, p16, _ = load_safetensors(tmp_path, dtype="bfloat16")
    assert cfg16.param_dtype == "bfloat16" and "lm_head" not in p16
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    got = logits_of(cfg16, p16)
    want = hf_reference_logits(params_to_hf(params, config), config)
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
    llama31 = cfgs.preset("llama3.1-8b")
    assert dataclasses.replace(config_from_hf(config_to_hf(llama31)), name=llama31.name) == (
        dataclasses.replace(llama31, dtype="float32", param_dtype="float32")
    )


def test_hf_errors_name_the_fix(tmp_path, untied):
    config, params = untied
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        load_safetensors(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    with pytest.raises(FileNotFoundError, match=r"no \*\.safetensors"):
        load_safetensors(tmp_path)
    hf = params_to_hf(params, config)
    bad = dict(hf, **{"model.layers.1.mlp.up_proj.weight": np.zeros((60, 32), np.float32)})
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"up_proj.weight has shape \[60, 32\].*expects \[64, 32\]"
    ):
        load_safetensors(tmp_path)
    save_file(
        {k: v for k, v in hf.items() if k != "lm_head.weight"}, str(tmp_path / "model.safetensors")
    )
    with pytest.raises(ValueError, match=r"lack 1 tensor.*lm_head\.weight.*tie_word_embeddings"):
        load_safetensors(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({**config_to_hf(config), "model_type": "gpt2"})
    )
    with pytest.raises(ValueError, match='model_type is "gpt2"; specjax decodes llama, mistral'):
        load_safetensors(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors"):
        load_safetensors(tmp_path)
