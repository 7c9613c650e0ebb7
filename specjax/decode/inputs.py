"""Checking and padding a generation's inputs before anything is compiled.

:func:`prepare` turns prompts of any lengths into the padded arrays and static sizes of a compiled
generation, rounded up to :class:`~specjax.decode.buckets.ShapeBuckets` so that different prompts
reuse one program. Every problem is one ``ValueError`` naming the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from specjax.decode import widths
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import AUTOREGRESSIVE, DecodeConfig
from specjax.drafters.base import Drafter, draws_with_replacement
from specjax.sampling import is_int


class PreparedBatch(NamedTuple):
    """A padded prompt batch and the static sizes of its program.

    Attributes:
      prompts: int32 ``[B, T]`` right-padded prompts (B and T rounded up to buckets).
      lengths: int32 ``[B]`` true prompt lengths (1 for padding rows).
      active: bool ``[B]``: real rows (the first ``rows``); padding rows start done.
      rows: how many prompts were given.
      capacity: S of the KV caches.
      buffer: length of the token buffer.
    """

    prompts: np.ndarray
    lengths: np.ndarray
    active: np.ndarray
    rows: int
    capacity: int
    buffer: int


def tree_positions(num_paths: int, draft_len: int) -> int:
    """Cache positions a step takes beyond the committed tokens: the draft tree's K L nodes,
    the root, and one spare slot (2 for autoregressive decoding)."""
    return num_paths * draft_len + 2


def check_config(config) -> None:
    """One clear error unless ``config`` is a :class:`DecodeConfig` (e.g. arguments swapped)."""
    if not isinstance(config, DecodeConfig):
        raise TypeError(
            f"config must be a DecodeConfig, e.g. DecodeConfig('block', SamplingParams(0.7), "
            f"128), got {type(config).__name__}; the order is (target, prompts, config, drafter)"
        )


def check_seed(seed: int, headroom: int = 0) -> None:
    """One clear error unless ``seed .. seed + headroom`` fit the PRNG's int32."""
    if not is_int(seed):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if not -(2**31) <= seed < 2**31 - headroom:
        raise ValueError(
            f"seed {seed} does not fit the PRNG's int32; use 0 .. {2**31 - headroom - 1}"
        )


def check_paths(config: DecodeConfig, num_paths: int, fixed: bool) -> None:
    """One clear error unless ``config``'s verifier can verify ``num_paths`` draft paths;
    ``fixed``: the paths are fixed proposals (n-gram matches, a feature head's top choices), not
    i.i.d. samples."""
    if config.multipath is False and num_paths > 1:
        raise ValueError(
            f"verifier {config.verifier!r} verifies one chain but the drafter proposes "
            f"{num_paths} paths; set num_paths=1 or use specinfer, spectr or gbv"
        )
    if fixed:
        if not config.greedy:
            raise ValueError(
                f"{num_paths} fixed draft paths (n-gram matches, top_paths) are not i.i.d. "
                "draft samples: exact at temperature 0 only; set temperature=0 or num_paths=1"
            )
        if config.verifier != "specinfer":
            raise ValueError(
                f"{num_paths} fixed draft paths sharing a prefix propose different next "
                f"tokens, which {config.verifier!r} (built for i.i.d. paths) does not allow; "
                "use verifier=specinfer"
            )


def check_replacement(config: DecodeConfig, replacement: bool) -> None:
    """One clear error if paths drawn without replacement (a drafter's ``replacement=False``)
    meet a verifier other than ``specinfer``, the only one told how sibling paths were drawn."""
    if not replacement and config.verifier not in ("specinfer", AUTOREGRESSIVE):
        raise ValueError(
            f"verifier {config.verifier!r} assumes i.i.d. draft paths; set replacement=True "
            "on the drafter (only specinfer verifies paths drawn without replacement)"
        )


def check_prompt(prompt, vocab: int, name: str = "the prompt") -> None:
    """One clear error unless ``prompt`` is a non-empty list (or 1-D integer array) of token
    ids in ``[0, vocab)``: a string, a float id or a nested list names the expected form."""
    form = f"{name} must be a list of token ids (ints)"
    dtype = getattr(prompt, "dtype", None)
    if dtype is not None:  # a NumPy or JAX array
        if np.ndim(prompt) != 1 or not np.issubdtype(dtype, np.integer):
            raise ValueError(f"{form}, got an array of {dtype} with shape {np.shape(prompt)}")
    elif isinstance(prompt, list | tuple):
        for token in prompt:
            if not is_int(token):
                raise ValueError(f"{form}, but it holds {type(token).__name__} {token!r}")
    else:
        raise ValueError(
            f"{form}, got {type(prompt).__name__}; encode text with the model's tokenizer first"
        )
    if len(prompt) == 0:
        raise ValueError(f"{name} is empty; give at least one token")
    if int(np.min(prompt)) < 0 or int(np.max(prompt)) >= vocab:
        raise ValueError(f"{name} has token ids outside [0, {vocab}); wrong tokenizer?")


def couple(drafter, config: DecodeConfig):
    """``drafter`` for ``config``: with the ``gumbel`` verifier, one whose draws use the rows'
    noise (``coupled``: the drafter-invariant coupling); deterministic drafters (n-gram) have
    nothing to couple. Unchanged otherwise."""
    if config.verifier != "gumbel" or drafter is None or not drafter.coupleable:
        return drafter
    return dataclasses.replace(drafter, coupled=True)


def check_drafter(target, drafter: Drafter | None, config: DecodeConfig) -> None:
    """One clear error if ``drafter`` cannot serve ``config``'s verifier on ``target``."""
    if config.speculative and drafter is None:
        raise ValueError(f"verifier {config.verifier!r} needs a drafter; pass one")
    if drafter is None:
        return
    check_paths(config, drafter.num_paths, drafter.greedy_only)
    widths.check_widths(config.widths, drafter.draft_len)
    check_replacement(config, draws_with_replacement(drafter))
    if config.verifier == "gumbel" and drafter.sampled and not drafter.coupleable:
        raise ValueError(
            f"verifier 'gumbel' couples the drafter's draws with the target's noise; "
            f"{type(drafter).__name__} cannot: use block, or a model, feature or n-gram drafter"
        )
    if drafter.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"draft vocab_size {drafter.vocab_size} != target vocab_size "
            f"{target.config.vocab_size}; draft and target must share one tokenizer"
        )


def prepare(
    target,
    drafter: Drafter | None,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    buckets: ShapeBuckets = DEFAULT,
    batch_multiple: int = 1,
) -> PreparedBatch:
    """Checks the inputs and pads them to ``buckets``.

    Args:
      target: the target model; drafter: the drafter or None.
      prompts: token ids per row (lengths >= 1).
      config: the decoding config.
      buckets: the shape buckets (:data:`~specjax.decode.buckets.EXACT` for none).
      batch_multiple: the padded batch is a multiple of this (a mesh's ``data`` axis).
    """
    check_drafter(target, drafter, config)
    if not isinstance(prompts, list | tuple) and np.ndim(prompts) != 2:
        raise ValueError(
            "prompts must be a list of prompts, each a list of token ids (ints); got "
            f"{type(prompts).__name__}"
        )
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    if all(map(is_int, prompts)):
        raise ValueError(
            "prompts must be a list of lists of token ids: got one flat list of ids; wrap "
            "a single prompt as [ids]"
        )
    vocab = target.config.vocab_size
    for i, p in enumerate(prompts):
        check_prompt(p, vocab, f"prompt {i}")
    lengths = [len(p) for p in prompts]
    k_paths = 1 if drafter is None else drafter.num_paths
    draft_len = 0 if drafter is None else drafter.draft_len
    tree = tree_positions(k_paths, draft_len)
    longest = max(lengths)
    limits = [target.config.max_seq_len, None if drafter is None else drafter.max_seq_len]
    limit = min(x for x in limits if x is not None)
    if tree + 2 > limit:  # even a one-token prompt and one new token would not fit
        raise ValueError(
            f"the draft tree of num_paths ({k_paths}) x draft_len ({draft_len}) + 2 = {tree} "
            f"positions leaves no room in the model's max_seq_len {limit}; lower num_paths or "
            "the draft length (CLI: num_speculative_tokens)"
        )
    if longest + config.max_new_tokens + tree > limit:
        raise ValueError(
            f"prompt ({longest} tokens) + max_new_tokens ({config.max_new_tokens}) + draft tree "
            f"({tree}) = {longest + config.max_new_tokens + tree} positions exceed the "
            f"model's max_seq_len {limit}; shorten the prompt or lower max_new_tokens"
        )
    width = buckets.prompt_length(longest, limit - config.max_new_tokens - tree)
    batch = buckets.batch_size(len(prompts), batch_multiple)
    padded = np.zeros((batch, width), np.int32)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
    true_lengths = np.ones((batch,), np.int32)
    true_lengths[: len(prompts)] = lengths
    active = np.arange(batch) < len(prompts)
    capacity = width + config.max_new_tokens + tree
    buffer = width + config.max_new_tokens + draft_len + 1
    return PreparedBatch(padded, true_lengths, active, len(prompts), capacity, buffer)


def on_device(models: tuple, inputs: tuple) -> tuple:
    """``(*models, *inputs)`` placed on the default device for a program's arguments: the inputs
    with ``device_put`` (``jnp.asarray`` compiles a conversion per shape, 11-30 ms the first
    time), the models as they are when every weight is already a device array (a ``device_put``
    per weight cost ~4 ms of host time per generate call for SmolLM2's ~270 arrays)."""
    if not all(isinstance(x, jax.Array) for x in jax.tree.leaves(models)):
        models = jax.device_put(models)
    return (*models, *jax.device_put(inputs))
