"""Text corpora as token arrays, split into train / validation, served as random windows.

Batches are a pure function of ``(seed, step)``, so an interrupted run that resumes from a
checkpoint at step s sees exactly the batches an uninterrupted run sees from step s on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class TokenData:
    """A tokenised corpus.

    Attributes:
      train: int32 ``[Z_train]`` training tokens.
      val: int32 ``[Z_val]`` held-out tokens (the tail of every document).
      vocab_size: the tokenizer's vocabulary size.
    """

    train: np.ndarray
    val: np.ndarray
    vocab_size: int


def read_corpus(paths: str | Path | Iterable[str | Path], pattern: str = "*.txt") -> list[str]:
    """Reads text documents from files and/or directories (``pattern`` inside directories).

    Raises:
      FileNotFoundError: a path does not exist.
      ValueError: no text at all was found.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    docs = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"corpus path {path} does not exist")
        files = sorted(path.rglob(pattern)) if path.is_dir() else [path]
        for file in files:
            text = file.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                docs.append(text)
    if not docs:
        raise ValueError(f"the corpus at {list(map(str, paths))} is empty: no non-blank text found")
    return docs


def tokenize(docs: list[str], tokenizer, val_fraction: float = 0.05) -> TokenData:
    """Tokenises documents; the last ``val_fraction`` of each document is held out.

    Args:
      docs: the documents.
      tokenizer: anything with ``encode(text, add_special_tokens=False)`` and ``vocab_size``.
      val_fraction: share of every document kept for validation.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if not docs or not any(d.strip() for d in docs):
        raise ValueError("the corpus is empty: no text to train on")
    train, val = [], []
    for doc in docs:
        ids = np.asarray(tokenizer.encode(doc, add_special_tokens=False), np.int32)
        cut = round(len(ids) * (1.0 - val_fraction))
        train.append(ids[:cut])
        val.append(ids[cut:])
    return TokenData(np.concatenate(train), np.concatenate(val), int(tokenizer.vocab_size))


def check_fits(tokens: np.ndarray, batch_size: int, seq_len: int, what: str = "training") -> None:
    """Raises one clear error if the tokens cannot fill one batch of windows."""
    need = batch_size * (seq_len + 1)
    if len(tokens) < need:
        raise ValueError(
            f"the {what} corpus has {len(tokens)} tokens, fewer than one batch of "
            f"{batch_size} x {seq_len + 1} = {need}; use more text or a smaller batch_size/seq_len"
        )


def check_vocab(data_vocab: int, model_vocab: int) -> None:
    """Raises one clear error if the tokenizer's ids do not fit the model's embedding."""
    if data_vocab > model_vocab:
        raise ValueError(
            f"tokenizer vocabulary ({data_vocab}) is larger than the model's vocab_size "
            f"({model_vocab}); set the model's vocab_size to at least {data_vocab}"
        )


def batch_at(tokens: np.ndarray, step: int, batch_size: int, seq_len: int, seed: int) -> np.ndarray:
    """The batch of step ``step``: ``batch_size`` random windows of ``seq_len + 1`` tokens.

    Returns:
      int32 ``[B, T + 1]`` (inputs are ``[:, :-1]``, targets ``[:, 1:]``).
    """
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - seq_len, size=batch_size)
    return np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int32)


def eval_batches(tokens: np.ndarray, batch_size: int, seq_len: int, num_batches: int):
    """Fixed, evenly spaced validation windows: ``num_batches`` arrays ``[B, T + 1]``."""
    count = batch_size * num_batches
    starts = np.linspace(0, len(tokens) - seq_len - 1, count).astype(np.int64)
    windows = np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int32)
    return [windows[i * batch_size : (i + 1) * batch_size] for i in range(num_batches)]
