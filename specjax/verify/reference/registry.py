"""Registry of the NumPy reference laws by verifier name, and :func:`law` to call one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specjax.verify.reference.chain import block_law, greedy_law, gumbel_law, token_law
from specjax.verify.reference.common import Law
from specjax.verify.reference.gbv import gbv_law
from specjax.verify.reference.multi_draft import specinfer_law, spectr_law

LAWS: dict[str, Callable[..., Law]] = {
    "greedy": greedy_law,
    "token": token_law,
    "block": block_law,
    "specinfer": specinfer_law,
    "spectr": spectr_law,
    "gbv": gbv_law,
    "gumbel": gumbel_law,
}
"""Reference law of every verifier, by registry name."""

CHAIN_LAWS: Sequence[str] = ("greedy", "token", "block", "gumbel")
"""Names whose laws take chain ``[L]`` inputs; the others take multi-path ``[K, L]`` inputs."""


def law(name: str, draft_tokens, draft_probs, target_probs, num_draft=None, **kwargs) -> Law:
    """Returns the exact outcome law of verifier ``name`` on one row.

    Args:
      name: a key of :data:`LAWS`.
      draft_tokens: ``[L]`` for chain verifiers, ``[K, L]`` for multi-path ones.
      draft_probs: ``[L, V]`` or ``[K, L, V]``.
      target_probs: ``[L+1, V]`` or ``[K, L+1, V]``.
      num_draft: valid draft tokens (int, or int / ``[K]`` for multi-path).
      **kwargs: extra options of the verifier (``replacement`` for ``specinfer``).

    Raises:
      ValueError: for an unknown name.
    """
    if name not in LAWS:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(sorted(LAWS))}")
    return LAWS[name](draft_tokens, draft_probs, target_probs, num_draft, **kwargs)
