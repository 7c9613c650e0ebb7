"""A Flax NNX model as a plain pytree, so jitted decoding code can take it as an argument.

``PureModel`` holds the module's graph definition as static metadata and its state (the
parameters) as pytree leaves: ``jax.jit(f)(pure_model, ...)`` compiles once per architecture and
reads the weights as ordinary arguments, never as baked-in constants.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.typing import Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PureModel:
    """A split :class:`Decoder`: static ``graphdef`` (and the module's ``config``) plus ``state``
    leaves.

    Call it exactly like the module: ``model(tokens, cache=..., positions=..., attn_mask=...)``.
    """

    graphdef: nnx.GraphDef = dataclasses.field(metadata=dict(static=True))
    state: nnx.State
    # The module's config, read once: rebuilding the module (:attr:`module`) to read it took
    # ~0.2-1 ms of host time per access, several per generate call.
    config: ModelConfig = dataclasses.field(default=None, metadata=dict(static=True))

    def __post_init__(self):
        if self.config is None:
            object.__setattr__(self, "config", self.module.config)

    @classmethod
    def of(cls, module: Decoder) -> PureModel:
        """Splits ``module`` (its arrays are shared, not copied)."""
        graphdef, state = nnx.split(module)
        return cls(graphdef, state, module.config)

    @property
    def module(self) -> Decoder:
        """The module rebuilt from graphdef and state."""
        return nnx.merge(self.graphdef, self.state)

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def as_pure(model: PureModel | Decoder) -> PureModel:
    """``model`` as a :class:`PureModel` (a :class:`Decoder` as loaded is split, nothing copied),
    so every public entry point takes either."""
    return model if isinstance(model, PureModel) else PureModel.of(model)


def truncated(module: Decoder, num_layers: int) -> Decoder:
    """A layer-truncated self-draft: the first ``num_layers`` blocks of ``module`` with its
    embedding, final norm and head (weights shared, nothing copied).

    Raises:
      ValueError: ``num_layers`` is not in ``1 .. module.config.num_layers - 1``.
    """
    full = module.config.num_layers
    if not 1 <= num_layers < full:
        raise ValueError(
            f"a self-draft keeps 1 .. {full - 1} of the target's {full} layers, got {num_layers}"
        )
    config = dataclasses.replace(
        module.config,
        num_layers=num_layers,
        layer_types=module.config.layer_types[:num_layers],
        name=f"{module.config.name}[:{num_layers}]",
    )
    draft = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
    draft.embed = module.embed
    draft.norm = module.norm
    draft.layers = nnx.List(list(module.layers)[:num_layers])
    if not config.tie_embeddings:
        draft.lm_head = module.lm_head
        if config.weight_quant is not None:
            draft.lm_head_scale = module.lm_head_scale
    return draft


def prefill(model: PureModel | Decoder, prompts, prompt_lengths, capacity: int) -> KVCache:
    """The KV cache of every prompt but its last token (which the first step feeds).

    Args:
      model: the model.
      prompts: int ``[B, T]`` right-padded prompts.
      prompt_lengths: int ``[B]`` true lengths (>= 1).
      capacity: S, slots of the returned cache.

    Returns:
      A :class:`KVCache` with ``lengths = prompt_lengths - 1``; slots past it are stale.
    """
    return prefill_features(model, prompts, prompt_lengths, capacity, ())[0]


def prefill_features(
    model: PureModel | Decoder, prompts, prompt_lengths, capacity: int, features: tuple[int, ...]
) -> tuple[KVCache, Array]:
    """:func:`prefill` and, in the same pass, ``hidden [B, T - 1, A, D]``: the outputs of the
    ``features`` blocks at the prefilled tokens (for a feature drafter; A = ``len(features)``)."""
    b, t = prompts.shape
    cache = KVCache.init(model.config, b, capacity)
    hidden = jnp.zeros((b, 0, len(features), model.config.dim), jnp.float32)
    if t > 1:  # static: a batch of one-token prompts has nothing to prefill
        _, cache, out = model(prompts[:, : t - 1], cache=cache, features=features)
        hidden = hidden if out is None else out
    cache = cache.rollback(jnp.asarray(prompt_lengths, jnp.int32) - 1)
    return cache, hidden
