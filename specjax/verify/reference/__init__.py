"""Slow, obviously-correct NumPy references of every verifier, as exact outcome laws.

Each ``*_law`` function takes ONE row (no batch dimension) of the verifier's inputs and returns
the exact probability law of its outcome as a dict ``{(tau, next_token, path): probability}``
holding only outcomes of positive probability. ``tau`` is the number of accepted draft tokens,
``next_token`` the correction (``tau < n``) or bonus (``tau == n``) token and ``path`` the draft
path followed (0 for chain verifiers). Everything is float64 and written for clarity, not speed:
these functions are the oracles that the jitted verifiers and the exact-enumeration tests
(``tests/enumeration/``) are checked against. The algorithms are specified in
``docs/algorithms.md`` (one section per verifier: greedy, token, block, SpecInfer, SpecTr, GBV).

Input layouts (q = draft, p = target):

* chain: ``draft_tokens [L]``, ``draft_probs [L, V]``, ``target_probs [L+1, V]``,
  ``num_draft`` an int ``n <= L`` (default ``L``);
* multi-path (path-major): ``draft_tokens [K, L]``, ``draft_probs [K, L, V]``,
  ``target_probs [K, L+1, V]``, ``num_draft`` an int or ``[K]`` (default ``L`` for every path).

Shared conventions: pad draft tokens are ``-1`` and end the draft (``n`` is cut at the first
one); nothing at an index ``>= n`` is accepted; when every valid token is accepted
(``tau == n``) the next token is drawn from the target row ``n`` of the path followed.

Modules: :mod:`.common` (types, input validation, shared helpers), :mod:`.chain` (greedy,
token, block), :mod:`.multi_draft` (SpecInfer, SpecTr tree walks), :mod:`.gbv` and
:mod:`.registry` (:data:`LAWS`, :func:`law`); the optimal-acceptance brute force lives in
:mod:`specjax.verify.optimal_reference` and is re-exported here.

Only numpy and the standard library are imported by this package.
"""

from __future__ import annotations

# The oracle's brute force (all 2^V subsets, exact draft-tuple laws) lives beside this package.
from specjax.verify.optimal_reference import draft_tuple_law, optimal_acceptance_bruteforce
from specjax.verify.reference.chain import (
    block_law,
    block_weights_and_stops,
    greedy_law,
    gumbel_law,
    token_law,
)
from specjax.verify.reference.common import Law, Outcome, add_outcome, expected_accepted
from specjax.verify.reference.gbv import gbv_law, gbv_select
from specjax.verify.reference.multi_draft import NodeRule, specinfer_law, spectr_law, spectr_rho
from specjax.verify.reference.registry import CHAIN_LAWS, LAWS, law

__all__ = [
    "CHAIN_LAWS",
    "LAWS",
    "Law",
    "NodeRule",
    "Outcome",
    "add_outcome",
    "block_law",
    "block_weights_and_stops",
    "draft_tuple_law",
    "expected_accepted",
    "gbv_law",
    "gbv_select",
    "greedy_law",
    "gumbel_law",
    "law",
    "optimal_acceptance_bruteforce",
    "specinfer_law",
    "spectr_law",
    "spectr_rho",
    "token_law",
]
