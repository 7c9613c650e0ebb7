"""Hugging Face ``config.json`` -> ``ModelConfig``: each family's defaults, what is refused (one
line naming the key and what is supported), Gemma 3's multimodal checkpoints read through their
text model, and the tensors a config would not read."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from specjax.models import load_pretrained
from specjax.models.hf_config import config_from_hf, config_to_hf
from specjax.models.safetensors_loader import load_safetensors
from tests.family_fixtures import directory

BASE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
)


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "'yarn'.*default, llama3, linear"),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "'dynamic'"),
        ({"mlp_bias": True}, "mlp_bias=True: specjax's MLP has no biases"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
        ({"hidden_act": "relu"}, "hidden_act='relu'.*silu, gelu_pytorch_tanh"),
        ({"model_type": "phi3"}, 'model_type is "phi3"; specjax decodes llama, mistral'),
        ({"layer_types": ["full_attention"] * 3 + ["chunked_attention"]}, "layer_types"),
    ],
)
def test_unsupported_keys_are_one_line_naming_them(extra, match):
    with pytest.raises(ValueError, match=match) as err:
        config_from_hf({"model_type": "llama", **BASE, **extra})
    assert "\n" not in str(err.value)


def test_family_defaults_follow_transformers():
    """Keys a file leaves out mean what transformers' config class says."""
    gemma2 = config_from_hf({"model_type": "gemma2", **BASE})
    assert (gemma2.attn_softcap, gemma2.final_softcap) == (50.0, 30.0)
    assert gemma2.layer_types == ("sliding", "full", "sliding", "full")
    assert gemma2.sliding_window == 4096 and gemma2.head_dim == 256 and gemma2.tie_embeddings
    assert gemma2.query_pre_attn_scalar == 256 and gemma2.activation == "gelu_tanh"
    gemma3 = config_from_hf({"model_type": "gemma3_text", **BASE, "num_hidden_layers": 12})
    assert gemma3.layer_types == (("sliding",) * 5 + ("full",)) * 2
    assert (gemma3.rope_theta, gemma3.local_rope_theta) == (1e6, 1e4)
    assert gemma3.attn_softcap is None and gemma3.final_softcap is None and gemma3.qk_norm
    # Qwen keeps a sliding_window it does not use without use_sliding_window
    qwen = config_from_hf({"model_type": "qwen2", **BASE, "sliding_window": 32768})
    assert qwen.sliding_window is None and qwen.qkv_bias and not qwen.out_bias
    windowed = {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 3}
    qwen = config_from_hf({"model_type": "qwen2", **BASE, **windowed})
    assert qwen.layer_types == ("full",) * 3 + ("sliding",) and qwen.sliding_window == 16
    mistral = config_from_hf({"model_type": "mistral", **BASE, "sliding_window": 16})
    assert mistral.layer_types == ("sliding",) * 4
    unwindowed = config_from_hf({"model_type": "mistral", **BASE, "sliding_window": None})
    assert unwindowed.layer_types == ("full",) * 4
    llama = config_from_hf({"model_type": "llama", **BASE, "attention_bias": True})
    assert llama.qkv_bias and llama.out_bias


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text"])
def test_config_to_hf_inverts_config_from_hf(family):
    config = load_pretrained(directory(family)).config
    assert config_from_hf(config_to_hf(config), config.name) == config


def test_a_gemma3_multimodal_checkpoint_loads_its_text_model(tmp_path):
    """``model_type: gemma3`` with ``text_config``, decoder weights under
    ``language_model.model.`` (the hub's layout) beside a vision tower that is not read."""
    src = directory("gemma3_text")
    text = json.loads((src / "config.json").read_text())
    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {k: v for k, v in text.items() if k != "architectures"},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tensors = {"language_model." + k: v for k, v in load_file(src / "model.safetensors").items()}
    tensors["vision_tower.vision_model.post_layernorm.weight"] = np.ones(8, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    config, params, _ = load_safetensors(tmp_path)
    want_config, want, _ = load_safetensors(src)
    assert config.family == "gemma3_text" and config.layer_types == want_config.layer_types
    np.testing.assert_array_equal(params["embed"], want["embed"])
    np.testing.assert_array_equal(
        params["layers"][5]["attn"]["q_norm"]["scale"], want["layers"][5]["attn"]["q_norm"]["scale"]
    )


def test_a_tensor_the_config_would_not_read_is_refused(tmp_path):
    """A q/k/v bias in a Llama checkpoint whose config has none would be dropped silently."""
    shutil.copytree(directory("llama"), tmp_path / "m")
    tensors = load_file(tmp_path / "m" / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros(48, np.float32)
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"1 block tensor\(s\) a llama config does not use"):
        load_safetensors(tmp_path / "m")
