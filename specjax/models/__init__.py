"""specjax.models: Llama-family decoders in Flax NNX with an explicit KV cache, weight loaders
(GGUF, Hugging Face safetensors, orbax checkpoints) and tokenizers."""

from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig, RopeScaling, preset
from specjax.models.decoder import Decoder
from specjax.models.fetch import fetch_smollm2
from specjax.models.gguf_loader import load_gguf
from specjax.models.pairs import ShippedPair, load_pair
from specjax.models.pretrained import Pretrained, build_model, load_pretrained
from specjax.models.pure import PureModel, truncated
from specjax.models.safetensors_loader import load_safetensors
from specjax.models.sources import load_model, load_on_mesh
from specjax.models.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer
from specjax.models.weights import fuse_projections, quantize_weights

__all__ = [
    "ByteTokenizer",
    "Decoder",
    "KVCache",
    "ModelConfig",
    "Pretrained",
    "PureModel",
    "RopeScaling",
    "ShippedPair",
    "Tokenizer",
    "build_model",
    "fetch_smollm2",
    "fuse_projections",
    "load_gguf",
    "load_model",
    "load_on_mesh",
    "load_pair",
    "load_pretrained",
    "load_safetensors",
    "load_tokenizer",
    "preset",
    "quantize_weights",
    "truncated",
]
