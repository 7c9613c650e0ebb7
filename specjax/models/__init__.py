"""specjax.models: Llama-family decoders in Flax NNX with an explicit KV cache."""

from specjax.models.cache import KVCache
from specjax.models.config import LlamaConfig, RopeScaling, preset
from specjax.models.llama import Llama

__all__ = ["KVCache", "Llama", "LlamaConfig", "RopeScaling", "preset"]
