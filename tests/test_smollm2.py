"""The real SmolLM2-135M GGUF (slow tier): config, tokenizer and logits against Hugging Face."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import config as cfgs

# Token ids the Hugging Face `tokenizers` library gives with SmolLM2's own tokenizer.json.
HF_IDS = {
    "Hello, world!": [19556, 28, 905, 17],
    "The capital of France is": [504, 3575, 282, 4649, 314],
    "I don't think it's 42.": [57, 1326, 982, 1510, 357, 506, 216, 36, 34, 30],
    "  leading   spaces": [216, 2899, 256, 5600],
    "123 + 456 = 579": [33, 34, 35, 1232, 216, 36, 37, 38, 446, 216, 37, 39, 41],
    "你好，世界！": [18645, 250, 48392, 138, 12831, 7906, 240, 178, 239, 230, 8083, 219],
}


@pytest.mark.slow
def test_smollm2_config_tokenizer_and_logits(smollm2):
    preset = cfgs.smollm2_135m()
    assert dataclasses.replace(smollm2.config, name=preset.name) == preset
    tok = smollm2.tokenizer
    assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (49152, 1, 2)
    for text, ids in HF_IDS.items():
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi!"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode(prompt)[:3] == [1, 9690, 198]  # <|im_start|> system \n
    logits = np.asarray(smollm2.model(jnp.asarray([HF_IDS["The capital of France is"]])).logits)[0]
    assert logits.shape == (5, 49152)
    assert tok.decode([int(logits[-1].argmax())]) == " Paris"
    # Reference: transformers 5.23 (torch 2.13 CPU) loading the same GGUF, float32. specjax
    # matched all 5 x 49152 logits to 1.6e-4.
    np.testing.assert_array_equal(logits.argmax(-1), [29, 282, 260, 314, 7042])
    np.testing.assert_allclose(
        logits[:, 7042], [10.902418, 12.051955, 7.752175, 14.186827, 17.371262], atol=2e-3
    )
    np.testing.assert_allclose(logits[-1, [260, 4528]], [14.888595, 13.24498], atol=2e-3)
