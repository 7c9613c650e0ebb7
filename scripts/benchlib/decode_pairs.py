"""``bench_decode.py``'s draft/target pairs, their prompts, and its grid of configurations."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import app

from specjax import verify
from specjax.decode import AUTOREGRESSIVE
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.models import PureModel
from specjax.models import load_pair as load_shipped_pair
from specjax.models.fetch import FILENAME
from specjax.sampling import SamplingParams

CHAIN = tuple(verify.CHAIN_VERIFIERS)  # greedy, token, block
MULTIPATH = tuple(verify.MULTIPATH_VERIFIERS)  # specinfer, spectr, gbv
ALL_VERIFIERS = CHAIN + MULTIPATH

SHAKESPEARE_PROMPTS = (
    "ROMEO:\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "KING RICHARD III:\n",
)

CODE_SNIPPETS = (
    '''def moving_average(values, window):
    """Returns the moving averages of values over a sliding window."""
    if window <= 0:
        raise ValueError("window must be positive")
    total = 0.0
    averages = []
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            averages.append(total / window)
    return averages''',
    '''def count_words(lines):
    """Counts how often each word occurs in the given lines."""
    counts = {}
    for line in lines:
        for word in line.lower().split():
            word = word.strip(".,;:!?")
            if not word:
                continue
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda item: item[1], reverse=True)''',
)

SMOLLM2_REQUEST = (
    "Rewrite the following Python function exactly as it is, changing only the name of the "
    "function to `{name}`. Output the whole code.\n\n```python\n{code}\n```"
)


@dataclasses.dataclass
class Pair:
    """A target, how to build its drafter, and the prompts."""

    name: str
    description: str
    target: PureModel
    make_drafter: Callable[[SamplingParams, int, int], Any]
    prompts: list[list[int]]
    prompt_note: str
    chain_only: bool  # the drafter proposes one chain (K = 1)


def parameter_count(model: PureModel) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(model.state))


def cycle(prompts: list, batch: int) -> list:
    """``batch`` rows: the prompts repeated in turn."""
    return [prompts[i % len(prompts)] for i in range(batch)]


def shakespeare(directory: str, batch: int) -> Pair:
    """The committed byte-level target and its distilled draft model (``directory`` relative to
    the working directory, else to the repository root)."""
    shipped = load_shipped_pair("shakespeare", source=directory)
    target, draft, tokenizer = shipped.target, shipped.draft, shipped.tokenizer
    prompts = [tokenizer.encode(t) for t in SHAKESPEARE_PROMPTS]
    used = cycle(list(SHAKESPEARE_PROMPTS), batch)
    return Pair(
        name="shakespeare",
        description=(
            f"target `{target.config.name}` ({parameter_count(target) / 1e6:.2f}M parameters), "
            f"draft model `{draft.config.name}` ({parameter_count(draft) / 1e6:.2f}M), byte-level"
        ),
        target=target,
        make_drafter=lambda sp, k, l: ModelDrafter(
            draft, num_paths=k, draft_len=l, sampling=sp, replacement=True
        ),
        prompts=cycle(prompts, batch),
        prompt_note="prompts " + ", ".join(repr(t) for t in used),
        chain_only=False,
    )


def smollm2(source: str, batch: int) -> Pair:
    """SmolLM2-135M-Instruct (``source``: ``smollm2`` or a path) with the n-gram drafter, asked
    through its chat template to reproduce a code snippet."""
    shipped = load_shipped_pair("smollm2", source=source)
    target, tokenizer = shipped.target, shipped.tokenizer
    vocab = target.config.vocab_size
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": SMOLLM2_REQUEST.format(name=f"f{i}", code=code)}]
        )
        for i, code in enumerate(CODE_SNIPPETS)
    ]
    used = cycle([tokenizer.encode(t) for t in texts], batch)
    filename = FILENAME if source == "smollm2" else pathlib.Path(source).name
    return Pair(
        name="smollm2",
        description=(
            f"target SmolLM2-135M-Instruct (`{filename}`, {parameter_count(target) / 1e6:.0f}M "
            "parameters, dequantized to fp32), n-gram drafter (max_ngram 3, min_ngram 1; "
            "one chain)"
        ),
        target=target,
        make_drafter=lambda sp, k, l: NgramDrafter(vocab, draft_len=l, max_ngram=3, min_ngram=1),
        prompts=used,
        prompt_note=(
            "chat-template prompts asking to reproduce a Python function with one rename "
            f"({', '.join(str(len(p)) for p in used)} tokens)"
        ),
        chain_only=True,
    )


def load_pair(name: str, batch: int, sources: dict[str, str]) -> Pair:
    """Pair ``name`` with ``batch`` rows; ``sources[name]`` says where its models are."""
    pairs = {"shakespeare": shakespeare, "smollm2": smollm2}
    if name not in pairs:
        raise app.UsageError(f"unknown pair {name!r}; choose shakespeare or smollm2")
    return pairs[name](sources[name], batch)


@dataclasses.dataclass(frozen=True)
class Case:
    verifier: str
    k: int
    l: int

    @property
    def label(self) -> str:
        if self.verifier == AUTOREGRESSIVE:
            return "autoregressive"
        return f"{self.verifier} K={self.k} L={self.l}"


AR_CASE = Case(AUTOREGRESSIVE, 0, 0)


def order(case: Case) -> tuple[int, int, int]:
    """Table order: verifiers as in ``ALL_VERIFIERS``, then K, then L."""
    return (ALL_VERIFIERS.index(case.verifier), case.k, case.l)


def cases_for(pair: Pair, temperature: float, verifiers, paths, lengths) -> list[Case]:
    out = []
    for v in verifiers:
        if v == "greedy" and temperature > 0:
            continue
        ks = (1,) if v in CHAIN or pair.chain_only else paths
        out += [Case(v, k, l) for k in ks for l in lengths]
    return out


def representative(pair: Pair, verifier: str, paths, lengths) -> Case:
    """The configuration shown in the histogram (and timed for overhead): the middle L; K = 1
    for chains and the n-gram drafter, else K = 2 (or the largest K run)."""
    l = sorted(lengths)[len(lengths) // 2]
    if verifier in CHAIN or pair.chain_only:
        return Case(verifier, 1, l)
    return Case(verifier, 2 if 2 in paths else max(paths), l)
