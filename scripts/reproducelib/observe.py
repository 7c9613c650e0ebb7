"""Real chain decoding that also reports, per step, each chain verifier's exact expected
accepted length on the step's drafts.

:func:`observe` decodes as :func:`specjax.decode.generate` does (the same prefill and the same
step: draft, one target forward, verify, commit), one compiled
:func:`specjax.decode.seams.observed_step` per call from Python, and hands back every step's
drafted blocks with the draft's and the target's laws along them (from that one forward). From
those the host computes ``E[tau | block]`` under token and under block verification
(:func:`reproducelib.chain_exact.token_expected` / ``block_expected``): a paired comparison of
the two rules on the same contexts and the same drafts, with no verifier randomness in it.

A feature drafter (:class:`~specjax.drafters.FeatureDrafter`) gets the target's hidden states
of the root and block 0 from that forward, as in :func:`specjax.decode.generate`.

With ``paths = M > 1`` the drafter proposes M i.i.d. blocks per step; all M are scored in the
step's one tree forward (their mean estimates E over drafts at that context M times more
precisely), and the real verifier decodes block 0, which is distributed as the one block of a
K = 1 drafter. With ``paths = 1`` the step is :func:`specjax.decode.speculative_step` itself:
same seed, same tokens as ``generate``.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from reproducelib import chain_exact
from specjax import verify
from specjax.decode import DecodeConfig
from specjax.decode.seams import observed_step, outputs, prefill_program, prepare

_prefill = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
_step = jax.jit(observed_step, static_argnames=("config",))
_coupled = jax.jit(verify.coupled_acceptance)


@dataclasses.dataclass
class Observed:
    """Per active row-step: the expected accepted lengths (means over the step's M blocks) and
    the real one.

    Attributes:
      e_token: E[tau | block] under token verification ``[N]``.
      e_block: the same under block verification ``[N]``.
      tau: tau the real verifier drew ``[N]``.
      tokens: generated ids per row.
      overlap: ``sum_v min(p, q)`` of the step's first draft position ``[N]``: 1 - TV, the
        most any verifier accepts there.
      coupled: the probability that ``gumbel`` accepts there a token drawn with the target's
        noise (:func:`specjax.verify.coupled_acceptance`) ``[N]``.
    """

    e_token: np.ndarray
    e_block: np.ndarray
    tau: np.ndarray
    tokens: list[list[int]]
    overlap: np.ndarray
    coupled: np.ndarray

    @staticmethod
    def concat(runs: list[Observed]) -> Observed:
        cat = lambda name: np.concatenate([getattr(r, name) for r in runs])
        return Observed(
            cat("e_token"),
            cat("e_block"),
            cat("tau"),
            [t for r in runs for t in r.tokens],
            cat("overlap"),
            cat("coupled"),
        )

    def paired(self) -> tuple[float, float]:
        """(mean, standard error) of e_block - e_token over steps."""
        d = self.e_block - self.e_token
        return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))


def observe(target, drafter, prompts, config: DecodeConfig, seed: int) -> Observed:
    """Decodes ``prompts`` with ``config`` (a chain verifier); ``drafter`` (a model or a feature
    drafter) proposes M i.i.d. paths (``drafter.num_paths``), path 0 is verified."""
    if config.multipath or not drafter.replacement:
        raise ValueError("observe verifies one chain of i.i.d. draft paths (a chain verifier)")
    checks = config if drafter.num_paths == 1 else dataclasses.replace(config, verifier="gbv")
    b = prepare(target, drafter, prompts, checks)  # sizes the caches for all M paths
    state = _prefill(
        target,
        drafter,
        b.prompts,
        b.lengths,
        b.active,
        np.int32(seed),
        capacity=b.capacity,
        buffer=b.buffer,
    )
    e_token, e_block, taus, overlap, coupled = [], [], [], [], []
    while not bool(np.all(jax.device_get(state.done))):
        state, laws = _step(target, drafter, state, config)
        seen = (laws.tokens, laws.draft_probs, laws.target_probs, laws.tau, laws.active)
        tokens, q_rows, p_rows, tau, active = (np.asarray(x) for x in jax.device_get(seen))
        first = (p_rows[active, 0, 0], q_rows[active, 0, 0])  # [n, V] each: the root laws
        overlap.append(np.minimum(*first).sum(-1))
        coupled.append(np.asarray(_coupled(*first)))
        for row in np.flatnonzero(active):
            blocks = [
                (
                    tokens[row, k],
                    q_rows[row, k].astype(np.float64),
                    p_rows[row, k].astype(np.float64),
                )
                for k in range(tokens.shape[1])
            ]
            e_token.append(np.mean([chain_exact.token_expected(*blk) for blk in blocks]))
            e_block.append(np.mean([chain_exact.block_expected(*blk) for blk in blocks]))
            taus.append(int(tau[row]))
    return Observed(
        np.asarray(e_token),
        np.asarray(e_block),
        np.asarray(taus),
        outputs(state, b.rows),
        np.concatenate(overlap),
        np.concatenate(coupled),
    )
