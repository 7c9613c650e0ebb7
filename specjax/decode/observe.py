"""One speculative step that also hands back the laws it drew from, for research (e.g. exact
expected accepted lengths per step under two verifiers on the same drafts and contexts).

:func:`observed_step` is :func:`~specjax.decode.step.speculative_step` (same keys, same calls,
the same new state bit for bit) and also returns a :class:`StepLaws`: the drafted tokens, their
draft laws and the target's laws at every node of every drafted path. The target's laws come out
of the step's ONE tree forward (:func:`~specjax.decode.step.score_tree`); nothing is scored twice.

A chain verifier (``token``, ``block``, ``greedy``) with a K-path drafter verifies path 0 of the
tree; the other K - 1 paths are scored, not verified (with i.i.d. paths, path 0 is distributed as
a one-path drafter's chain, so the decoding is that of K = 1 while K blocks are observed).
"""

from __future__ import annotations

import dataclasses

import jax

from specjax import tree
from specjax.decode.config import DecodeConfig
from specjax.decode.state import DecodeState
from specjax.decode.step import (
    commit_tree,
    draft_keys,
    feature_layers,
    laws_of,
    score_tree,
    split_keys,
    tree_laws,
)
from specjax.drafters.base import Drafter, draws_with_replacement, near, with_sampling
from specjax.models.pure import PureModel
from specjax.typing import Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepLaws:
    """What one speculative step drew from, per row.

    Attributes:
      tokens: int32 ``[B, K, L]`` the drafted paths (-1 past a path's end).
      draft_probs: ``[B, K, L, V]`` row (k, i) the law draft token (k, i) was drawn from.
      target_probs: ``[B, K, L + 1, V]`` the target's law (as sampled: after temperature /
        top-k / top-p) at the root (row 0) and after each draft node of path k (row i + 1).
      tau: int32 ``[B]`` accepted draft tokens of the followed path.
      path: int32 ``[B]`` the followed path (0 for chain verifiers).
      active: bool ``[B]`` rows that were decoding at the step (the others changed nothing).
    """

    tokens: Array
    draft_probs: Array
    target_probs: Array
    tau: Array
    path: Array
    active: Array


def observed_step(
    target: PureModel, drafter: Drafter, state: DecodeState, config: DecodeConfig
) -> tuple[DecodeState, StepLaws]:
    """:func:`~specjax.decode.step.speculative_step`, also returning the step's :class:`StepLaws`.

    Returns:
      ``(new_state, laws)``; ``new_state`` is ``speculative_step(target, drafter, state,
      config)``'s.
    """
    keys, k_draft, k_verify = split_keys(state.keys, 3)
    k_draft = draft_keys(state, config, k_draft)
    params = laws_of(state, config)  # the rows' own sampling, or the config's
    drafting = with_sampling(near(drafter, config.widths), params)
    draft, draft_state = drafting.propose(state.draft_state, k_draft, state.tokens, state.lengths)
    k_paths, l_len = draft.tokens.shape[1:]
    layers = feature_layers(drafter)
    logits, cache, hidden = score_tree(target, state, draft.tokens, layers)  # [B, T, V], ...
    new, path, tau = commit_tree(
        state.replace(keys=keys),
        draft,
        logits,
        cache,
        k_verify,
        config,
        replacement=draws_with_replacement(drafter),
    )
    extra = {"features": tree.path_nodes(hidden, path, l_len)} if layers else {}
    draft_state = drafter.commit(
        state.draft_state, draft_state, state.lengths, path, tau, ~state.done, **extra
    )
    target_probs = tree_laws(config, logits, k_paths, l_len, params)  # [B, K, L + 1, V]
    laws = StepLaws(
        tokens=draft.tokens,
        draft_probs=draft.probs,
        target_probs=target_probs,
        tau=tau,
        path=path,
        active=~state.done,
    )
    return new.replace(draft_state=draft_state), laws
