"""What the width controller (:mod:`specjax.decode.widths`) assumes before it has measured
anything: a pair's acceptance per draft position, from counts or by default, and step costs.
"""

from __future__ import annotations

import numpy as np

PRIOR, PRIOR_LATER = 0.5, 0.35
"""Initial acceptance estimates: of the first draft position, and of each later one given the
earlier ones (cautious: a later position is only observed when a step reaches it)."""


def default_prior(draft_len: int) -> np.ndarray:
    """``[L]`` the acceptance estimates of a pair nothing is known about: :data:`PRIOR` for the
    first draft position, :data:`PRIOR_LATER` for the others."""
    return np.asarray([PRIOR] + [PRIOR_LATER] * (draft_len - 1), np.float32)


def prior_from_counts(accepted: np.ndarray, reached: np.ndarray, weight: float = 2.0) -> np.ndarray:
    """``[L]`` acceptance estimates from counts of draft positions accepted out of those reached
    (proposed, every earlier position accepted), shrunk towards :func:`default_prior` as if it
    had been seen ``weight`` times (a position reached a few times says little)."""
    accepted, reached = np.asarray(accepted, np.float64), np.asarray(reached, np.float64)
    prior = default_prior(len(accepted))
    return ((accepted + weight * prior) / (reached + weight)).astype(np.float32)


def guess_costs(widths: tuple[int, ...], num_paths: int, per_token: float = 0.1) -> np.ndarray:
    """Relative step costs before calibration: ``1 + per_token · K · w`` (a rough CPU figure)."""
    return np.asarray([1.0 + per_token * num_paths * w for w in widths], np.float32)
