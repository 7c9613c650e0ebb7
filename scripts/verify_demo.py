r"""Runs every specjax verifier on a synthetic draft/target family and prints what it achieves.

For each verifier: block efficiency (tokens emitted per target call = E[tau] + 1), the
probability of accepting at least the first token, and for multi-path verifiers the optimal
multi-draft acceptance rate at the root (Hu et al.) that no lossless verifier can beat.

  python scripts/verify_demo.py --family=medium --vocab=1000 --draft_len=4 --num_paths=3
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

from specjax import verify
from specjax.verify import synthetic

_FAMILY = flags.DEFINE_enum("family", "medium", list(synthetic.FAMILIES), "Synthetic family.")
_VOCAB = flags.DEFINE_integer("vocab", 1000, "Vocabulary size V.")
_DRAFT_LEN = flags.DEFINE_integer("draft_len", 4, "Draft length L.")
_NUM_PATHS = flags.DEFINE_integer("num_paths", 3, "Draft paths K for multi-path verifiers.")
_ROWS = flags.DEFINE_integer("rows", 2048, "Independent verification problems (batch B).")
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # no backend-probing chatter
    family = dataclasses.replace(
        synthetic.FAMILIES[_FAMILY.value], vocab_size=_VOCAB.value, seed=_SEED.value
    )
    b, k, l = _ROWS.value, _NUM_PATHS.value, _DRAFT_LEN.value
    key_iid, key_wor, key_verify = jax.random.split(jax.random.key(_SEED.value), 3)
    iid = synthetic.sample_draft(key_iid, family, b, k, l)
    wor = synthetic.sample_draft(key_wor, family, b, k, l, replacement=False)
    p_root, q_root = iid.target_probs[:, 0, 0], iid.draft_probs[:, 0, 0]  # [B, V]
    bound = {
        True: float(jnp.mean(verify.optimal_acceptance(p_root, q_root, k, replacement=True))),
        False: float(jnp.mean(verify.optimal_acceptance(p_root, q_root, k, replacement=False))),
    }
    single = float(jnp.mean(jnp.sum(jnp.minimum(p_root, q_root), axis=-1)))

    # greedy is the temperature-0 rule (exact only for one-hot targets), so it is left out here.
    runs = [("token", 1, iid, None), ("block", 1, iid, None)]
    runs += [("specinfer", k, iid, True), ("specinfer", k, wor, False)]
    runs += [("spectr", k, iid, True), ("gbv", k, iid, True)]
    print(
        f"family={_FAMILY.value} V={family.vocab_size} L={l} rows={b}  (1 - TV at the root: "
        f"{single:.4f})"
    )
    print(f"{'verifier':<22}{'K':>3}{'block eff.':>12}{'P(tau>=1)':>11}{'optimal':>9}{'ms':>9}")
    for name, num_paths, draft, replacement in runs:
        fn = verify.get(name)
        kwargs = {} if name != "specinfer" else {"replacement": replacement}
        if num_paths == 1:
            args = (draft.tokens[:, 0], draft.draft_probs[:, 0], draft.target_probs[:, 0])
        else:
            args = tuple(draft)
        jitted = jax.jit(lambda key, *a, fn=fn, kwargs=kwargs: fn(key, *a, **kwargs))
        jax.block_until_ready(jitted(key_verify, *args))
        start = time.perf_counter()
        result = jax.block_until_ready(jitted(key_verify, *args))
        ms = 1e3 * (time.perf_counter() - start)
        tau = np.asarray(result.num_accepted)
        label = name if replacement is None else f"{name} ({'iid' if replacement else 'w/o repl.'})"
        opt = f"{bound[replacement]:.4f}" if num_paths > 1 else f"{single:.4f}"
        print(
            f"{label:<22}{num_paths:>3}{tau.mean() + 1:>12.4f}{(tau >= 1).mean():>11.4f}"
            f"{opt:>9}{ms:>9.1f}"
        )
    print("block eff. = E[tau] + 1; optimal = best possible P(tau >= 1) for that draft (Hu et al.)")


if __name__ == "__main__":
    app.run(main)
