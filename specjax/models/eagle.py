"""A feature-level draft head (EAGLE-3 class) in Flax NNX: specjax's own heads and the heads
users download (EAGLE / SpecForge and speculators layouts, :mod:`specjax.models.eagle_formats`).

At draft position t the head takes the pair (g, x_t): x_t the token at t; g, for a committed
token, the target's hidden states after blocks ``feature_layers`` at t - 1 (``[A, D_t]``),
scaled per dimension (older heads also shift), optionally RMS-normed (EAGLE-3.1's ``fc_norm``
per feature or ``norm_before_fc`` over all), concatenated and fused by ``fc`` to D; for a
drafted token, the head's own output at t - 1. Its first layer's attention reads
``concat(norm(embed(x_t)), norm(g))`` (2D wide) with residual g (``norm_before_residual``:
norm(g)), then a SwiGLU MLP; further layers are plain pre-norm blocks. A head over W draft
ids (``d2t [W]``: their target ids) gives the law of x_{t+1} from ``norm(h_t)``; the next g is
``h_t`` (``norm_output``: the normed one). The embedding is the target's (frozen, shared) unless
the head ships its own; the head keeps its own :class:`~specjax.models.cache.KVCache` (one layer
per head layer), written and rolled back like the target's. Training (:mod:`specjax.train.eagle`,
one-layer heads) runs the first layer over whole windows with *training-time test*
(:meth:`EagleHead.ttt_attention`).

Letters (:mod:`specjax.typing`): A target feature layers, W draft vocabulary; D_t the target's
width where it differs from the head's D.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.models import attention
from specjax.models.cache import KVCache, write_slots
from specjax.models.config import ModelConfig, RopeScaling
from specjax.models.rope import apply_rope, inverse_frequencies
from specjax.typing import Array


class Frozen(nnx.Variable):
    """A module array that training leaves alone (the target's embedding, the id map)."""


@dataclasses.dataclass(frozen=True)
class EagleConfig:
    """Shape of a feature draft head.

    Attributes:
      vocab_size: V, the target's vocabulary.
      draft_vocab: W, ids the head can propose (``d2t`` maps them to target ids).
      dim: D, the head's width (its embeddings and outputs).
      num_heads: H; num_kv_heads: G; head_dim: E; ffn_dim: the MLP's hidden width.
      feature_layers: the target blocks (0-based) whose outputs are read (A of them); -1 reads
        the target's embeddings (the input of block 0).
      norm_eps, rope_theta: the head's (specjax's heads: the target's).
      max_seq_len: the longest sequence (the head's cache capacity by default).
      num_layers: the head's decoder layers (the first reads the embedding and the feature).
      target_dim: D_t, the target's width, or None: D.
      rope_scaling: the head's own RoPE scaling, or None.
      attention_bias: biases on q, k, v and the output projection.
      qk_norm: per-head RMSNorm on q and k (a Qwen3-type head layer).
      norm_before_residual: the first layer's residual is norm(g) instead of g.
      fc_norm: an RMSNorm over each of the A features before ``fc`` (EAGLE-3.1).
      norm_before_fc: one RMSNorm over the concatenated A * D_t features before ``fc``.
      norm_output: the normed output is fed back as the next g, and the head reads it unnormed.

    The pair of the first token (its feature zero) is hidden from every later pair's attention,
    in drafting and in training: vLLM's and SGLang's drafts pair the feature of position i
    with the token at i + 1, so no pair holds the first token there, and a head behaves the
    same in every engine.
    """

    vocab_size: int
    draft_vocab: int
    dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_dim: int
    feature_layers: tuple[int, ...]
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    num_layers: int = 1
    target_dim: int | None = None
    rope_scaling: RopeScaling | None = None
    attention_bias: bool = False
    qk_norm: bool = False
    norm_before_residual: bool = False
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_output: bool = False

    def __post_init__(self):
        if not 1 <= self.draft_vocab <= self.vocab_size:
            raise ValueError(
                f"draft_vocab must be in 1 .. {self.vocab_size}, got {self.draft_vocab}"
            )
        if not self.feature_layers or self.num_heads % self.num_kv_heads:
            raise ValueError("EagleConfig needs feature layers and num_heads % num_kv_heads == 0")
        if self.num_layers < 1:
            raise ValueError(f"a head has at least one layer, got num_layers={self.num_layers}")
        if self.fc_norm and self.norm_before_fc:
            raise ValueError("fc_norm and norm_before_fc exclude each other (EAGLE-3.1)")
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))
        object.__setattr__(self, "target_dim", self.target_dim or self.dim)

    @classmethod
    def for_target(
        cls, target: ModelConfig, feature_layers, draft_vocab: int, ffn_dim: int | None = None
    ) -> EagleConfig:
        """specjax's head for ``target``: its width, heads and RoPE; ``feature_layers`` read."""
        return cls(
            vocab_size=target.vocab_size,
            draft_vocab=draft_vocab,
            dim=target.dim,
            num_heads=target.num_heads,
            num_kv_heads=target.num_kv_heads,
            head_dim=target.head_dim,
            ffn_dim=ffn_dim or target.ffn_dim,
            feature_layers=tuple(feature_layers),
            norm_eps=target.norm_eps,
            rope_theta=target.rope_theta,
            max_seq_len=target.max_seq_len,
        )

    @property
    def inverse_frequencies(self) -> np.ndarray:
        """``[E/2]`` the head's RoPE inverse frequencies (for :func:`apply_rope`)."""
        return inverse_frequencies(self.head_dim, self.rope_theta, self.rope_scaling)

    @property
    def compute_dtype(self):
        """The KV cache's dtype (float32)."""
        return jnp.float32

    def to_json(self) -> dict:
        """A JSON-able dict (:meth:`from_json` inverts it)."""
        return dataclasses.asdict(self) | {"feature_layers": list(self.feature_layers)}

    @classmethod
    def from_json(cls, d: dict) -> EagleConfig:
        """The config of :meth:`to_json`."""
        return cls(**d)


def _normal(rngs, shape, std):
    return std * jax.random.normal(rngs.params(), shape, jnp.float32)


def rms(x: Array, eps: float, scale: Array | None = None) -> Array:
    """``x / rms(x)`` over the last axis (times ``scale`` if given), in fp32."""
    x = x.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if scale is None else y * scale


class HeadLayer(nnx.Module):
    """One decoder layer of the head: the first reads ``concat(embedding, feature)`` (2D wide,
    ``norm_embed`` and ``norm_feature``), later ones the stream (``norm_attn``)."""

    def __init__(self, config: EagleConfig, first: bool, *, rngs: nnx.Rngs):
        c = config
        d, h, g, e, f = c.dim, c.num_heads, c.num_kv_heads, c.head_dim, c.ffn_dim
        i = 2 * d if first else d
        if first:
            self.norm_embed = nnx.Param(jnp.ones((d,)))
            self.norm_feature = nnx.Param(jnp.ones((d,)))
        else:
            self.norm_attn = nnx.Param(jnp.ones((d,)))
        self.wq = nnx.Param(_normal(rngs, (i, h, e), i**-0.5))
        self.wk = nnx.Param(_normal(rngs, (i, g, e), i**-0.5))
        self.wv = nnx.Param(_normal(rngs, (i, g, e), i**-0.5))
        self.wo = nnx.Param(_normal(rngs, (h * e, d), (h * e) ** -0.5) * 0.1)
        if c.attention_bias:
            self.bq, self.bo = nnx.Param(jnp.zeros((h, e))), nnx.Param(jnp.zeros((d,)))
            self.bk, self.bv = nnx.Param(jnp.zeros((g, e))), nnx.Param(jnp.zeros((g, e)))
        if c.qk_norm:
            self.q_norm, self.k_norm = nnx.Param(jnp.ones((e,))), nnx.Param(jnp.ones((e,)))
        self.norm_mlp = nnx.Param(jnp.ones((d,)))
        self.w_gate = nnx.Param(_normal(rngs, (d, f), d**-0.5))
        self.w_up = nnx.Param(_normal(rngs, (d, f), d**-0.5))
        self.w_down = nnx.Param(_normal(rngs, (f, d), f**-0.5) * 0.1)

    def qkv(self, inp: Array, positions: Array, c: EagleConfig):
        """Queries ``[B, T, H, E]``, keys and values ``[B, T, G, E]`` of the layer's input."""
        q = jnp.einsum("bti,ihe->bthe", inp, self.wq[...])
        k = jnp.einsum("bti,ige->btge", inp, self.wk[...])
        v = jnp.einsum("bti,ige->btge", inp, self.wv[...])
        if c.attention_bias:
            q, k, v = q + self.bq[...], k + self.bk[...], v + self.bv[...]
        if c.qk_norm:
            q, k = rms(q, c.norm_eps, self.q_norm[...]), rms(k, c.norm_eps, self.k_norm[...])
        inv = c.inverse_frequencies
        return apply_rope(q, positions, inv), apply_rope(k, positions, inv), v

    def finish(self, residual: Array, attn: Array, c: EagleConfig) -> Array:
        """The stream after the attention output ``[B, T, H, E]`` and the MLP."""
        h = residual + attn.reshape(*attn.shape[:2], -1) @ self.wo[...]
        if c.attention_bias:
            h = h + self.bo[...]
        m = rms(h, c.norm_eps, self.norm_mlp[...])
        return h + (jax.nn.silu(m @ self.w_gate[...]) * (m @ self.w_up[...])) @ self.w_down[...]


class EagleHead(nnx.Module):
    """The draft head. Build with :meth:`create` (from a target) or
    :func:`specjax.models.eagle_formats.load_head`."""

    def __init__(self, config: EagleConfig, embed: Array, d2t: Array, *, rngs: nnx.Rngs):
        c = config
        a, d, dt = len(c.feature_layers), c.dim, c.target_dim
        self.config = c
        self.embed = Frozen(jnp.asarray(embed))  # [V, D] the target's input embedding (or own)
        self.d2t = Frozen(jnp.asarray(d2t, jnp.int32))  # [W]
        # Per-dimension standardisation of the target features: hidden states carry a few huge,
        # nearly constant dimensions that would swamp the rest. A scale folds into fc exactly
        # (the published layouts have no fc bias); a shift does not (older heads only).
        self.feature_shift = Frozen(jnp.zeros((a, dt)))  # [A, D_t]
        self.feature_scale = Frozen(jnp.ones((a, dt)))  # [A, D_t]
        if c.fc_norm:
            self.fc_norms = nnx.Param(jnp.ones((a, dt)))
        if c.norm_before_fc:
            self.input_norm = nnx.Param(jnp.ones((a * dt,)))
        self.fc = nnx.Param(_normal(rngs, (a * dt, d), (a * dt) ** -0.5))
        self.layers = nnx.List([HeadLayer(c, i == 0, rngs=rngs) for i in range(c.num_layers)])
        self.norm_out = nnx.Param(jnp.ones((d,)))
        self.head = nnx.Param(_normal(rngs, (d, c.draft_vocab), d**-0.5))  # [D, W]

    @classmethod
    def create(
        cls, config: EagleConfig, target_embed: Array, d2t, seed: int = 0, head_rows=None
    ) -> EagleHead:
        """A fresh head; its output rows start as ``head_rows [W, D]`` if given (e.g. the
        target's tied output rows ``embed[d2t]``), else random."""
        head = cls(config, target_embed, d2t, rngs=nnx.Rngs(seed))
        if head_rows is not None:
            head.head[...] = jnp.asarray(head_rows, jnp.float32).T
        return head

    # --- the layers, shared by drafting and training ------------------------------------------

    def fuse(self, features: Array) -> Array:
        """``[..., A, D_t]`` target features -> ``[..., D]``: standardised per dimension,
        RMS-normed as the config says, then ``fc``."""
        c = self.config
        x = (features.astype(jnp.float32) - self.feature_shift[...]) / self.feature_scale[...]
        if c.fc_norm:
            x = rms(x, c.norm_eps, self.fc_norms[...])
        x = x.reshape(*x.shape[:-2], -1)
        if c.norm_before_fc:
            x = rms(x, c.norm_eps, self.input_norm[...])
        return x @ self.fc[...]

    def first_input(self, g: Array, tokens: Array) -> tuple[Array, Array]:
        """``(concat(norm(embed(x)), norm(g)) [B, T, 2D], residual [B, T, D])`` of the first
        layer."""
        c, first = self.config, self.layers[0]
        x = jnp.take(self.embed[...], tokens, axis=0)  # [B, T, D]
        hidden = rms(g, c.norm_eps, first.norm_feature[...])
        inp = jnp.concatenate([rms(x, c.norm_eps, first.norm_embed[...]), hidden], axis=-1)
        return inp, (hidden if c.norm_before_residual else g)

    def qkv(self, g: Array, tokens: Array, positions: Array):
        """The first layer's queries ``[B, T, H, E]``, keys and values ``[B, T, G, E]`` of
        pairs (g, token)."""
        inp, _ = self.first_input(g, tokens)
        return self.layers[0].qkv(inp, positions, self.config)

    def output(self, h: Array) -> tuple[Array, Array]:
        """``(next g [B, T, D], logits [B, T, W])`` of the last layer's stream ``h``."""
        c = self.config
        normed = rms(h, c.norm_eps, self.norm_out[...])
        return (normed if c.norm_output else h), normed @ self.head[...]

    def finish(self, g: Array, attn: Array) -> tuple[Array, Array]:
        """``(next g, logits)`` of a one-layer head from the first layer's attention output
        ``[B, T, H, E]`` (training)."""
        c, first = self.config, self.layers[0]
        residual = rms(g, c.norm_eps, first.norm_feature[...]) if c.norm_before_residual else g
        return self.output(first.finish(residual, attn, c))

    # --- drafting ------------------------------------------------------------------------------

    def __call__(
        self,
        g: Array,
        tokens: Array,
        *,
        cache: KVCache,
        positions: Array | None = None,
        attn_mask: Array | None = None,
        kv_mask=None,
        last: Array | None = None,
    ) -> tuple[Array, Array, KVCache]:
        """Runs T pairs per row through the layers with the head's KV cache.

        Args:
          g: ``[B, T, D]`` fused features (:meth:`fuse`) or the head's own outputs.
          tokens: int ``[B, T]``.
          cache: the head's cache (one layer per head layer); the pairs are written at
            ``lengths ..``.
          positions: ``[B, T]`` rotary positions (default ``lengths + arange(T)``).
          attn_mask: bool ``[B, T, T]`` among the new pairs (default causal).
          kv_mask: a :class:`specjax.tree.LevelMask` overriding ``attn_mask`` (a draft tree,
            as :class:`~specjax.models.Decoder`).
          last: optional int ``[B]``: only pair ``last[b]`` of each row is wanted, and it
            sees the pairs before it (causal; no ``attn_mask`` or ``kv_mask`` then). Every
            pair's keys and values are still written, but the last layer's query, attention,
            MLP and the output head run on that one row: ``h [B, 1, D]``, ``logits [B, 1, W]``.
            (A drafter feeding its pending pairs needs the last one's outputs only; on XLA:CPU
            a one-row product is also the faster kernel, ``models.decoder.tied_logits``.)

        Returns:
          ``(next g [B, T, D], logits [B, T, W], cache)`` with ``lengths + T`` (``T`` is 1 in
          the outputs with ``last``).
        """
        c = self.config
        b, t = tokens.shape
        if positions is None:
            positions = cache.lengths[:, None] + jnp.arange(t)[None, :]
        if last is not None and (attn_mask is not None or kv_mask is not None):
            raise ValueError("EagleHead: `last` feeds a causal run of pairs; pass no mask with it")
        if kv_mask is None and attn_mask is None:
            attn_mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
        inp, h = self.first_input(g, tokens)
        ks, vs = cache.k, cache.v
        for i, layer in enumerate(self.layers):
            if i:
                inp = rms(h, c.norm_eps, layer.norm_attn[...])
            q, k, v = layer.qkv(inp, positions, c)
            ks = write_slots(ks, i, cache.lengths, k)
            vs = write_slots(vs, i, cache.lengths, v)
            seen, mask = cache.lengths, attn_mask
            if last is not None and i == c.num_layers - 1:  # the last layer: pair last[b] alone
                pick = last.astype(jnp.int32)[:, None]  # [B, 1]
                q = jnp.take_along_axis(q, pick[:, :, None, None], axis=1)  # [B, 1, H, E]
                h = jnp.take_along_axis(h, pick[:, :, None], axis=1)  # [B, 1, D]
                seen, mask = seen + pick[:, 0], jnp.ones((b, 1, 1), bool)
            out = self._attend(q, ks, vs, i, seen, mask, kv_mask)
            h = layer.finish(h, out, c)
        g_next, logits = self.output(h)
        return g_next, logits, KVCache(ks, vs, cache.lengths + t)

    def _attend(self, q, ks, vs, layer, seen, mask, kv_mask):
        c = self.config
        b, t = q.shape[:2]
        gq, r = c.num_kv_heads, c.num_heads // c.num_kv_heads
        kv_mask = attention.HiddenFirstSlot(seen, mask, kv_mask)  # vLLM's pairs: EagleConfig
        out = attention.attend(  # over the live window of the head's cache
            q.reshape(b, t, gq, r, c.head_dim),
            ks,
            vs,
            layer,
            seen,
            mask,
            kv_mask,
            scale=c.head_dim**-0.5,
            dtype=jnp.float32,
        )
        return out.reshape(b, t, c.num_heads, -1)

    # --- training -------------------------------------------------------------------------------

    def ttt_attention(
        self, q: Array, keys: list[Array], values: list[Array], first: Array | None = None
    ) -> Array:
        """Attention of training-time-test step j = ``len(keys) - 1`` over whole windows.

        Step j's query at index t stands for draft position t + j: it sees step 0's keys at
        indices <= t (the committed pairs) and, for i = 1..j, step i's key at index t (the head's
        own pairs at positions t + 1 .. t + j), as drafting j tokens ahead does; a
        conversation's first pair (``first [B, T]``) is hidden from the others, as in drafting.

        Args:
          q: ``[B, T, H, E]`` step j's queries; keys, values: per step ``[B, T, G, E]``.
          first: bool ``[B, T]``: the windows' indices holding a conversation's first pair.

        Returns:
          ``[B, T, H, E]``.
        """
        c = self.config
        b, t = q.shape[:2]
        gq, r = c.num_kv_heads, c.num_heads // c.num_kv_heads
        qg = q.reshape(b, t, gq, r, c.head_dim) * c.head_dim**-0.5
        causal = jnp.tril(jnp.ones((t, t), bool))[None]  # [1, T, T]
        if first is not None:  # the first pair sees itself alone (step 0), no one else sees it
            own = jnp.eye(t, dtype=bool)[None] if len(keys) == 1 else False
            causal = causal & (~first[:, None, :] | own)
        s0 = jnp.einsum("btgre,bsge->bgrts", qg, keys[0])
        s0 = jnp.where(causal[:, None, None], s0, jnp.finfo(jnp.float32).min)  # [B, G, R, T, T]
        diag = [jnp.einsum("btgre,btge->bgrt", qg, k)[..., None] for k in keys[1:]]
        probs = jax.nn.softmax(jnp.concatenate([s0, *diag], axis=-1), axis=-1)
        out = jnp.einsum("bgrts,bsge->btgre", probs[..., :t], values[0])
        for i, v in enumerate(values[1:]):
            out = out + probs[..., t + i].transpose(0, 3, 1, 2)[..., None] * v[:, :, :, None]
        return out.reshape(b, t, c.num_heads, c.head_dim)
