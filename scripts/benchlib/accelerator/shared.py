"""What the sections share: timing, byte counts, the models (SmolLM2 real or random, the
Llama-3-8B shape made on the device, tiny stand-ins for ``--quick``)."""

from __future__ import annotations

import dataclasses
import functools
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import benchlib
from benchlib.accelerator.ceiling import measure_bandwidth
from benchlib.accelerator.sizes import Sizes
from specjax.models import (
    Decoder,
    ModelConfig,
    config,
    fetch,
    load_pair,
)
from specjax.models.pure import PureModel
from specjax.train.feature_data import encode_chat as encode_chat_turns

# ----------------------------------------------------------------------------- shared


def median_ms(fn: Callable[[], Any], sizes: Sizes) -> tuple[float, float]:
    """(median ms of ``fn`` (results waited for) after warm-up, ms of its first call)."""
    waited = lambda: jax.block_until_ready(fn())
    median, first = benchlib.median_time(waited, sizes.repeats, max(sizes.warmup, 1))
    return 1e3 * median, 1e3 * first


def device_free_bytes() -> int | None:
    """Free memory of the default device (bytes), or None where it does not say."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


def tree_bytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree))


@dataclasses.dataclass
class Bench:
    """What the sections share: sizes, the measured bandwidth and the loaded SmolLM2."""

    sizes: Sizes
    gguf: Path | None  # the cached SmolLM2 GGUF, None: random weights of its shape
    head_dir: str
    hlo_dir: Path | None = None  # where compiled programs' HLO text is written, if anywhere
    bandwidth: dict[str, float] = dataclasses.field(default_factory=dict)
    _smollm2: dict = dataclasses.field(default_factory=dict)

    def dump_hlo(self, name: str, text: str) -> None:
        """Writes ``text`` gzipped to ``<hlo_dir>/<name>.hlo.txt.gz`` (nothing without
        ``hlo_dir``)."""
        if self.hlo_dir is not None:
            self.hlo_dir.mkdir(parents=True, exist_ok=True)
            with gzip.open(self.hlo_dir / f"{name}.hlo.txt.gz", "wt", encoding="utf-8") as f:
                f.write(text)

    def copy_bandwidth(self) -> float:
        """The copy ceiling (bytes read + written per second, timed inside one program),
        measured once (:func:`~benchlib.accelerator.ceiling.measure_bandwidth`; ``bandwidth``
        then also holds ``host_copy``, the ceiling timed per host call)."""
        if "copy" not in self.bandwidth:
            self.bandwidth.update(measure_bandwidth(self.sizes))
        return self.bandwidth["copy"]

    def smollm2(self, dtype: str = "float32") -> tuple[PureModel, Any, str]:
        """``(model, tokenizer or None, weights note)``: SmolLM2 in ``dtype`` (real weights
        when the GGUF is cached, else random ones of its shape; a tiny stand-in in quick)."""
        if dtype not in self._smollm2:
            self._smollm2[dtype] = load_smollm2(self.sizes, self.gguf, dtype)
        return self._smollm2[dtype]


def cached_smollm2() -> Path | None:
    """The SmolLM2 GGUF if it is already in the cache (never downloads)."""
    path = fetch.default_cache_dir() / fetch.FILENAME
    if path.is_file() and path.stat().st_size == fetch.SIZE:
        return fetch.fetch_smollm2()  # returns the cached file at once
    return None


def tiny_smollm2(dtype: str) -> ModelConfig:
    """SmolLM2's stand-in in --quick: tied, byte vocabulary and then some."""
    return config.tiny(
        vocab_size=512, dim=64, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=128,
        max_seq_len=1024, tie_embeddings=True, dtype=dtype, param_dtype=dtype,
        name="smollm2-tiny-random",
    )  # fmt: skip


def tiny_llama8b() -> ModelConfig:
    """The Llama-3-8B shape's stand-in in --quick (untied, bf16)."""
    return config.tiny(
        vocab_size=1024, dim=128, num_layers=2, num_heads=8, num_kv_heads=2, ffn_dim=256,
        max_seq_len=1024, dtype="bfloat16", param_dtype="bfloat16", name="llama3-8b-tiny-random",
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames=("shape", "dtype", "ones"))
def _leaf(key, *, shape, dtype, ones):
    if ones:
        return jnp.ones(shape, dtype)
    return (jax.random.normal(key, shape, jnp.float32) * shape[0] ** -0.5).astype(dtype)


def random_model(cfg: ModelConfig, seed: int = 0) -> PureModel:
    """A random Llama of ``cfg``: normal(0, 1/sqrt(fan-in)) matrices, unit norm scales.

    Above 64M parameters the leaves are made on the default device, one small jitted
    initialiser per shape (a host-side init of 16 GB would take minutes); below, on the host
    (no compiling).
    """
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(seed)))
    graphdef, state = nnx.split(abstract)
    leaves, treedef = jax.tree.flatten(state)
    if cfg.num_params > 64_000_000:
        keys = jax.random.split(jax.random.key(seed), len(leaves))
        made = [
            _leaf(k, shape=tuple(x.shape), dtype=np.dtype(x.dtype), ones=len(x.shape) == 1)
            for k, x in zip(keys, leaves, strict=True)
        ]
    else:
        rng = np.random.default_rng(seed)

        def host(x):
            if len(x.shape) == 1:
                return jnp.ones(x.shape, x.dtype)
            value = rng.standard_normal(x.shape, np.float32) * x.shape[0] ** -0.5
            return jnp.asarray(value, x.dtype)

        made = [host(x) for x in leaves]
    return PureModel(graphdef, jax.tree.unflatten(treedef, made))


def load_smollm2(sizes: Sizes, gguf: Path | None, dtype: str) -> tuple[PureModel, Any, str]:
    """See :meth:`Bench.smollm2`."""
    if sizes.quick:
        return random_model(tiny_smollm2(dtype)), None, "tiny random stand-in (--quick)"
    if gguf is not None:
        smol = load_pair("smollm2", source=gguf, dtype=dtype)
        return smol.target, smol.tokenizer, f"real weights ({gguf.name} -> {dtype})"
    cfg = config.smollm2_135m(dtype=dtype, param_dtype=dtype)
    return random_model(cfg), None, "random weights of SmolLM2's shape (GGUF not cached)"


def encode_chat(tokenizer, text: str, vocab: int) -> list[int]:
    """A chat prompt's ids: the chat template with a tokenizer, else UTF-8 bytes."""
    if tokenizer is None:
        return [b % vocab for b in text.encode()]
    return encode_chat_turns(tokenizer, [text])[0]
