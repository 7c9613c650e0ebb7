"""A feature-level draft head (EAGLE-3 class) in Flax NNX.

The head drafts for a target it reads: at draft position t it takes the pair (g, x_t), where x_t
is the token at t and g a D-wide feature: for a committed token, the target's hidden states
after blocks ``feature_layers`` at position t - 1, standardised per dimension (statistics of
the training data), concatenated (``[A * D]``) and fused by ``fc`` to D; for a drafted token,
the head's own output at t - 1. One decoder layer whose attention reads
``concat(norm(embed(x_t)), norm(g))`` (2D wide), residual g, then a SwiGLU MLP, gives the
output h_t (fed back as the next g), and a head over a reduced *draft vocabulary* of W target
ids (``d2t [W]``) gives the law of x_{t+1}.

The target's input embedding (frozen, shared, never copied) embeds the tokens; the head's rows
start from the target's output rows ``embed[d2t]``. The head keeps its own one-layer
:class:`~specjax.models.cache.KVCache` (``[1, B, S, G, E]``), written and rolled back exactly like
the target's.

Training (:mod:`specjax.train.eagle`) runs the same layer over whole windows with
*training-time test* (:meth:`EagleHead.ttt_attention`): step j's queries also see the head's own
keys of steps 1..j, as drafting does.

Letters (:mod:`specjax.typing`): A target feature layers, W draft vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.models import attention
from specjax.models.cache import KVCache, write_slots
from specjax.models.config import ModelConfig
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
      dim: D, the target's width (features and embeddings are D wide).
      num_heads: H; num_kv_heads: G; head_dim: E; ffn_dim: the MLP's hidden width.
      feature_layers: the target blocks (0-based) whose outputs are read (A of them).
      norm_eps, rope_theta: as the target's.
      max_seq_len: the longest sequence (the head's cache capacity by default).
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

    def __post_init__(self):
        if not 1 <= self.draft_vocab <= self.vocab_size:
            raise ValueError(
                f"draft_vocab must be in 1 .. {self.vocab_size}, got {self.draft_vocab}"
            )
        if not self.feature_layers or self.num_heads % self.num_kv_heads:
            raise ValueError("EagleConfig needs feature layers and num_heads % num_kv_heads == 0")
        object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))

    @classmethod
    def for_target(
        cls, target: ModelConfig, feature_layers, draft_vocab: int, ffn_dim: int | None = None
    ) -> EagleConfig:
        """The head for ``target``: its width, heads and RoPE; ``feature_layers`` read."""
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
    def num_layers(self) -> int:
        """Layers of the head's KV cache (one)."""
        return 1

    @property
    def inverse_frequencies(self) -> np.ndarray:
        """``[E/2]`` the head's RoPE inverse frequencies (for :func:`apply_rope`)."""
        return inverse_frequencies(self.head_dim, self.rope_theta, None)

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


class EagleHead(nnx.Module):
    """The draft head. Build with :meth:`create` (from a target) or :func:`load_head`."""

    def __init__(self, config: EagleConfig, embed: Array, d2t: Array, *, rngs: nnx.Rngs):
        c = config
        d, h, g, e, f = c.dim, c.num_heads, c.num_kv_heads, c.head_dim, c.ffn_dim
        a = len(c.feature_layers)
        self.config = c
        self.embed = Frozen(jnp.asarray(embed))  # [V, D] the target's input embedding
        self.d2t = Frozen(jnp.asarray(d2t, jnp.int32))  # [W]
        # Per-dimension standardisation of the target features (set from training data): LLM
        # hidden states carry a few huge, nearly constant dimensions that would swamp the rest.
        self.feature_shift = Frozen(jnp.zeros((a, d)))  # [A, D]
        self.feature_scale = Frozen(jnp.ones((a, d)))  # [A, D]
        self.fc = nnx.Param(_normal(rngs, (a * d, d), (a * d) ** -0.5))
        self.norm_embed = nnx.Param(jnp.ones((d,)))
        self.norm_feature = nnx.Param(jnp.ones((d,)))
        self.wq = nnx.Param(_normal(rngs, (2 * d, h, e), (2 * d) ** -0.5))
        self.wk = nnx.Param(_normal(rngs, (2 * d, g, e), (2 * d) ** -0.5))
        self.wv = nnx.Param(_normal(rngs, (2 * d, g, e), (2 * d) ** -0.5))
        self.wo = nnx.Param(_normal(rngs, (h * e, d), (h * e) ** -0.5) * 0.1)
        self.norm_mlp = nnx.Param(jnp.ones((d,)))
        self.w_gate = nnx.Param(_normal(rngs, (d, f), d**-0.5))
        self.w_up = nnx.Param(_normal(rngs, (d, f), d**-0.5))
        self.w_down = nnx.Param(_normal(rngs, (f, d), f**-0.5) * 0.1)
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

    # --- the layer, shared by drafting and training -------------------------------------------

    def fuse(self, features: Array) -> Array:
        """``[..., A, D]`` target features -> ``[..., D]`` (standardised per dimension, then
        ``fc``)."""
        x = (features.astype(jnp.float32) - self.feature_shift[...]) / self.feature_scale[...]
        return x.reshape(*x.shape[:-2], -1) @ self.fc[...]

    def qkv(self, g: Array, tokens: Array, positions: Array):
        """Queries ``[B, T, H, E]``, keys and values ``[B, T, G, E]`` of pairs (g, token)."""
        c = self.config
        x = jnp.take(self.embed[...], tokens, axis=0)  # [B, T, D]
        inp = jnp.concatenate(
            [rms(x, c.norm_eps, self.norm_embed[...]), rms(g, c.norm_eps, self.norm_feature[...])],
            axis=-1,
        )  # [B, T, 2D]
        q = jnp.einsum("bti,ihe->bthe", inp, self.wq[...])
        k = jnp.einsum("bti,ige->btge", inp, self.wk[...])
        v = jnp.einsum("bti,ige->btge", inp, self.wv[...])
        inv = c.inverse_frequencies
        return apply_rope(q, positions, inv), apply_rope(k, positions, inv), v

    def finish(self, g: Array, attn: Array) -> tuple[Array, Array]:
        """``(h [B, T, D], logits [B, T, W])`` from the attention output ``[B, T, H, E]``."""
        c = self.config
        h = g + attn.reshape(*attn.shape[:2], -1) @ self.wo[...]
        m = rms(h, c.norm_eps, self.norm_mlp[...])
        h = h + (jax.nn.silu(m @ self.w_gate[...]) * (m @ self.w_up[...])) @ self.w_down[...]
        logits = rms(h, c.norm_eps, self.norm_out[...]) @ self.head[...]
        return h, logits

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
        """Runs T pairs per row through the layer with the head's KV cache.

        Args:
          g: ``[B, T, D]`` fused features (:meth:`fuse`) or the head's own outputs.
          tokens: int ``[B, T]``.
          cache: the head's one-layer cache; the pairs are written at ``lengths ..``.
          positions: ``[B, T]`` rotary positions (default ``lengths + arange(T)``).
          attn_mask: bool ``[B, T, T]`` among the new pairs (default causal).
          kv_mask: a :class:`specjax.tree.LevelMask` overriding ``attn_mask`` (a draft tree,
            as :class:`~specjax.models.Decoder`).
          last: optional int ``[B]``: only pair ``last[b]`` of each row is wanted, and it
            sees the pairs before it (causal; no ``attn_mask`` or ``kv_mask`` then). Every
            pair's keys and values are still written, but the query, the attention, the MLP and
            the output head run on that one row: ``h [B, 1, D]``, ``logits [B, 1, W]``. (A
            drafter feeding its pending pairs needs the last one's outputs only; on XLA:CPU a
            one-row product is also the faster kernel, ``models.decoder.tied_logits``.)

        Returns:
          ``(h [B, T, D], logits [B, T, W], cache)`` with ``lengths + T`` (``T`` is 1 in ``h``
          and ``logits`` with ``last``).
        """
        c = self.config
        b, t = tokens.shape
        if positions is None:
            positions = cache.lengths[:, None] + jnp.arange(t)[None, :]
        if last is not None and (attn_mask is not None or kv_mask is not None):
            raise ValueError("EagleHead: `last` feeds a causal run of pairs; pass no mask with it")
        q, k, v = self.qkv(g, tokens, positions)
        ks = write_slots(cache.k, 0, cache.lengths, k)
        vs = write_slots(cache.v, 0, cache.lengths, v)
        seen = cache.lengths
        if last is not None:  # pair last[b] alone: the pairs before it count as committed
            pick = last.astype(jnp.int32)[:, None]  # [B, 1]
            q = jnp.take_along_axis(q, pick[:, :, None, None], axis=1)  # [B, 1, H, E]
            g = jnp.take_along_axis(g, pick[:, :, None], axis=1)  # [B, 1, D]
            seen, attn_mask = seen + pick[:, 0], jnp.ones((b, 1, 1), bool)
        elif kv_mask is None and attn_mask is None:
            attn_mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
        gq, r = c.num_kv_heads, c.num_heads // c.num_kv_heads
        qg = q.reshape(b, q.shape[1], gq, r, c.head_dim)
        out = attention.attend(  # over the live window of the head's cache
            qg,
            ks,
            vs,
            0,
            seen,
            attn_mask,
            kv_mask,
            scale=c.head_dim**-0.5,
            dtype=qg.dtype,
        ).reshape(b, q.shape[1], c.num_heads, -1)
        h, logits = self.finish(g, out)
        return h, logits, KVCache(ks, vs, cache.lengths + t)

    # --- training -------------------------------------------------------------------------------

    def ttt_attention(self, q: Array, keys: list[Array], values: list[Array]) -> Array:
        """Attention of training-time-test step j = ``len(keys) - 1`` over whole windows.

        Step j's query at index t stands for draft position t + j: it sees step 0's keys at
        indices <= t (the committed pairs) and, for i = 1..j, step i's key at index t (the head's
        own pairs at positions t + 1 .. t + j), as drafting j tokens ahead does.

        Args:
          q: ``[B, T, H, E]`` step j's queries; keys, values: per step ``[B, T, G, E]``.

        Returns:
          ``[B, T, H, E]``.
        """
        c = self.config
        b, t = q.shape[:2]
        gq, r = c.num_kv_heads, c.num_heads // c.num_kv_heads
        qg = q.reshape(b, t, gq, r, c.head_dim) * c.head_dim**-0.5
        causal = jnp.tril(jnp.ones((t, t), bool))
        s0 = jnp.einsum("btgre,bsge->bgrts", qg, keys[0])
        s0 = jnp.where(causal, s0, jnp.finfo(jnp.float32).min)  # [B, G, R, T, T]
        diag = [jnp.einsum("btgre,btge->bgrt", qg, k)[..., None] for k in keys[1:]]
        probs = jax.nn.softmax(jnp.concatenate([s0, *diag], axis=-1), axis=-1)
        out = jnp.einsum("bgrts,bsge->btgre", probs[..., :t], values[0])
        for i, v in enumerate(values[1:]):
            out = out + probs[..., t + i].transpose(0, 3, 1, 2)[..., None] * v[:, :, :, None]
        return out.reshape(b, t, c.num_heads, c.head_dim)


STATS = ("feature_shift", "feature_scale")


def save_head(path: str | Path, head: EagleHead, extra: dict | None = None) -> None:
    """Writes ``config.json`` and ``params.npz`` (trained weights as float16, ``d2t`` and the
    feature statistics) into the directory ``path``; the target's embedding is not stored (it
    comes from the target)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    params = nnx.to_pure_dict(nnx.state(head, nnx.Param))
    arrays = {k: np.asarray(v, np.float16) for k, v in params.items()}
    arrays["d2t"] = np.asarray(head.d2t[...], np.int32)
    for name in STATS:
        arrays[name] = np.asarray(getattr(head, name)[...], np.float32)
    tmp = path / ".params.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(path / "params.npz")
    meta = {"config": head.config.to_json(), **(extra or {})}
    (path / "config.json").write_text(json.dumps(meta, indent=2) + "\n")


def load_head(path: str | Path, target_embed: Array) -> EagleHead:
    """The head saved by :func:`save_head`, reading the target's embedding ``[V, D]``.

    Raises:
      FileNotFoundError: ``path`` has no ``config.json`` / ``params.npz``.
      ValueError: the head does not fit the target's embedding.
    """
    path = Path(path)
    for name in ("config.json", "params.npz"):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} has no {name}: not a draft head saved by save_head")
    config = EagleConfig.from_json(json.loads((path / "config.json").read_text())["config"])
    if tuple(target_embed.shape) != (config.vocab_size, config.dim):
        raise ValueError(
            f"the head at {path} drafts for a target with V = {config.vocab_size}, D = "
            f"{config.dim}; this target's embedding is {tuple(target_embed.shape)}"
        )
    with np.load(path / "params.npz") as data:
        arrays = {k: np.asarray(data[k]) for k in data.files}
    head = nnx.eval_shape(lambda: EagleHead(config, target_embed, arrays["d2t"], rngs=nnx.Rngs(0)))
    head.embed = Frozen(target_embed)
    head.d2t = Frozen(jnp.asarray(arrays.pop("d2t"), jnp.int32))
    for name in STATS:
        if name in arrays:
            setattr(head, name, Frozen(jnp.asarray(arrays.pop(name), jnp.float32)))
    for name, value in arrays.items():
        getattr(head, name).set_value(jnp.asarray(value, jnp.float32))
    return head
