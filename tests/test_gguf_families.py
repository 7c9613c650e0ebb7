"""GGUF files of every family specjax runs, made from tiny random transformers models the way
llama.cpp's ``convert_hf_to_gguf.py`` makes them (:mod:`tests.gguf_families`), against two peers:

* the original transformers model (fp32, eager attention): specjax's
  :func:`~specjax.models.load_pretrained` of the F32 GGUF gives its prompt logits;
* transformers' own GGUF loader (``from_pretrained(..., gguf_file=...)``, which dequantizes with
  the ``gguf`` package, undoes the Llama permutation and Gemma's ``+ 1`` itself): its model of
  the same file, F32 and Q8_0, agrees with specjax's. This checks the test converter's tensors
  independently of specjax. transformers' GGUF config mapping misses keys llama.cpp has or
  hard-codes (Llama 3 / linear RoPE scaling, Gemma's ``query_pre_attn_scalar``, soft-caps,
  Gemma 3's local RoPE base and pattern), so its model is built with the original config for
  the logits, and its own GGUF config is checked on the keys it does read.

Tolerance: ``max |a - b| / max |b| <= 1e-4`` over a prompt of 20 tokens, longer than the
sliding window (8) of the families that have one. Mistral's GGUF carries no window (llama.cpp
writes none and attends to everything), so it is compared with the same model without a window,
and a file given ``llama.attention.sliding_window`` with the windowed one.

All tests are ``slow`` and skipped (with the reason) unless torch and transformers import.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub import

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the peer extra: pip install -e '.[peer]'")
transformers = pytest.importorskip(
    "transformers", reason="needs the peer extra: pip install -e '.[peer]'"
)

import gguf  # noqa: E402

from specjax.models import load_pretrained  # noqa: E402
from specjax.models.hf_config import config_from_hf  # noqa: E402
from tests.gguf_families import convert, toy_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow

RTOL = 1e-4
PROMPT = [3, 17, 5, 60, 2, 41, 9, 33, 12, 7, 58, 21, 30, 1, 44, 6, 100, 127, 11, 38]
BASE = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
)
FAMILIES = {
    "llama": (  # q/k/v/o biases (permuted q/k biases), Llama 3 RoPE scaling, untied
        "LlamaConfig",
        dict(
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=500000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
    ),
    "mistral": ("MistralConfig", dict(sliding_window=8, tie_word_embeddings=False)),
    "qwen2": (  # q/k/v biases, head_dim implicit (32 / 2), tied
        "Qwen2Config",
        dict(
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=None,
            tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=1e6),
        ),
    ),
    "qwen3": (  # q/k norms, head_dim 16 != 32 / 4, untied
        "Qwen3Config",
        dict(tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1e6)),
    ),
    "gemma2": (
        "Gemma2Config",
        dict(
            num_hidden_layers=4,
            sliding_window=8,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
        ),
    ),
    "gemma3": (
        "Gemma3TextConfig",
        dict(
            num_hidden_layers=6,
            num_key_value_heads=1,
            sliding_window=8,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
            query_pre_attn_scalar=16,
            rope_parameters=dict(
                full_attention=dict(rope_type="linear", factor=4.0, rope_theta=1e6),
                sliding_attention=dict(rope_type="default", rope_theta=20000.0),
            ),
        ),
    ),
}


# general.name: not exactly "mistral", which transformers 5.23 maps to model_type mistral, a
# GGUF architecture gguf 0.19 lacks ("Unknown gguf model_type"); specjax labels it mistral.
NAMES = {"mistral": "Mistral-tiny"}


def hf_config(family: str, **overrides):
    cls, kw = FAMILIES[family]
    kw = {k: v for k, v in {**BASE, **kw}.items() if v is not None}  # None: the class default
    return getattr(transformers, cls)(**{**kw, **overrides})


def randomize(model, gemma: bool, seed: int) -> None:
    """Every parameter random and nonzero: norms ``1 + N(0, 0.3^2)`` (Gemma's ``w`` of ``1 + w``:
    ``N(0, 0.6^2)``), biases ``N(0, 0.3^2)``, embeddings ``N(0, 0.5^2)`` (Gemma ``0.15^2``),
    projections ``N(0, 1 / fan_in)``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(noise * 0.6 if gemma else 1 + noise * 0.3)
            elif name.endswith("bias"):
                p.copy_(noise * 0.3)
            elif "embed_tokens" in name:
                p.copy_(noise * (0.15 if gemma else 0.5))
            else:
                p.copy_(noise * p.shape[1] ** -0.5)


def hf_model(config, state=None):
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager", dtype=torch.float32
    )
    if state is not None:
        model.load_state_dict(state)
    return model.eval()


def hf_logits(model) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].float().numpy()


def ours(path) -> tuple:
    with warnings.catch_warnings():  # the tokenizer specjax cannot rebuild: see the last test
        warnings.simplefilter("ignore")
        pre = load_pretrained(path)
    return pre.config, np.asarray(pre.model(np.asarray([PROMPT])).logits)[0]


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def gguf_model(path, config=None):
    kw = {} if config is None else {"config": config}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager", **kw
    )
    return model.eval()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{family: (HF model, HF dir, F32 GGUF, Q8_0 GGUF)}, made once."""
    out = {}
    for i, family in enumerate(FAMILIES):
        root = tmp_path_factory.mktemp(family)
        model = hf_model(hf_config(family))
        randomize(model, family.startswith("gemma"), seed=i)
        model.save_pretrained(root / "hf")
        (root / "f32").mkdir()
        (root / "q8").mkdir()
        kw = dict(name=NAMES.get(family, family), tokenizer=toy_tokenizer(family, 128))
        f32 = convert(root / "hf", root / "f32" / "model.gguf", **kw)
        q8_0 = gguf.GGMLQuantizationType.Q8_0
        q8 = convert(root / "hf", root / "q8" / "model.gguf", qtype=q8_0, **kw)
        out[family] = (model, root / "hf", f32, q8)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gguf_logits_match_the_transformers_model(made, family):
    model, _, f32, _ = made[family]
    if family == "mistral":  # llama.cpp's GGUF has no window: the model without one
        model = hf_model(hf_config(family, sliding_window=None), model.state_dict())
    want = hf_logits(model)
    config, got = ours(f32)
    expected = config_from_hf(model.config.to_dict(), config.name)
    assert config == expected
    err = rel(got, want)
    print(f"{family}: specjax(GGUF F32) vs transformers: {err:.2e}")
    assert err <= RTOL


def test_mistral_window_when_the_file_has_one(made, tmp_path):
    model, hf_dir, _, _ = made["mistral"]
    path = convert(
        hf_dir, tmp_path / "w.gguf", name=NAMES["mistral"], extra_kv={"add_sliding_window": 8}
    )
    config, got = ours(path)
    assert (config.family, config.sliding_window, set(config.layer_types)) == (
        "mistral",
        8,
        {"sliding"},
    )
    want = hf_logits(model)
    full = hf_logits(hf_model(hf_config("mistral", sliding_window=None), model.state_dict()))
    assert rel(full, want) > 100 * RTOL  # the window matters for this prompt
    print(f"mistral, window in the file: specjax vs transformers: {rel(got, want):.2e}")
    assert rel(got, want) <= RTOL


@pytest.mark.parametrize("family", list(FAMILIES))
def test_transformers_reads_the_same_gguf_alike(made, family):
    """transformers' GGUF loader, given the original config, builds the same model from the
    same F32 and Q8_0 files; its own GGUF config agrees on the keys it reads."""
    model, _, f32, q8 = made[family]
    config = model.config
    if family == "mistral":  # without its window, Mistral is Llama (see NAMES)
        config = transformers.LlamaConfig(**{**BASE, "tie_word_embeddings": False})
    for path, kind in ((f32, "F32"), (q8, "Q8_0")):
        theirs = hf_logits(gguf_model(path, config))
        err = rel(ours(path)[1], theirs)
        print(f"{family}: specjax(GGUF {kind}) vs transformers(GGUF {kind}): {err:.2e}")
        assert err <= RTOL
    own = transformers.AutoConfig.from_pretrained(f32.parent, gguf_file=f32.name)
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"]
    keys += ["num_key_value_heads", "intermediate_size", "rms_norm_eps", "tie_word_embeddings"]
    keys += ["sliding_window"] if family.startswith("gemma") else []
    for key in keys:
        assert getattr(own, key) == pytest.approx(getattr(config, key)), key
    more = ["head_dim", "query_pre_attn_scalar", "rope_parameters", "layer_types"]
    more += ["attn_logit_softcapping", "final_logit_softcapping"]
    differ = [k for k in more if getattr(own, k, None) != getattr(config, k, None)]
    print(f"{family}: transformers' own GGUF config differs in {differ}")
    if not differ:  # then transformers' model of the file alone is the same model too
        assert rel(ours(f32)[1], hf_logits(gguf_model(f32))) <= RTOL


def test_tokenizers_specjax_cannot_rebuild_leave_none_with_a_warning(made):
    """Gemma's and Mistral's SentencePiece and Qwen's ``qwen2`` pre-tokenizer: the model loads,
    the tokenizer is None, and the warning says why and what to do; Llama 3's BPE rebuilds."""
    for family in FAMILIES:
        path = made[family][2]
        if family == "llama":
            assert load_pretrained(path).tokenizer.vocab_size == 128
            continue
        with pytest.warns(UserWarning, match=r"loaded without a tokenizer.*tokenizer\.json"):
            assert load_pretrained(path).tokenizer is None
