"""The decoder in Flax NNX, one module for every family specjax runs (Llama, Mistral, Qwen2/2.5,
Qwen3, Gemma 2, Gemma 3): RMSNorm, RoPE, grouped-query attention, a gated MLP, tied or untied
output head, with an explicit KV cache and tree attention; the families' differences are the
switches of :class:`~specjax.models.config.ModelConfig`.

One call scores T new tokens of every row at arbitrary ``positions [B, T]``: their keys and values
are appended after the row's committed cache entries, and each new token attends to all committed
entries plus the new tokens allowed by ``attn_mask [B, T, T]`` (causal by default); in a sliding
layer, only to those fewer than W positions before its own. A whole draft tree (K paths x L
tokens) is scored in one call by passing the tree's ancestor mask and node depths as positions.

Parameters carry logical axis names (metadata ``logical_axes``) used by the sharding rules.
Projection weights are kept ``[*in, *out]``; with ``fused_projections`` q/k/v and gate/up are
one weight each, and with ``weight_quant`` each projection weight is int8 (or fp8) with fp32
``<name>_scale [*out]`` (:mod:`specjax.models.weights`, :mod:`specjax.models.quant`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.models import attention, attention_windows, quant
from specjax.models.cache import KVCache, write_slots
from specjax.models.config import ModelConfig
from specjax.models.rope import apply_rope, inverse_frequencies
from specjax.typing import Array


class Forward(NamedTuple):
    """What every :class:`Decoder` call returns (one shape, whatever the arguments).

    Attributes:
      logits: fp32 ``[B, T, V]`` (``[B, logits_to_keep, V]`` where asked).
      cache: the :class:`KVCache` with the T new entries appended, or None for a stand-alone
        forward (no ``cache`` given).
      features: fp32 ``[B, T, A, D]`` the hidden states of the ``features`` blocks, or None.
    """

    logits: Array
    cache: KVCache | None
    features: Array | None


def _normal(rngs: nnx.Rngs, shape, config: ModelConfig, scale: float | None = None) -> Array:
    """A normal(0, scale) array (default 1/sqrt(fan-in)) in the parameter dtype."""
    std = scale if scale is not None else shape[0] ** -0.5
    return (std * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(config.weight_dtype)


def _param(rngs: nnx.Rngs, shape, axes, config: ModelConfig, scale: float | None = None):
    """A normal(0, scale)-initialised parameter (default 1/sqrt(fan-in)) with logical axes."""
    return nnx.Param(_normal(rngs, shape, config, scale), logical_axes=axes)


def set_weight(module, name: str, value: Array, axes, config: ModelConfig, contracted: int = 1):
    """Sets projection weight ``module.<name>`` to ``value`` (in the parameter dtype) with its
    logical ``axes``; with ``config.weight_quant``, to its quantized form and
    ``module.<name>_scale`` (fp32, one per output channel: the axes after the ``contracted``
    input axes), as :func:`specjax.models.quant.quantize` makes them."""
    value = value.astype(config.weight_dtype)  # (quantized from what an unquantized model holds)
    if config.weight_quant is None:
        setattr(module, name, nnx.Param(value, logical_axes=axes))
        return
    q, scale = quant.quantize(value, config.weight_quant, contracted)
    setattr(module, name, nnx.Param(q, logical_axes=axes))
    setattr(module, f"{name}_scale", nnx.Param(scale, logical_axes=tuple(axes[contracted:])))


def project(spec: str, x: Array, module, name: str, dtype, shape=None) -> Array:
    """``einsum(spec, x, module.<name>)`` in ``dtype`` (the weight reshaped to ``shape`` first if
    given), scaled per output channel when the weight is quantized (:func:`quant.qdot`)."""
    w = getattr(module, name)[...]
    w = w if shape is None else w.reshape(shape)
    scale = getattr(module, f"{name}_scale", None)
    return quant.qdot(spec, x, w, None if scale is None else scale[...], dtype)


def fuse_qkv(q: Array, k: Array, v: Array) -> Array:
    """``[..., G, R + 2, E]`` of q ``[..., H, E]``, k and v ``[..., G, E]`` (weights with a
    leading D, biases and scales without): each KV group's R = H / G query heads (query head
    ``g * R + r``, the grouping attention uses), then its key head, then its value head.

    Grouped by KV head, not ``[q; k; v]`` end to end, so that splitting G over devices gives each
    device its q, k and v heads in one contiguous shard and the split after the GEMM is local."""
    g = k.shape[-2]
    q = q.reshape(*q.shape[:-2], g, q.shape[-2] // g, q.shape[-1])
    return jnp.concatenate([q, k[..., None, :], v[..., None, :]], axis=-2)


def fuse_gate_up(gate: Array, up: Array) -> Array:
    """``[..., 2, F]`` of gate and up ``[..., F]`` (weights ``[D, F]``, scales ``[F]``): stacked
    on an axis of their own, so that splitting F over devices keeps each device's gate and up
    columns together (``[D, 2F]`` would put gate on the first devices, up on the last)."""
    return jnp.stack([gate, up], axis=-2)


def _zeros(shape, axes, config: ModelConfig):
    return nnx.Param(jnp.zeros(shape, config.weight_dtype), logical_axes=axes)


def softcap(x: Array, cap: float | None) -> Array:
    """``cap * tanh(x / cap)`` (Gemma 2's soft-capping), or ``x`` when ``cap`` is None."""
    return x if cap is None else cap * jnp.tanh(x / cap)


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
    """``x / rms(x) * scale`` (or ``* (1 + scale)``: ``norm_plus_one``), computed in fp32, over
    the last axis of size ``size`` (default D)."""

    def __init__(self, config: ModelConfig, size: int | None = None, axis: str = "embed"):
        self.eps = config.norm_eps
        self.plus_one = config.norm_plus_one
        init = jnp.zeros if self.plus_one else jnp.ones  # the identity either way
        size = config.dim if size is None else size
        self.scale = nnx.Param(init((size,), config.weight_dtype), logical_axes=(axis,))

    def __call__(self, x: Array) -> Array:  # [..., D]
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        scale = self.scale[...].astype(jnp.float32)
        return (normed * (1.0 + scale if self.plus_one else scale)).astype(x.dtype)


class Attention(nnx.Module):
    """Grouped-query attention over the KV cache with an arbitrary mask among new tokens.

    Weights: ``wq [D, H, E]``, ``wk``/``wv [D, G, E]`` (biases ``bq [H, E]``, ``bk``/``bv [G,
    E]``), or with ``fused_projections`` one ``wqkv [D, G, R + 2, E]`` (bias ``bqkv [G, R + 2,
    E]``; :func:`fuse_qkv`); ``wo [H, E, D]``. With ``weight_quant`` each weight ``w`` also has
    ``w_scale`` over its output axes (``[H, E]``, ``[G, R + 2, E]``, ``[D]``).
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        d, h, g, e = c.dim, c.num_heads, c.num_kv_heads, c.head_dim
        self.config = c
        # Drawn in the same order either way, so a fused or quantized config gives the weights
        # fuse_projections / quantize_weights make of the plain one with the same seed.
        wq = _normal(rngs, (d, h, e), c)
        wk = _normal(rngs, (d, g, e), c)
        wv = _normal(rngs, (d, g, e), c)
        if c.fused_projections:
            # TODO(sharding): where the model axis does not divide G, kv_heads is replicated
            # (model_rules), and so is every device's whole q/k/v GEMM; unfused, q is split.
            axes = ("embed", "kv_heads", None, "head_dim")
            set_weight(self, "wqkv", fuse_qkv(wq, wk, wv), axes, c)
        else:
            set_weight(self, "wq", wq, ("embed", "heads", "head_dim"), c)
            set_weight(self, "wk", wk, ("embed", "kv_heads", "head_dim"), c)
            set_weight(self, "wv", wv, ("embed", "kv_heads", "head_dim"), c)
        wo = _normal(rngs, (h, e, d), c, (h * e) ** -0.5)
        set_weight(self, "wo", wo, ("heads", "head_dim", "embed"), c, contracted=2)
        if c.qkv_bias and c.fused_projections:
            self.bqkv = _zeros((g, h // g + 2, e), ("kv_heads", None, "head_dim"), c)
        elif c.qkv_bias:
            self.bq = _zeros((h, e), ("heads", "head_dim"), c)
            self.bk = _zeros((g, e), ("kv_heads", "head_dim"), c)
            self.bv = _zeros((g, e), ("kv_heads", "head_dim"), c)
        if c.out_bias:
            self.bo = _zeros((d,), ("embed",), c)
        if c.qk_norm:
            self.q_norm = RMSNorm(c, e, "head_dim")
            self.k_norm = RMSNorm(c, e, "head_dim")

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
        window_index: Array | None = None,  # attention_windows.window_index, once per forward
    ) -> tuple[Array, Array, Array]:
        c = self.config
        dtype = c.compute_dtype
        x = x.astype(dtype)
        if c.fused_projections:  # one GEMM, then slices (see fuse_qkv)
            qkv = project("btd,dgje->btgje", x, self, "wqkv", dtype)  # [B, T, G, R + 2, E]
            if c.qkv_bias:
                qkv = qkv + self.bqkv[...].astype(dtype)
            r = c.num_heads // c.num_kv_heads
            q = qkv[:, :, :, :r].reshape(*x.shape[:2], c.num_heads, c.head_dim)
            k, v = qkv[:, :, :, r], qkv[:, :, :, r + 1]
        else:
            q = project("btd,dhe->bthe", x, self, "wq", dtype)
            k = project("btd,dge->btge", x, self, "wk", dtype)
            v = project("btd,dge->btge", x, self, "wv", dtype)
            if c.qkv_bias:
                q, k, v = (
                    y + bias[...].astype(dtype)
                    for y, bias in ((q, self.bq), (k, self.bk), (v, self.bv))
                )
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        inv = inverse_frequencies(c.head_dim, *c.rope(layer))
        q = apply_rope(q, positions, inv)
        k = apply_rope(k, positions, inv)
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
            scale=(c.query_pre_attn_scalar or c.head_dim) ** -0.5,
            dtype=dtype,
            positions=positions,
            window=c.window(layer),
            softcap=c.attn_softcap,
            index=window_index,
        )
        # One [B, T, H*E] x [H*E, D] product: contracting (h, e) of wo in its stored order, so
        # XLA never re-lays out the weight (an einsum over "bthe,hed" copied wo every step).
        out = out.reshape(b, t, c.num_heads * c.head_dim)
        out = project("bti,id->btd", out, self, "wo", dtype, (c.num_heads * c.head_dim, -1))
        if c.out_bias:
            out = out + self.bo[...].astype(dtype)
        return out, cache_k, cache_v


class MLP(nnx.Module):
    """The gated MLP: ``w_down(act(w_gate x) * w_up x)``, act SiLU (SwiGLU) or tanh-GELU
    (GeGLU); ``w_gate``/``w_up [D, F]`` or, fused, ``w_gate_up [D, 2, F]``
    (:func:`fuse_gate_up`); ``w_down [F, D]`` (with ``weight_quant``, scales ``[F]``, ``[2, F]``,
    ``[D]``)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        d, f = config.dim, config.ffn_dim
        self.dtype = config.compute_dtype
        self.gelu = config.activation == "gelu_tanh"
        self.fused = config.fused_projections
        gate, up = _normal(rngs, (d, f), config), _normal(rngs, (d, f), config)
        if self.fused:  # [D, 2, F]: one GEMM (see fuse_gate_up)
            set_weight(self, "w_gate_up", fuse_gate_up(gate, up), ("embed", None, "mlp"), config)
        else:
            set_weight(self, "w_gate", gate, ("embed", "mlp"), config)
            set_weight(self, "w_up", up, ("embed", "mlp"), config)
        set_weight(self, "w_down", _normal(rngs, (f, d), config), ("mlp", "embed"), config)

    def __call__(self, x: Array) -> Array:  # [B, T, D]
        dt = self.dtype
        x = x.astype(dt)
        if self.fused:
            gate_up = project("btd,dkf->btkf", x, self, "w_gate_up", dt)  # [B, T, 2, F]
            gate, up = gate_up[:, :, 0], gate_up[:, :, 1]
        else:
            gate = project("btd,df->btf", x, self, "w_gate", dt)
            up = project("btd,df->btf", x, self, "w_up", dt)
        act = jax.nn.gelu(gate, approximate=True) if self.gelu else jax.nn.silu(gate)
        return project("btf,fd->btd", act * up, self, "w_down", dt)


class Block(nnx.Module):
    """Pre-norm transformer block; with ``post_norms`` (Gemma) each branch's output is normed
    too before its residual add."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(config)
        self.attn = Attention(config, rngs=rngs)
        self.mlp_norm = RMSNorm(config)
        self.mlp = MLP(config, rngs=rngs)
        if config.post_norms:
            self.post_attn_norm = RMSNorm(config)
            self.post_mlp_norm = RMSNorm(config)

    def __call__(self, x, positions, ks, vs, layer, lengths, attn_mask, kv_mask, index=None):
        """``(x, ks, vs)`` after the block; arguments as :meth:`Attention.__call__`'s (``index``:
        its ``window_index``)."""
        post = self.attn.config.post_norms
        out, ks, vs = self.attn(
            self.attn_norm(x), positions, ks, vs, layer, lengths, attn_mask, kv_mask, index
        )
        x = x + (self.post_attn_norm(out) if post else out)
        out = self.mlp(self.mlp_norm(x))
        return x + (self.post_mlp_norm(out) if post else out), ks, vs


class Decoder(nnx.Module):
    """A decoder of any supported family (:class:`~specjax.models.config.ModelConfig`).

    Call as ``model(tokens).logits`` for full-sequence logits ``[B, T, V]``, or
    ``model(tokens, cache=cache, positions=..., attn_mask=...)`` for ``(logits, cache, _)``
    (a :class:`Forward` either way).
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embed = _param(
            rngs, (config.vocab_size, config.dim), ("vocab", "embed"), config, config.dim**-0.5
        )
        self.layers = nnx.List([Block(config, rngs=rngs) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config)
        if not config.tie_embeddings:  # (a tied head stays float: it is the embedding)
            head = _normal(rngs, (config.dim, config.vocab_size), config)
            set_weight(self, "lm_head", head, ("embed", "vocab"), config)

    def embed_tokens(self, tokens: Array) -> Array:
        """``[B, T, D]`` the embeddings of ``tokens [B, T]`` in the compute dtype (times
        ``sqrt(D)``, rounded to that dtype, with ``embed_scale``)."""
        c = self.config
        x = jnp.take(self.embed[...], tokens, axis=0).astype(c.compute_dtype)
        if c.embed_scale:
            x = x * jnp.asarray(c.dim**0.5, c.compute_dtype)
        return x

    def logits(self, x: Array) -> Array:
        """fp32 ``[B, T, V]`` logits of the last block's outputs ``x [B, T, D]``: final norm,
        output head, final soft-cap."""
        c = self.config
        x = self.norm(x)
        dtype = c.compute_dtype
        if c.tie_embeddings:  # contract with the [V, D] embedding as stored: no transpose
            logits = tied_logits(x, self.embed[...].astype(dtype))
        else:
            logits = project("btd,dv->btv", x, self, "lm_head", dtype)
        return softcap(logits.astype(jnp.float32), c.final_softcap)

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
            a feature drafter (:mod:`specjax.drafters.feature`); computed in the same pass. -1
            is the embeddings (the input of block 0).

        Returns:
          A :class:`Forward`: fp32 ``logits [B, T, V]``; ``cache`` with the new entries
          appended (``lengths + T``), None if no cache was given; with ``features`` the hidden
          states ``[B, T, A, D]`` (A = ``len(features)``, in the order given) of all T tokens,
          else None.
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
        x = self.embed_tokens(tokens)  # [B, T, D]
        ks, vs = cache.k, cache.v
        # Every layer reads the same window of its cache: chosen once here, not per layer.
        index = attention_windows.window_index(cache.lengths, t, cache.capacity)
        hidden = {-1: x}  # -1: the embeddings, the input of block 0
        for i, layer in enumerate(self.layers):
            x, ks, vs = layer(x, positions, ks, vs, i, cache.lengths, attn_mask, kv_mask, index)
            if i in features:
                hidden[i] = x
        if logits_to_keep is not None:
            x = x[:, t - logits_to_keep :]
        logits = self.logits(x)
        new_cache = None if standalone else KVCache(ks, vs, cache.lengths + t)
        stacked = None
        if features:
            bad = [i for i in features if not -1 <= i < c.num_layers]
            if bad:
                raise ValueError(
                    f"feature layers {bad} outside the model's blocks 0 .. {c.num_layers - 1} "
                    "(-1: the embeddings)"
                )
            stacked = jnp.stack([hidden[i] for i in features], axis=2).astype(jnp.float32)
        return Forward(logits, new_cache, stacked)
