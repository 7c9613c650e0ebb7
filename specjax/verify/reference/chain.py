"""NumPy reference laws of the chain verifiers: greedy, token and block (docs/algorithms.md).

Each takes one chain row ``draft_tokens [L]``, ``draft_probs [L, V]``, ``target_probs [L+1, V]``
(see :mod:`specjax.verify.reference` for the conventions).
"""

from __future__ import annotations

import numpy as np

from specjax.verify.reference.common import (
    Law,
    accept_prob,
    add_outcome,
    chain_inputs,
    normalize_or,
)


def greedy_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Greedy verification (docs/algorithms.md): accept while the draft equals the target argmax.

    ``a_i = argmax p_i`` (first maximal index). The outcome is deterministic: tau = number of
    leading valid tokens equal to ``a_i``, next token ``a_tau``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]`` (unused; kept for a uniform signature).
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      ``{(tau, argmax p_tau, 0): 1.0}``.
    """
    tokens, _, p, n = chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    tau = 0
    while tau < n and tokens[tau] == int(np.argmax(p[tau])):
        tau += 1
    return {(tau, int(np.argmax(p[tau])), 0): 1.0}


def token_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Standard token-level speculative sampling (docs/algorithms.md, "Token verification").

    Token ``i`` (0-based) is accepted w.p. ``min(1, p_i(x_i) / q_i(x_i))``; the first rejection
    stops the walk and the correction is drawn from ``normalize(max(p_tau - q_tau, 0))``
    (``p_tau`` if that has no mass). If all ``n`` valid tokens are accepted the bonus is drawn
    from ``p_n``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]``, row ``i`` is the law ``x_i`` was drawn from.
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      The exact outcome law.
    """
    tokens, q, p, n = chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    law: Law = {}
    reach = 1.0  # P(tokens 0..i-1 all accepted)
    for i in range(n):
        x = int(tokens[i])
        accept = 0.0 if x < 0 else accept_prob(p[i, x], q[i, x])
        residual = normalize_or(np.maximum(p[i] - q[i], 0.0), p[i])
        add_outcome(law, i, residual, 0, reach * (1.0 - accept))
        reach *= accept
    add_outcome(law, n, p[n], 0, reach)
    return law


def block_weights_and_stops(
    draft_tokens, draft_probs, target_probs, num_draft=None
) -> tuple[np.ndarray, np.ndarray]:
    """Block verification weights ``w`` and stop probabilities ``h`` (docs/algorithms.md).

    Sequential recurrence: ``w_0 = 1``, ``w_i = min(w_{i-1} p(x_i) / q(x_i), 1)`` using 0-based
    rows ``i-1`` (a pad token or ``p(x_i) = 0`` gives ``w_i = 0``; ``q(x_i) = 0 < p(x_i)``
    gives ``w_i = 1``). For ``i < n``: ``r_i = max(w_i p_i - q_i, 0)`` with 0-based rows ``i``,
    ``Z_i = sum(r_i)``, ``h_i = Z_i / (Z_i + 1 - w_i)`` (1 if that denominator is ``<= 0``);
    ``h_n = w_n``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]``.
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      ``(w [n+1], h [n+1])``.
    """
    tokens, q, p, n = chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    w = np.empty(n + 1)
    w[0] = 1.0
    for i in range(1, n + 1):
        x = int(tokens[i - 1])
        if x < 0 or p[i - 1, x] <= 0:
            w[i] = 0.0
        elif q[i - 1, x] <= 0:
            w[i] = 1.0
        else:
            w[i] = min(w[i - 1] * p[i - 1, x] / q[i - 1, x], 1.0)
    h = np.empty(n + 1)
    for i in range(n):
        z = np.maximum(w[i] * p[i] - q[i], 0.0).sum()
        denominator = z + 1.0 - w[i]
        h[i] = z / denominator if denominator > 0 else 1.0
    h[n] = w[n]
    return w, h


def block_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Block verification (docs/algorithms.md, "Block verification"), "last success wins".

    ``P(tau = i) = h_i * prod_{j=i+1..n} (1 - h_j)`` with ``w, h`` from
    :func:`block_weights_and_stops`. For ``tau < n`` the correction is drawn from
    ``normalize(max(w_tau p_tau - q_tau, 0))`` (0-based rows ``tau``; ``p_tau`` if no mass);
    for ``tau == n`` from ``p_n``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]``.
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      The exact outcome law.
    """
    _, q, p, n = chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    w, h = block_weights_and_stops(draft_tokens, draft_probs, target_probs, num_draft)
    law: Law = {}
    for i in range(n + 1):
        prob_tau = h[i] * np.prod(1.0 - h[i + 1 :])
        if i < n:
            dist = normalize_or(np.maximum(w[i] * p[i] - q[i], 0.0), p[i])
        else:
            dist = p[n]
        add_outcome(law, i, dist, 0, float(prob_tau))
    return law


def gumbel_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Drafter-invariant (Gumbel) verification of a draft drawn independently of the target's
    noise (``specjax.verify.gumbel``): the target's token at each position is a sample of
    ``p_i``, independent across positions; a draft token is accepted while it equals it.

    ``P(tau = i, next = y) = prod_{j < i} p_j(x_j) * p_i(y) * [y != x_i]`` for ``i < n``, and
    ``prod_{j < n} p_j(x_j) * p_n(y)`` for ``i = n``: every emitted token is the target's own
    sample, whatever the draft (its laws are unused).

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]`` (unused; kept for a uniform signature).
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      The exact outcome law.
    """
    tokens, _, p, n = chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    law: Law = {}
    reach = 1.0  # P(the target's tokens 0 .. i - 1 equal the draft's)
    for i in range(n):
        x = int(tokens[i])
        differs = p[i].copy()
        if x >= 0:
            differs[x] = 0.0
        add_outcome(law, i, normalize_or(differs, p[i]), 0, reach * float(differs.sum()))
        reach *= 0.0 if x < 0 else float(p[i, x])
    add_outcome(law, n, p[n], 0, reach)
    return law
