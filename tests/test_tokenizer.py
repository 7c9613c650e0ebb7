"""Tokenizers: byte-level BPE rebuilt from GGUF metadata or a Hugging Face directory, the byte
tokenizer, and saving and loading both."""

from __future__ import annotations

import json

import pytest

from specjax.models.gguf_tokenizer import from_gguf_metadata
from specjax.models.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer
from tests.loader_fixtures import CHATML, MERGES, vocab_tokens


def test_tokenizer_round_trips_and_saves(tmp_path):
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": vocab_tokens(),
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * (len(vocab_tokens()) - 3),
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": CHATML,
    }
    tok = from_gguf_metadata(meta)
    texts = ["the hello", "  spaced  out\n", "digits 12345!", "naïve café — 你好 🚀", ""]
    for text in texts:
        ids = tok.encode(text)
        assert ids[0] == 1  # add_bos_token
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.encode("123", add_special_tokens=False) == [3 + ord(c) for c in "123"]
    assert tok.encode(" the", add_special_tokens=False) == [vocab_tokens().index("Ġthe")]
    loaded = load_tokenizer(tok.save(tmp_path / "bpe"))
    assert isinstance(loaded, Tokenizer)
    for text in texts:
        assert loaded.encode(text) == tok.encode(text)
    assert (loaded.bos_id, loaded.eos_id, loaded.chat_template) == (1, 2, CHATML)
    # A bare HF directory: tokenizer.json + tokenizer_config.json.
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    tok.backend.save(str(hf_dir / "tokenizer.json"))
    (hf_dir / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}})
    )
    hf_tok = Tokenizer.from_hf_dir(hf_dir)
    assert (hf_tok.bos_id, hf_tok.eos_id, hf_tok.chat_template) == (1, 2, None)
    with pytest.raises(ValueError, match="no chat template"):
        hf_tok.apply_chat_template([{"role": "user", "content": "hi"}])
    (hf_dir / "chat_template.jinja").write_text(CHATML)
    assert Tokenizer.from_hf_dir(hf_dir).apply_chat_template([]) == "<|im_start|>assistant\n"
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        Tokenizer.from_hf_dir(tmp_path)
    with pytest.raises(ValueError, match=r"tokenizer.ggml.model is 'llama'.*tokenizer.json"):
        from_gguf_metadata({**meta, "tokenizer.ggml.model": "llama"})
    with pytest.raises(ValueError, match=r"tokenizer.ggml.pre is 'qwen2'; supported"):
        from_gguf_metadata({**meta, "tokenizer.ggml.pre": "qwen2"})


def test_byte_tokenizer_round_trips(tmp_path):
    tok = ByteTokenizer(["<bos>", "<eos>", "<eos2>"], bos="<bos>", eos="<eos>")
    assert tok.vocab_size == 259 and (tok.bos_id, tok.eos_id) == (256, 257)
    text = "héllo <eos2> wörld 🚀"
    ids = tok.encode(text)
    assert ids[0] == 256 and 258 in ids and max(ids) < tok.vocab_size
    assert tok.decode(ids) == "<bos>" + text
    assert tok.decode(ids, skip_special_tokens=True) == text.replace("<eos2>", "")
    assert tok.encode("ab", add_special_tokens=False) == [97, 98]
    loaded = load_tokenizer(tok.save(tmp_path / "bytes"))
    assert isinstance(loaded, ByteTokenizer) and loaded.encode(text) == ids
    assert loaded.eos_id == 257
    assert ByteTokenizer().encode("hi") == [104, 105]
    with pytest.raises(ValueError, match="outside the byte vocabulary"):
        ByteTokenizer().decode([300])
    with pytest.raises(ValueError, match="not one of the specials"):
        ByteTokenizer(["<a>"], eos="<b>")
