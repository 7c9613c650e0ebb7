"""What every drafter returns and the interface the decoding loop calls.

A drafter is a pytree (its weights are leaves, its knobs static), so the jitted speculative step
takes it as an argument. Per step the loop calls ``propose`` (before the target's tree forward)
and ``commit`` (after verification, to keep only the accepted path in the drafter's state).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol

import jax.numpy as jnp

from specjax.row_sampling import RowSampling
from specjax.sampling import SamplingParams, is_int
from specjax.typing import Array, PRNGKey


class Draft(NamedTuple):
    """K draft paths of L tokens per row.

    Attributes:
      tokens: int32 ``[B, K, L]`` (-1 past ``num_draft``).
      probs: float32 ``[B, K, L, V]``: row (k, i) is the exact law token (k, i) was drawn from
        (after temperature / top-k / top-p; one-hot for deterministic drafters).
      num_draft: int32 ``[B, K]`` valid tokens per path.
    """

    tokens: Array
    probs: Array
    num_draft: Array


class Drafter(Protocol):
    """The drafter interface (see :class:`~specjax.drafters.ModelDrafter`). Every capability the
    decoding loop uses is declared here; :class:`DrafterBase` gives the optional ones their
    defaults, so a drafter subclasses it and overrides what it has.

    Constructors take the model (or the vocabulary size) positionally and every knob by keyword,
    in one order: ``num_paths``, ``draft_len``, the drafter's own knobs, ``replacement``.
    """

    num_paths: int  # K
    draft_len: int  # L
    # Whether sibling paths are i.i.d. (True) or drawn without replacement (False): the one place
    # this is stated; the step tells the specinfer verifier.
    replacement: bool
    vocab_size: int  # V; must equal the target's
    max_seq_len: int | None  # the longest sequence the drafter can hold (None: no limit)
    greedy_only: bool  # paths are fixed proposals: exact at temperature 0 only (specinfer)
    tensor_parallel: bool  # weights split over a mesh's ``model`` axis (False: replicated/none)
    sampled: bool  # it draws from the law of its ``sampling`` field (False: fixed proposals)
    coupleable: bool  # it can draw with the target's Gumbel noise (a ``coupled`` field)
    free_look: bool  # :meth:`hint` knows the first proposed token before drafting
    # After width-0 steps its next draft feeds the tokens it missed; such a drafter has a
    # static ``far_behind`` field (:func:`near`).
    idle_catch_up: bool
    feature_layers: tuple[int, ...]  # target blocks whose hidden states it reads

    def init(self, prompts: Array, prompt_lengths: Array, capacity: int, **extra) -> Any:
        """The drafter state after the prompts ``[B, T]`` (right-padded, lengths ``[B]``);
        ``features=`` the target's hidden states of the prompt where :attr:`feature_layers`,
        ``lazy=True`` to read the prompt at the first draft where :attr:`idle_catch_up`."""

    def propose(
        self, state: Any, keys: PRNGKey, tokens: Array, lengths: Array
    ) -> tuple[Draft, Any]:
        """Drafts after ``tokens[b, :lengths[b]]`` (``tokens [B, U]``) with per-row ``keys [B]``."""

    def commit(
        self,
        before: Any,
        after: Any,
        lengths: Array,
        path: Array,
        num_accepted: Array,
        active: Array,
        **extra,
    ) -> Any:
        """State after path ``path [B]``'s first ``num_accepted [B]`` tokens were accepted.

        ``before``/``after`` are the states before and after ``propose``; ``lengths [B]`` the
        sequence lengths at propose time; rows with ``active [B]`` False keep ``before``;
        ``features=`` the target's features at the root and the path ``[B, L + 1, A, D]`` where
        :attr:`feature_layers`.
        """

    def skip(self, state: Any, tokens: Array, lengths: Array, active: Array, **extra) -> Any:
        """State after a step without a draft (width 0) committed one token per active row
        (``features=`` its target features ``[B, 1, A, D]`` where :attr:`feature_layers`)."""

    def hint(self, tokens: Array, lengths: Array) -> tuple[Array, Array]:
        """``(most tokens it can propose [B], its first proposed token [B] or -1)``, known
        before drafting."""


class DrafterBase:
    """The defaults of :class:`Drafter`'s optional capabilities: a drafter that samples its
    tokens, cannot couple them to the target's noise, has no free look, keeps no state that
    falls behind, reads no target features, and has nothing to do when a step skips drafting."""

    tensor_parallel = False
    sampled = True
    coupleable = False
    free_look = False
    idle_catch_up = False
    feature_layers: tuple[int, ...] = ()

    def skip(self, state, tokens, lengths, active, **extra):
        return state

    def hint(self, tokens: Array, lengths: Array) -> tuple[Array, Array]:
        b = lengths.shape[0]
        return jnp.full((b,), self.draft_len, jnp.int32), jnp.full((b,), -1, jnp.int32)


def draws_with_replacement(drafter) -> bool:
    """The ``replacement`` of ``drafter``: True (i.i.d. sibling paths) for None (autoregressive
    decoding)."""
    return drafter is None or bool(drafter.replacement)


def catches_up(drafter) -> bool:
    """Whether ``drafter`` feeds, at its next draft, every committed token it has not seen
    (:attr:`Drafter.idle_catch_up`), so its state may fall behind over width-0 steps."""
    return drafter is not None and bool(drafter.idle_catch_up)


def near(drafter, widths: tuple[int, ...]):
    """``drafter`` for steps drafting at ``widths`` (``DecodeConfig.widths``; () for the
    drafter's L at every step). A drafter that catches up (:func:`catches_up`) falls more than
    L + 3 tokens behind only over width-0 steps or after a lazy ``init``, both only with 0 among
    the widths; elsewhere it is told so (its ``far_behind`` False), and its catch-up is one
    bounded feed instead of a loop (no loop inside a step: docs/architecture.md)."""
    if catches_up(drafter) and 0 not in widths:
        return dataclasses.replace(drafter, far_behind=False)
    return drafter


def feature_layers(drafter) -> tuple[int, ...]:
    """The target blocks a drafter reads (``()`` for None and drafters reading none)."""
    return () if drafter is None else tuple(drafter.feature_layers)


def with_sampling(drafter, params: SamplingParams | RowSampling):
    """``drafter`` drawing with ``params`` where they are per row (a :attr:`Drafter.sampled`
    drafter's ``sampling`` replaced inside the step: the rows' values are traced); else
    unchanged (static params: the drafter keeps its own; unsampled drafters propose fixed
    tokens)."""
    if not isinstance(params, RowSampling) or not drafter.sampled:
        return drafter
    return dataclasses.replace(drafter, sampling=params)


def check_types(drafter, sampled: bool = True, **ints) -> None:
    """One clear ``TypeError`` unless ``ints`` (name -> value) are ints and, if ``sampled``,
    ``drafter.sampling`` is a :class:`~specjax.sampling.SamplingParams` (at construction, not
    deep inside a compiled program)."""
    for name, value in ints.items():
        if not is_int(value):
            got = repr(value) if len(repr(value)) < 60 else f"a {type(value).__name__}"
            raise TypeError(f"{type(drafter).__name__}: {name} must be an int, got {got}")
    if sampled and not isinstance(drafter.sampling, SamplingParams | RowSampling):
        raise TypeError(
            f"{type(drafter).__name__}: sampling must be a SamplingParams (the target's), got "
            f"{drafter.sampling!r}"
        )
