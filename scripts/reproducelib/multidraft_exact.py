"""The closed forms of :mod:`specjax.verify.acceptance` checked against enumeration."""

from __future__ import annotations

import numpy as np

from specjax.verify.acceptance import acceptance, reference_acceptance


def check_against_reference(seed: int, trials: int, vocab: int, ns=(1, 2, 3)) -> float:
    """Largest |closed form - enumeration| over random Dirichlet (p, q) pairs."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(trials):
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab) * 0.7)
        for n in ns:
            fast, slow = acceptance(p, q, n), reference_acceptance(p, q, n)
            worst = max(worst, *(abs(fast[k] - slow[k]) for k in fast))
    return worst
