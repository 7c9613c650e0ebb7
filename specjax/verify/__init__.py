"""specjax.verify: exact, jit-compiled speculative-decoding verifiers.

Pure functions over padded arrays (see :mod:`specjax.typing` for the dimension letters). Chain
verifiers take ``(key, draft_tokens [B, L], draft_probs [B, L, V], target_probs [B, L+1, V])``,
multi-path verifiers ``(key, draft_tokens [B, K, L], draft_probs [B, K, L, V], target_probs
[B, K, L+1, V])``; all accept ``num_draft=`` and return a :class:`VerifyResult`. The
drafter-invariant ``gumbel`` verifier takes the Gumbel noise of the positions in place of the key
(:data:`COUPLED_VERIFIERS`): its draws belong to positions, not to steps. A draft law
with a NaN, an infinity or a negative entry ends its path there, in every verifier
(:func:`~specjax.verify.common.sanitize_draft`): the output stays the target's law.

This package imports only jax and numpy: never flax, models or the decoding loop.
"""

from __future__ import annotations

from collections.abc import Callable

from specjax.verify.block import block_verify
from specjax.verify.common import VerifyResult
from specjax.verify.gbv import gbv_verify
from specjax.verify.greedy import greedy_verify
from specjax.verify.gumbel import coupled_acceptance, gumbel_max, gumbel_noise, gumbel_verify
from specjax.verify.optimal import optimal_acceptance
from specjax.verify.specinfer import specinfer_verify
from specjax.verify.spectr import spectr_verify
from specjax.verify.token import token_verify

CHAIN_VERIFIERS: dict[str, Callable[..., VerifyResult]] = {
    "greedy": greedy_verify,
    "token": token_verify,
    "block": block_verify,
}
"""Verifiers of one draft chain ``[B, L]``."""

MULTIPATH_VERIFIERS: dict[str, Callable[..., VerifyResult]] = {
    "specinfer": specinfer_verify,
    "spectr": spectr_verify,
    "gbv": gbv_verify,
}
"""Verifiers of K draft paths ``[B, K, L]``."""

VERIFIERS = {**CHAIN_VERIFIERS, **MULTIPATH_VERIFIERS}
"""The verifiers that take a PRNG key."""

COUPLED_VERIFIERS: dict[str, Callable[..., VerifyResult]] = {"gumbel": gumbel_verify}
"""Chain verifiers that take the Gumbel noise of the positions instead of a key
(:mod:`specjax.verify.gumbel`)."""

NAMES = (*VERIFIERS, *COUPLED_VERIFIERS)
"""Every verifier name."""


def get(name: str) -> Callable[..., VerifyResult]:
    """Returns the verifier registered under ``name``.

    Args:
      name: one of ``greedy``, ``token``, ``block``, ``gumbel`` (chain) or ``specinfer``,
        ``spectr``, ``gbv`` (multi-path).

    Raises:
      ValueError: for an unknown name, listing the known ones.
    """
    found = VERIFIERS.get(name) or COUPLED_VERIFIERS.get(name)
    if found is None:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(sorted(NAMES))}")
    return found


def is_multipath(name: str) -> bool:
    """Whether verifier ``name`` takes multi-path ``[B, K, L]`` drafts."""
    get(name)
    return name in MULTIPATH_VERIFIERS


__all__ = [
    "CHAIN_VERIFIERS",
    "COUPLED_VERIFIERS",
    "MULTIPATH_VERIFIERS",
    "NAMES",
    "VERIFIERS",
    "VerifyResult",
    "block_verify",
    "coupled_acceptance",
    "gbv_verify",
    "get",
    "greedy_verify",
    "gumbel_max",
    "gumbel_noise",
    "gumbel_verify",
    "is_multipath",
    "optimal_acceptance",
    "specinfer_verify",
    "spectr_verify",
    "token_verify",
]
