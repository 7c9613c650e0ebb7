"""Dimension glossary and array aliases, written down once for all of specjax.

Every shape comment (``# [B, K, L, V]``), signature docstring and einsum in specjax uses these
letters with exactly these meanings:

=====  =============================================================================================
Letter Meaning
=====  =============================================================================================
B      batch: independent sequences (rows) decoded or verified together.
K      number of draft paths (multi-path / tree drafts); chain verifiers have K = 1 implicitly.
L      draft length (gamma): draft tokens proposed per path per speculative step.
V      vocabulary size (shared by draft and target).
C      SSD branches per row: speculation-cache entries, one per guessed outcome (k, b).
N      number of layers (the leading axis of the stacked KV cache ``[N, B, S, G, E]``).
M      tokens written or moved per row in one commit (``commit_tokens``, ``KVCache.compact``).
T      sequence positions in one model call (prompt length at prefill, 1 + K * L for a draft
       tree: the root and its nodes).
S      KV-cache capacity (static maximum sequence length).
U      token-buffer length per row (``DecodeState.tokens [B, U]``: prompt, new tokens and a
       draft's room; not S, the KV-cache capacity).
X      cache slots one attention window or chunk reads (X <= S).
D      model width (embedding dimension); D_t, the target's, where a draft head's differs.
H      number of query heads;  G: number of key/value heads (grouped-query attention).
R      query heads per key/value head (H / G): the grouped axis of attention ``[B, T, G, R, E]``.
E      head dimension.
F      MLP hidden width.
A      target feature layers read by a feature drafter (``specjax.drafters.feature``);
       A' is the feature layers stored in a data set (A' >= A).
W      a feature drafter's draft vocabulary (ids it can propose; ``d2t [W]`` maps them to V).
Y      draft widths a step chooses among (``len(DecodeConfig.widths)``).
Z      tokens in a stored training data set (feature data, token corpora).
J      training-time-test steps in training a feature head (``HeadRecipe.ttt_steps``; 1: none).
=====  =============================================================================================

Conventions used with these letters:

* ``q`` is the draft distribution and ``p`` the target distribution, always the *processed*
  distributions actually sampled from (after temperature / top-k / top-p).
* Chain verifiers take ``draft_tokens [B, L]``, ``draft_probs [B, L, V]`` (row i is the law draft
  token i was drawn from) and ``target_probs [B, L+1, V]`` (row L is the bonus distribution).
* Multi-path verifiers take ``draft_tokens [B, K, L]``, ``draft_probs [B, K, L, V]`` and
  ``target_probs [B, K, L+1, V]``; paths sharing a prefix carry identical rows for it.
* Padding draft tokens are ``-1``; ``num_draft`` (``[B]`` or ``[B, K]``) counts valid tokens.
* tau (``num_accepted``) is the number of accepted draft tokens, 0 <= tau <= L.
"""

from __future__ import annotations

from typing import TypeAlias

import jax

Array: TypeAlias = jax.Array
"""Any JAX array; the shape is given in the docstring / comment with the letters above."""

PRNGKey: TypeAlias = jax.Array
"""A PRNG key: either a raw ``uint32[2]`` key or a typed key from ``jax.random.key``."""

DIMENSIONS: dict[str, str] = {
    "B": "batch",
    "K": "draft paths",
    "L": "draft length",
    "V": "vocabulary",
    "C": "SSD branches per row",
    "N": "layers",
    "M": "tokens committed or moved per row",
    "T": "positions in one call",
    "S": "cache capacity",
    "U": "token buffer",
    "X": "slots a window or chunk reads",
    "D": "model width",
    "H": "query heads",
    "G": "key/value heads",
    "R": "query heads per key/value head",
    "E": "head dimension",
    "F": "MLP hidden width",
    "A": "feature layers",
    "W": "draft vocabulary",
    "Y": "draft widths",
    "Z": "stored tokens",
    "J": "training-time-test steps",
}
"""Machine-readable copy of the glossary (used by docs and shape-checking helpers)."""
