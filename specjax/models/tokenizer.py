"""Tokenizers: byte-level BPE through the ``tokenizers`` package, and a plain byte tokenizer.

Three ways to build one:

- :func:`specjax.models.gguf_tokenizer.from_gguf_metadata`: rebuilds the byte-level BPE
  tokenizer that a GGUF file describes (``tokenizer.ggml.*`` keys: tokens, merges, token types,
  special ids, pre-tokenizer type, chat template).
- :meth:`Tokenizer.from_hf_dir`: a Hugging Face ``tokenizer.json`` (+ ``tokenizer_config.json``
  for the special tokens, the BOS rule and the chat template, ``generation_config.json`` for the
  stop tokens).
- :class:`ByteTokenizer`: ids 0..255 are the UTF-8 bytes, optional special tokens after them.

Chat templates (:meth:`TokenizerBase.apply_chat_template`) are rendered by
:mod:`specjax.models.chat_template`: the ChatML family (``<|im_start|>role\\ncontent<|im_end|>``,
which SmolLM2 uses) natively, so no template engine is needed; any other Jinja template with
``jinja2`` when it is installed, and otherwise one clear error. A rendered conversation is
encoded without adding special tokens (:meth:`TokenizerBase.encode_chat`), as transformers does:
templates that want a BOS write it themselves.

Both kinds save to a directory (:meth:`save`) and come back with :func:`load_tokenizer`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import tokenizers
from tokenizers import processors

from specjax.files import write_json
from specjax.models.chat_template import is_chatml, render_chat_template

__all__ = [
    "MANIFEST",
    "ByteTokenizer",
    "Tokenizer",
    "TokenizerBase",
    "is_chatml",
    "load_tokenizer",
    "render_chat_template",
]

MANIFEST = "specjax_tokenizer.json"


class TokenizerBase:
    """What every specjax tokenizer offers; subclasses implement encode/decode/save."""

    bos_id: int | None
    eos_id: int | None
    chat_template: str | None
    extra_stop_ids: tuple[int, ...] = ()

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a generation: the EOS, then the model's other stop tokens (the
        ``eos_token_id`` list of ``generation_config.json``), without repeats."""
        ids = ([] if self.eos_id is None else [self.eos_id]) + list(self.extra_stop_ids)
        return tuple(dict.fromkeys(ids))

    def token_text(self, token_id: int | None) -> str | None:
        """The text of a special token's id (what a chat template's ``bos_token`` is)."""
        return None if token_id is None else self.decode([token_id])

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        raise NotImplementedError

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (special-token strings in it map to their ids)."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``."""
        raise NotImplementedError

    def save(self, directory: str | Path) -> Path:
        """Writes the tokenizer into ``directory`` (created); returns it."""
        raise NotImplementedError

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """Renders a conversation with the model's chat template.

        Args:
          messages: ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``.
          add_generation_prompt: end with the assistant header so the model answers next.

        Returns:
          The prompt text (encode it with :meth:`encode`; the special tokens it contains map to
          their ids).
        """
        specials = {"bos_token": self.token_text(self.bos_id)}
        specials["eos_token"] = self.token_text(self.eos_id)
        return render_chat_template(self.chat_template, messages, add_generation_prompt, specials)

    def encode_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of a conversation: :meth:`apply_chat_template` encoded without adding
        special tokens (the template writes the BOS it wants; transformers'
        ``apply_chat_template(tokenize=True)``)."""
        text = self.apply_chat_template(messages, add_generation_prompt)
        return self.encode(text, add_special_tokens=False)

    def _manifest(self, kind: str, **extra) -> dict:
        return {
            "kind": kind,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "chat_template": self.chat_template,
            "extra_stop_ids": list(self.extra_stop_ids),
            **extra,
        }


class Tokenizer(TokenizerBase):
    """A ``tokenizers.Tokenizer`` with the ids and chat template specjax needs.

    Attributes:
      backend: the wrapped ``tokenizers.Tokenizer``.
      bos_id: beginning-of-sequence id, or None.
      eos_id: end-of-sequence id (generation stops there), or None.
      chat_template: Jinja chat template text, or None.
      extra_stop_ids: other ids generation stops at (e.g. Llama 3's ``<|eot_id|>``).
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        bos_id: int | None = None,
        eos_id: int | None = None,
        chat_template: str | None = None,
        extra_stop_ids: Sequence[int] = (),
    ):
        self.backend = backend
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.chat_template = chat_template
        self.extra_stop_ids = tuple(int(i) for i in extra_stop_ids)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """The id of a token string, or None."""
        return self.backend.token_to_id(token)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        write_json(directory / MANIFEST, self._manifest("bpe"))
        return directory

    @classmethod
    def from_hf_dir(cls, directory: str | Path) -> Tokenizer:
        """Loads ``tokenizer.json`` from a directory, with what transformers reads beside it:
        special tokens and the chat template from ``tokenizer_config.json`` (or
        ``chat_template.jinja``, ``config.json``); its ``add_bos_token`` / ``add_eos_token``,
        when given, decide what :meth:`encode` adds (else ``tokenizer.json``'s post-processor);
        stop tokens from ``generation_config.json`` and ``config.json`` (``eos_token_id``, an
        id or a list).

        Raises:
          FileNotFoundError: no ``tokenizer.json`` in ``directory``.
        """
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"no tokenizer.json in {directory}; copy the model's tokenizer.json there"
            )
        backend = tokenizers.Tokenizer.from_file(str(path))
        tok_cfg = _read_json_if(directory / "tokenizer_config.json")
        model_cfg = _read_json_if(directory / "config.json")

        def special(name):
            token = tok_cfg.get(f"{name}_token")
            if isinstance(token, dict):
                token = token.get("content")
            if isinstance(token, str) and backend.token_to_id(token) is not None:
                return backend.token_to_id(token)
            if f"{name}_token" in tok_cfg:  # set to null: none (Qwen has no BOS)
                return None
            value = model_cfg.get(f"{name}_token_id")
            return value[0] if isinstance(value, list) and value else _opt_int(value)

        template = tok_cfg.get("chat_template")
        if template is None and (directory / "chat_template.jinja").is_file():
            template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default", next(iter(named.values()), None))
        bos, eos = special("bos"), special("eos")
        if "add_bos_token" in tok_cfg or "add_eos_token" in tok_cfg:
            _set_specials_added(
                backend,
                bos if tok_cfg.get("add_bos_token") else None,
                eos if tok_cfg.get("add_eos_token") else None,
            )
        gen_cfg = _read_json_if(directory / "generation_config.json")
        stops = [i for cfg in (gen_cfg, model_cfg) for i in _ids(cfg.get("eos_token_id"))]
        return cls(backend, bos, eos, template, stops)


class ByteTokenizer(TokenizerBase):
    """UTF-8 bytes as ids 0..255, then optional special tokens at 256, 257, ...

    Args:
      specials: special token strings (e.g. ``["<bos>", "<eos>"]``), given ids from 256 on.
      bos: which special is beginning-of-sequence (its string), or None.
      eos: which special is end-of-sequence, or None.
      chat_template: optional Jinja chat template.
    """

    def __init__(
        self,
        specials: Sequence[str] = (),
        bos: str | None = None,
        eos: str | None = None,
        chat_template: str | None = None,
    ):
        self.specials = list(specials)
        if len(set(self.specials)) != len(self.specials) or "" in self.specials:
            raise ValueError(f"special tokens must be distinct non-empty strings: {self.specials}")
        index = {s: 256 + i for i, s in enumerate(self.specials)}
        for name, value in (("bos", bos), ("eos", eos)):
            if value is not None and value not in index:
                raise ValueError(f"{name}={value!r} is not one of the specials {self.specials}")
        self.bos_id = index.get(bos)
        self.eos_id = index.get(eos)
        self.chat_template = chat_template
        self._index = index
        self._split = (
            re.compile("(" + "|".join(re.escape(s) for s in sorted(index, key=len)[::-1]) + ")")
            if index
            else None
        )

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.specials)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """UTF-8 bytes of ``text``; special strings in it become their ids. No BOS is added
        unless ``add_special_tokens`` and a ``bos`` special exist."""
        pieces = self._split.split(text) if self._split else [text]
        ids = [self.bos_id] if add_special_tokens and self.bos_id is not None else []
        for piece in pieces:
            ids.extend([self._index[piece]] if piece in self._index else piece.encode("utf-8"))
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        out, buf = [], bytearray()
        for i in map(int, ids):
            if 0 <= i < 256:
                buf.append(i)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            if not 256 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside the byte vocabulary [0, {self.vocab_size})")
            if not skip_special_tokens:
                out.append(self.specials[i - 256])
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        bos = None if self.bos_id is None else self.specials[self.bos_id - 256]
        eos = None if self.eos_id is None else self.specials[self.eos_id - 256]
        manifest = self._manifest("bytes", specials=self.specials, bos=bos, eos=eos)
        write_json(directory / MANIFEST, manifest)
        return directory


def load_tokenizer(directory: str | Path) -> TokenizerBase:
    """Loads a tokenizer written by :meth:`TokenizerBase.save` (or a bare HF ``tokenizer.json``).

    Raises:
      FileNotFoundError: the directory holds neither file.
      ValueError: an unreadable manifest.
    """
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        return Tokenizer.from_hf_dir(directory)
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        kind = manifest["kind"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{manifest_path} is not a specjax tokenizer manifest ({e})") from e
    template = manifest.get("chat_template")
    if kind == "bytes":
        return ByteTokenizer(manifest["specials"], manifest["bos"], manifest["eos"], template)
    if kind == "bpe":
        backend = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
        stops = manifest.get("extra_stop_ids", ())
        return Tokenizer(backend, manifest["bos_id"], manifest["eos_id"], template, stops)
    raise ValueError(
        f"{manifest_path}: unknown tokenizer kind {kind!r} (expected 'bpe' or 'bytes')"
    )


# ---------------------------------------------------------------------------- helpers


def _ids(value) -> list[int]:
    """``eos_token_id`` as a list (it may be an id, a list of ids or absent)."""
    if value is None:
        return []
    return [int(i) for i in (value if isinstance(value, list) else [value])]


def _set_specials_added(backend: tokenizers.Tokenizer, bos: int | None, eos: int | None):
    """Makes ``encode`` add exactly ``bos`` before and ``eos`` after the text (either may be
    None), as transformers rebuilds the post-processor from ``add_bos_token`` /
    ``add_eos_token``."""
    name = backend.id_to_token
    single = " ".join(
        [*([f"{name(bos)}:0"] if bos is not None else []), "$A:0"]
        + ([f"{name(eos)}:0"] if eos is not None else [])
    )
    used = [(name(i), i) for i in (bos, eos) if i is not None]
    backend.post_processor = processors.TemplateProcessing(single=single, special_tokens=used)


def _opt_int(value) -> int | None:
    return None if value is None else int(value)


def _read_json_if(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from e
