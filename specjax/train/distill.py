"""Draft distillation (DistillSpec-style): train a small draft against a frozen target.

Losses (per position, averaged), with p the target's and q the draft's next-token distribution:

* ``forward_kl``: KL(p || q) = sum p (log p - log q).
* ``tv``: total variation 1/2 sum |p - q|. Token-level acceptance is 1 - TV(p, q), so this is
  the quantity speculative decoding rewards directly.
* ``ce``: cross-entropy of the draft on the data tokens (plain training, the baseline).

Data: windows of corpus text, or text sampled from the target itself
(:func:`sample_from_target`). :func:`acceptance_metrics` measures what matters for speculative
decoding: greedy agreement (argmax p == argmax q) and alpha = E[sum_v min(p, q)].
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from specjax.models.cache import KVCache
from specjax.train.trainer import LossFn
from specjax.typing import Array, PRNGKey

LOSSES = ("forward_kl", "tv", "ce")


def check_loss(name: str) -> str:
    """Returns ``name`` or raises one clear error listing the known losses."""
    if name not in LOSSES:
        raise ValueError(f"unknown distillation loss {name!r}; choose one of {', '.join(LOSSES)}")
    return name


def divergences(p_logits: Array, q_logits: Array, temperature: float = 1.0) -> dict[str, Array]:
    """Per-position forward KL, TV, overlap sum min(p, q) and greedy agreement. Each ``[B, T]``."""
    log_p = jax.nn.log_softmax(p_logits / temperature, axis=-1)
    log_q = jax.nn.log_softmax(q_logits / temperature, axis=-1)
    p, q = jnp.exp(log_p), jnp.exp(log_q)
    overlap = jnp.sum(jnp.minimum(p, q), axis=-1)
    return {
        "forward_kl": jnp.sum(p * (log_p - log_q), axis=-1),
        "tv": 1.0 - overlap,  # = 1/2 sum |p - q| for normalised p, q
        "alpha": overlap,
        "agree": (jnp.argmax(p_logits, -1) == jnp.argmax(q_logits, -1)).astype(jnp.float32),
    }


def distill_loss(target: nnx.Module, loss: str, temperature: float = 1.0) -> LossFn:
    """A :data:`~specjax.train.trainer.LossFn` for the draft against the frozen ``target``."""
    check_loss(loss)
    graphdef, params = nnx.split(target)

    def loss_fn(draft: nnx.Module, batch: Array):  # batch [B, T+1]
        inputs = batch[:, :-1]
        q_logits = draft(inputs).logits  # [B, T, V]
        p_logits = jax.lax.stop_gradient(nnx.merge(graphdef, params)(inputs).logits)
        if p_logits.shape[-1] != q_logits.shape[-1]:
            raise ValueError(
                f"draft vocab ({q_logits.shape[-1]}) != target vocab ({p_logits.shape[-1]})"
            )
        d = divergences(p_logits, q_logits, temperature)
        if loss == "ce":
            value = optax.softmax_cross_entropy_with_integer_labels(q_logits, batch[:, 1:]).mean()
        else:
            value = d[loss].mean()
        return value, {"alpha": d["alpha"].mean(), "agree": d["agree"].mean()}

    return loss_fn


def acceptance_metrics(
    target: nnx.Module, draft: nnx.Module, batches: Iterable[np.ndarray], temperature: float = 1.0
) -> dict[str, float]:
    """Held-out agreement of ``draft`` with ``target`` on token windows ``[B, T+1]``.

    Returns:
      ``alpha`` (E[sum min(p, q)] at ``temperature``, the per-token acceptance of token
      verification), ``greedy_agreement``, ``target_loss`` and ``draft_loss`` (nats/token).
    """

    @nnx.jit
    def measure(target, draft, batch):
        inputs, labels = batch[:, :-1], batch[:, 1:]
        p_logits, q_logits = target(inputs).logits, draft(inputs).logits
        d = divergences(p_logits, q_logits, temperature)
        ce = optax.softmax_cross_entropy_with_integer_labels
        return {
            "alpha": d["alpha"].mean(),
            "greedy_agreement": d["agree"].mean(),
            "target_loss": ce(p_logits, labels).mean(),
            "draft_loss": ce(q_logits, labels).mean(),
        }

    results = [measure(target, draft, jnp.asarray(b)) for b in batches]
    if not results:
        raise ValueError("acceptance_metrics needs at least one batch")
    return {k: float(np.mean([float(r[k]) for r in results])) for k in results[0]}


def sample_from_target(
    target: nnx.Module, prompts: Array, num_new: int, key: PRNGKey, temperature: float = 1.0
) -> Array:
    """Samples ``num_new`` tokens after each prompt from the target (KV-cached, one program).

    Args:
      target: the model.
      prompts: int ``[B, T]``.
      num_new: tokens to sample per row.
      key: PRNG key.
      temperature: sampling temperature (> 0).

    Returns:
      int32 ``[B, T + num_new]``: the prompts followed by the samples.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    b, p = prompts.shape
    cache = KVCache.init(target.config, b, p + num_new)

    @nnx.jit
    def run(model, prompts, cache, key):
        logits, cache, _ = model(prompts, cache=cache)

        def body(i, carry):
            cache, last, out, key = carry
            key, sub = jax.random.split(key)
            token = jax.random.categorical(sub, last / temperature).astype(jnp.int32)  # [B]
            out = out.at[:, i].set(token)
            logits, cache, _ = model(token[:, None], cache=cache)
            return cache, logits[:, -1], out, key

        out = jnp.zeros((b, num_new), jnp.int32)
        _, _, out, _ = jax.lax.fori_loop(0, num_new, body, (cache, logits[:, -1], out, key))
        return jnp.concatenate([prompts.astype(jnp.int32), out], axis=1)

    return run(target, jnp.asarray(prompts), cache, key)
