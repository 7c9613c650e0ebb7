"""The Llama decoder in Flax NNX: RMSNorm, RoPE, grouped-query attention, SwiGLU, tied or untied
output head, with an explicit KV cache and tree attention.

One call scores T new tokens of every row at arbitrary ``positions [B, T]``: their keys and values
are appended after the row's committed cache entries, and each new token attends to all committed
entries plus the new tokens allowed by ``attn_mask [B, T, T]`` (causal by default). A whole draft
tree (K paths x L tokens) is scored in one call by passing the tree's ancestor mask and node
depths as positions.

Parameters carry logical axis names (metadata ``logical_axes``) used by the sharding rules.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.models import attention
from specjax.models.cache import KVCache, write_slots
from specjax.models.config import LlamaConfig
from specjax.models.rope import apply_rope
from specjax.typing import Array


def _param(rngs: nnx.Rngs, shape, axes, config: LlamaConfig, scale: float | None = None):
    """A normal(0, scale)-initialised parameter (default 1/sqrt(fan-in)) with logical axes."""
    fan_in = shape[0]
    std = scale if scale is not None else fan_in**-0.5
    value = std * jax.random.normal(rngs.params(), shape, jnp.float32)
    return nnx.Param(value.astype(config.weight_dtype), logical_axes=axes)


REDUCE_ROWS = (2, 7)
"""On XLA:CPU, the row counts B * T of a tied head that :func:`tied_logits` computes as a fused
multiply-and-reduce instead of a dot (inclusive bounds)."""


def tied_logits(x: Array, embed: Array) -> Array:
    """``[B, T, V]`` logits of ``x [B, T, D]`` against a tied ``[V, D]`` embedding as stored.

    On XLA:CPU a dot of 2 <= B * T <= 7 rows goes to a matrix-matrix kernel (YNNPACK) that reads
    the embedding at about half the rate of the one-row matrix-vector product. There a
    multiply-and-reduce over D, which XLA fuses into one pass over the embedding, is faster:
    SmolLM2's forward of T = 4 tokens (a chain of 3 verified), 128 tokens of context, took 40.9
    ms against 45.1 with the dot (T = 1: 32.0-32.9 ms; median of 15 interleaved calls, 2-core
    EPYC, 2026-11-28); the head alone at T = 4, 5.7 ms against 7.5. Logits move by up to 4e-5
    (the sums' order); the argmax did not. One row, many rows (prefill, trees of 13 tokens) and
    other backends keep the dot. (Written over ``[B, V, T, D]`` instead of ``[V, B * T, D]``,
    the reduction took 380 ms.)
    """
    b, t, d = x.shape
    low, high = REDUCE_ROWS
    if jax.default_backend() != "cpu" or not low <= b * t <= high:
        return jnp.einsum("btd,vd->btv", x, embed)
    rows = x.reshape(b * t, d)
    out = jnp.sum(embed[:, None, :] * rows[None, :, :], axis=-1)  # [V, B*T]
    return out.T.reshape(b, t, -1)


class RMSNorm(nnx.Module):
    """``x / rms(x) * scale``, computed in fp32."""

    def __init__(self, config: LlamaConfig):
        self.eps = config.norm_eps
        self.scale = nnx.Param(
            jnp.ones((config.dim,), config.weight_dtype), logical_axes=("embed",)
        )

    def __call__(self, x: Array) -> Array:  # [B, T, D]
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (normed * self.scale[...].astype(jnp.float32)).astype(x.dtype)


class Attention(nnx.Module):
    """Grouped-query attention over the KV cache with an arbitrary mask among new tokens."""

    def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
        c = config
        d, h, g, e = c.dim, c.num_heads, c.num_kv_heads, c.head_dim
        self.config = c
        self.wq = _param(rngs, (d, h, e), ("embed", "heads", "head_dim"), c)
        self.wk = _param(rngs, (d, g, e), ("embed", "kv_heads", "head_dim"), c)
        self.wv = _param(rngs, (d, g, e), ("embed", "kv_heads", "head_dim"), c)
        self.wo = _param(rngs, (h, e, d), ("heads", "head_dim", "embed"), c, (h * e) ** -0.5)

    def __call__(
        self,
        x: Array,  # [B, T, D]
        positions: Array,  # [B, T]
        cache_k: Array,  # [N, B, S, G, E] the stacked cache of all layers
        cache_v: Array,
        layer: int,
        lengths: Array,  # [B] committed entries before this call
        new_mask: Array,  # [B, T, T] bool: which new tokens each new token attends to
        kv_mask=None,  # a specjax.tree.LevelMask: which slots, replacing new_mask's
    ) -> tuple[Array, Array, Array]:
        c = self.config
        dtype = c.compute_dtype
        x = x.astype(dtype)
        q = jnp.einsum("btd,dhe->bthe", x, self.wq[...].astype(dtype))
        k = jnp.einsum("btd,dge->btge", x, self.wk[...].astype(dtype))
        v = jnp.einsum("btd,dge->btge", x, self.wv[...].astype(dtype))
        q = apply_rope(q, positions, c)
        k = apply_rope(k, positions, c)
        b, t = positions.shape
        # Write straight into the stacked cache: slicing a layer out and setting it back makes
        # XLA copy the whole cache for one-token calls.
        cache_k = write_slots(cache_k, layer, lengths, k)
        cache_v = write_slots(cache_v, layer, lengths, v)
        g, r = c.num_kv_heads, c.num_heads // c.num_kv_heads
        q = q.reshape(b, t, g, r, c.head_dim)  # [B, T, G, R, E]
        out = attention.attend(  # [B, T, G, R, E] over the live window of the cache
            q,
            cache_k,
            cache_v,
            layer,
            lengths,
            new_mask,
            kv_mask,
            scale=c.head_dim**-0.5,
            dtype=dtype,
        )
        # One [B, T, H*E] x [H*E, D] product: contracting (h, e) of wo in its stored order, so
        # XLA never re-lays out the weight (an einsum over "bthe,hed" copied wo every step).
        out = out.reshape(b, t, c.num_heads * c.head_dim)
        wo = self.wo[...].astype(dtype).reshape(c.num_heads * c.head_dim, -1)  # [H*E, D]
        return jnp.einsum("bti,id->btd", out, wo), cache_k, cache_v


class MLP(nnx.Module):
    """SwiGLU: ``w_down(silu(w_gate x) * w_up x)``."""

    def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
        d, f = config.dim, config.ffn_dim
        self.dtype = config.compute_dtype
        self.w_gate = _param(rngs, (d, f), ("embed", "mlp"), config)
        self.w_up = _param(rngs, (d, f), ("embed", "mlp"), config)
        self.w_down = _param(rngs, (f, d), ("mlp", "embed"), config)

    def __call__(self, x: Array) -> Array:  # [B, T, D]
        dt = self.dtype
        x = x.astype(dt)
        gate = jnp.einsum("btd,df->btf", x, self.w_gate[...].astype(dt))
        up = jnp.einsum("btd,df->btf", x, self.w_up[...].astype(dt))
        return jnp.einsum("btf,fd->btd", jax.nn.silu(gate) * up, self.w_down[...].astype(dt))


class Block(nnx.Module):
    """Pre-norm transformer block."""

    def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(config)
        self.attn = Attention(config, rngs=rngs)
        self.mlp_norm = RMSNorm(config)
        self.mlp = MLP(config, rngs=rngs)


class Llama(nnx.Module):
    """A Llama-family decoder.

    Call as ``model(tokens)`` for full-sequence logits ``[B, T, V]``, or
    ``model(tokens, cache=cache, positions=..., attn_mask=...)`` for ``(logits, cache)``.
    """

    def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embed = _param(
            rngs, (config.vocab_size, config.dim), ("vocab", "embed"), config, config.dim**-0.5
        )
        self.layers = nnx.List([Block(config, rngs=rngs) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config)
        if not config.tie_embeddings:
            self.lm_head = _param(rngs, (config.dim, config.vocab_size), ("embed", "vocab"), config)

    def __call__(
        self,
        tokens: Array,
        *,
        positions: Array | None = None,
        cache: KVCache | None = None,
        attn_mask: Array | None = None,
        kv_mask=None,
        logits_to_keep: int | None = None,
        features: tuple[int, ...] = (),
    ):
        """Scores T new tokens per row.

        Args:
          tokens: int ``[B, T]``.
          positions: int ``[B, T]`` rotary positions (default: ``cache.lengths + arange(T)``).
          cache: the KV cache; None for a stand-alone full-sequence forward.
          attn_mask: bool ``[B, T, T]`` among the new tokens (default causal).
          kv_mask: a :class:`specjax.tree.LevelMask`: which cache slots (after this call's
            writes at ``lengths .. lengths + T - 1``) each new token attends to, as a rule the
            attention asks for the slots it reads. Overrides ``attn_mask``; used to grow a draft
            tree over several calls, where earlier tree nodes sit past the committed entries
            and only a token's ancestors may be seen.
          logits_to_keep: if set, the output head runs on the last this many positions only
          (logits ``[B, logits_to_keep, V]``), e.g. 1 for a prefill that needs the next token.
          features: block indices (0-based) whose output hidden states are also returned, for
            a feature drafter (:mod:`specjax.drafters.feature`); computed in the same pass.

        Returns:
          fp32 logits ``[B, T, V]`` if ``cache`` is None, else ``(logits, cache)`` with the new
          entries appended (``lengths + T``). With ``features``, one more element: the hidden
          states ``[B, T, A, D]`` (A = ``len(features)``, in the order given) of all T tokens.
        """
        c = self.config
        b, t = tokens.shape
        standalone = cache is None
        if standalone:
            cache = KVCache.init(c, b, t)
        if t > cache.capacity:
            raise ValueError(
                f"{t} new tokens do not fit a KV cache of capacity {cache.capacity}; "
                "use a larger cache (capacity) or a shorter prompt"
            )
        if positions is None:
            positions = cache.lengths[:, None] + jnp.arange(t)[None, :]
        if attn_mask is None:
            attn_mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
        x = jnp.take(self.embed[...], tokens, axis=0).astype(c.compute_dtype)  # [B, T, D]
        ks, vs = cache.k, cache.v
        hidden = {}
        for i, layer in enumerate(self.layers):
            attn_out, ks, vs = layer.attn(
                layer.attn_norm(x),
                positions,
                ks,
                vs,
                i,
                cache.lengths,
                attn_mask,
                kv_mask,
            )
            x = x + attn_out
            x = x + layer.mlp(layer.mlp_norm(x))
            if i in features:
                hidden[i] = x
        if logits_to_keep is not None:
            x = x[:, t - logits_to_keep :]
        x = self.norm(x)
        dtype = c.compute_dtype
        if c.tie_embeddings:  # contract with the [V, D] embedding as stored: no transpose
            logits = tied_logits(x, self.embed[...].astype(dtype))
        else:
            logits = jnp.einsum("btd,dv->btv", x, self.lm_head[...].astype(dtype))
        logits = logits.astype(jnp.float32)
        out = (logits,) if standalone else (logits, KVCache(ks, vs, cache.lengths + t))
        if features:
            bad = [i for i in features if not 0 <= i < c.num_layers]
            if bad:
                raise ValueError(
                    f"feature layers {bad} outside the model's blocks 0 .. {c.num_layers - 1}"
                )
            out += (jnp.stack([hidden[i] for i in features], axis=2).astype(jnp.float32),)
        return out[0] if len(out) == 1 else out
