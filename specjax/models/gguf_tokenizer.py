"""Byte-level BPE tokenizers rebuilt from a GGUF file's ``tokenizer.ggml.*`` metadata (tokens,
merges, token types, special ids, pre-tokenizer type, chat template)."""

from __future__ import annotations

from collections.abc import Mapping

import tokenizers
from tokenizers import AddedToken, decoders, pre_tokenizers, processors

from specjax.models.tokenizer import Tokenizer

# GGUF token types (llama.cpp's llama_token_type).
_CONTROL, _USER_DEFINED = 3, 4

_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre values (llama.cpp) -> pre-tokenizer family. "digits": every digit is its own
# word, then the GPT-2 regex (llama.cpp's STARCODER/SMOLLM group; HF: Digits + ByteLevel).
_PRE_TYPES = {
    **dict.fromkeys(("default", "gpt2", "gpt-2", "mpt", "olmo", "jais"), "gpt2"),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"), "digits"
    ),
    **dict.fromkeys(("llama-bpe", "llama3", "llama-v3"), "llama3"),
}


def _byte_level_pre_tokenizer(family: str):
    if family == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if family == "digits":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tokenizers.Regex(_LLAMA3_REGEX), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def from_gguf_metadata(meta: Mapping[str, object]) -> Tokenizer:
    """Rebuilds a GGUF file's byte-level BPE tokenizer.

    Args:
      meta: the GGUF key/value metadata (at least ``tokenizer.ggml.model``, ``.tokens``,
        ``.merges``; optionally ``.token_type``, ``.pre``, ``.bos_token_id``,
        ``.eos_token_id``, ``.add_bos_token`` and ``tokenizer.chat_template``).

    Raises:
      ValueError: a tokenizer model or pre-tokenizer type that is not byte-level BPE.
    """
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"tokenizer.ggml.model is {kind!r}; specjax rebuilds only byte-level BPE ('gpt2') "
            "tokenizers from GGUF. Load the model's Hugging Face tokenizer.json instead "
            "(Tokenizer.from_hf_dir)"
        )
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if pre not in _PRE_TYPES:
        raise ValueError(
            f"tokenizer.ggml.pre is {pre!r}; supported pre-tokenizers: {sorted(_PRE_TYPES)}. "
            "Load the model's Hugging Face tokenizer.json instead (Tokenizer.from_hf_dir)"
        )
    tokens = [str(t) for t in meta["tokenizer.ggml.tokens"]]
    merges = [tuple(str(m).split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    types = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    family = _PRE_TYPES[pre]
    model = tokenizers.models.BPE(
        vocab={t: i for i, t in enumerate(tokens)},
        merges=merges,
        ignore_merges=family == "llama3",
    )
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = _byte_level_pre_tokenizer(family)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [
            AddedToken(tokens[i], special=True, normalized=False)
            for i, t in enumerate(types)
            if int(t) == _CONTROL
        ]
    )
    backend.add_tokens(
        [
            AddedToken(tokens[i], special=False, normalized=False)
            for i, t in enumerate(types)
            if int(t) == _USER_DEFINED
        ]
    )
    bos = _opt_int(meta.get("tokenizer.ggml.bos_token_id"))
    eos = _opt_int(meta.get("tokenizer.ggml.eos_token_id"))
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], bos)]
        )
    template = meta.get("tokenizer.chat_template")
    return Tokenizer(backend, bos, eos, None if template is None else str(template))


def _opt_int(value) -> int | None:
    return None if value is None else int(value)
