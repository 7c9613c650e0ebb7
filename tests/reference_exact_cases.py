"""Shared cases of the exact reference-law tests: model variants, multi-path laws, error check.

This module is a test helper, not a test file.
"""

from __future__ import annotations

import numpy as np

from tests import enumeration as en

TOL = 1e-12

VARIANTS = {
    "dirichlet": {},
    "one_hot_p": {"one_hot_p": True},
    "p_equals_q": {"p_equals_q": True},
    "q_zeros": {"q_zeros": 1},
    "p_zeros": {"p_zeros": 1},
    "one_hot_q": {"q_zeros": -1},  # -1: V - 1 zeros (deterministic drafts)
}

# Multi-path verifiers with the draft scheme they are exact for.
MULTI_LAWS = {
    "specinfer_iid": ("specinfer", "iid", {}),
    "specinfer_wor": ("specinfer", "wor", {"replacement": False}),
    # The distinct tokens of i.i.d. siblings, in order of first appearance, are a draw without
    # replacement, so RRS without replacement (with its deduplication) is exact on i.i.d. paths.
    "specinfer_wor_on_iid": ("specinfer", "iid", {"replacement": False}),
    "spectr_iid": ("spectr", "iid", {}),
    "gbv_iid": ("gbv", "iid", {}),
}


def variant_model(vocab: int, depth: int, variant: str, seed: int) -> en.Model:
    """A random model of :data:`VARIANTS` ``variant``, seeded by ``(seed, V, depth, variant)``."""
    options = dict(VARIANTS[variant])
    if options.get("q_zeros") == -1:
        options["q_zeros"] = vocab - 1
    rng = np.random.default_rng([seed, vocab, depth, list(VARIANTS).index(variant)])
    return en.random_model(rng, vocab, depth, **options)


def root_support(model: en.Model) -> int:
    """Number of tokens of positive draft probability at the root."""
    return int(np.count_nonzero(model.q_table[0][0] > 0))


def lossless_error(model, law_fn, scheme, num_paths, length, num_draft=None, **kwargs) -> float:
    """Largest gap between the emitted law (completed to ``L + 1``) and the target's joint law."""
    emitted = en.emitted_law(model, law_fn, scheme, num_paths, length, num_draft, **kwargs)
    return en.max_abs_error(emitted, en.target_joint(model, length + 1))
