"""What every drafter returns and the interface the decoding loop calls.

A drafter is a pytree (its weights are leaves, its knobs static), so the jitted speculative step
takes it as an argument. Per step the loop calls ``propose`` (before the target's tree forward)
and ``commit`` (after verification, to keep only the accepted path in the drafter's state).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

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
    """The drafter interface (see :class:`~specjax.drafters.ModelDrafter`).

    Constructors take the model (or the vocabulary size) positionally and every knob by keyword,
    in one order: ``num_paths``, ``draft_len``, the drafter's own knobs, ``replacement``.
    """

    num_paths: int  # K
    draft_len: int  # L
    # Whether sibling paths are i.i.d. (True) or drawn without replacement (False): the one place
    # this is stated; the step tells the specinfer verifier (see draws_with_replacement).
    replacement: bool
    vocab_size: int  # V; must equal the target's
    max_seq_len: int | None  # the longest sequence the drafter can hold (None: no limit)
    greedy_only: bool  # paths are fixed proposals: exact at temperature 0 only (specinfer)
    tensor_parallel: bool  # weights split over a mesh's ``model`` axis (False: replicated/none)

    def init(self, prompts: Array, prompt_lengths: Array, capacity: int) -> Any:
        """The drafter state after the prompts ``[B, T]`` (right-padded, lengths ``[B]``)."""

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
    ) -> Any:
        """State after path ``path [B]``'s first ``num_accepted [B]`` tokens were accepted.

        ``before``/``after`` are the states before and after ``propose``; ``lengths [B]`` the
        sequence lengths at propose time; rows with ``active [B]`` False keep ``before``.
        """


def draws_with_replacement(drafter) -> bool:
    """The ``replacement`` of ``drafter``: True (i.i.d. sibling paths) for None (autoregressive
    decoding) and for a drafter that does not state it."""
    return bool(getattr(drafter, "replacement", True))


def catches_up(drafter) -> bool:
    """Whether ``drafter`` feeds, at its next draft, every committed token it has not seen (a
    model draft: :attr:`~specjax.drafters.ModelDrafter.idle_catch_up`), so its cache may fall
    behind: over width-0 steps, or from the start (``ModelDrafter.init(lazy=True)``), and its
    catch-up grows with the steps it missed (a feature draft flushes its few pending tokens as
    it goes; an n-gram drafter has nothing to feed)."""
    return bool(getattr(drafter, "idle_catch_up", False))


def check_types(drafter, sampled: bool = True, **ints) -> None:
    """One clear ``TypeError`` unless ``ints`` (name -> value) are ints and, if ``sampled``,
    ``drafter.sampling`` is a :class:`~specjax.sampling.SamplingParams` (at construction, not
    deep inside a compiled program)."""
    for name, value in ints.items():
        if not is_int(value):
            got = repr(value) if len(repr(value)) < 60 else f"a {type(value).__name__}"
            raise TypeError(f"{type(drafter).__name__}: {name} must be an int, got {got}")
    if sampled and not isinstance(drafter.sampling, SamplingParams):
        raise TypeError(
            f"{type(drafter).__name__}: sampling must be a SamplingParams (the target's), got "
            f"{drafter.sampling!r}"
        )
