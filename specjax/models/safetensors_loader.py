"""Hugging Face Llama checkpoints (``config.json`` + ``*.safetensors``), read with the safetensors
NumPy API (no torch), and the mapping between HF tensor names/layouts and specjax parameters.

HF stores linear weights as ``[out, in]``; specjax keeps ``[in, ...out]`` with heads split out:

===========================================  ==================================  ================
HF name (``model.`` prefix omitted)           specjax path                        specjax shape
===========================================  ==================================  ================
``embed_tokens.weight`` [V, D]                ``embed``                           [V, D]
``layers.i.self_attn.q_proj.weight`` [H*E, D] ``layers/i/attn/wq`` (transposed)   [D, H, E]
``layers.i.self_attn.k_proj.weight`` [G*E, D] ``layers/i/attn/wk``                [D, G, E]
``layers.i.self_attn.v_proj.weight`` [G*E, D] ``layers/i/attn/wv``                [D, G, E]
``layers.i.self_attn.o_proj.weight`` [D, H*E] ``layers/i/attn/wo``                [H, E, D]
``layers.i.mlp.gate_proj.weight`` [F, D]      ``layers/i/mlp/w_gate``             [D, F]
``layers.i.mlp.up_proj.weight`` [F, D]        ``layers/i/mlp/w_up``               [D, F]
``layers.i.mlp.down_proj.weight`` [D, F]      ``layers/i/mlp/w_down``             [F, D]
``layers.i.input_layernorm.weight``           ``layers/i/attn_norm/scale``        [D]
``layers.i.post_attention_layernorm.weight``  ``layers/i/mlp_norm/scale``         [D]
``norm.weight``                               ``norm/scale``                      [D]
``lm_head.weight`` [V, D] (no prefix)         ``lm_head`` (untied only)           [D, V]
===========================================  ==================================  ================

"Params" throughout :mod:`specjax.models` is the pure nested dict of ``nnx.to_pure_dict(
nnx.state(Llama(...)))``: the paths above, integer layer keys, array leaves.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from specjax.models.config import DTYPES, LlamaConfig, RopeScaling
from specjax.models.tokenizer import Tokenizer

Params = dict


def param_shapes(config: LlamaConfig) -> Params:
    """The shape of every parameter of ``Llama(config)``, as a params-shaped dict of tuples."""
    d, h, g, e, f, v = (
        config.dim,
        config.num_heads,
        config.num_kv_heads,
        config.head_dim,
        config.ffn_dim,
        config.vocab_size,
    )
    layer = {
        "attn_norm": {"scale": (d,)},
        "attn": {"wq": (d, h, e), "wk": (d, g, e), "wv": (d, g, e), "wo": (h, e, d)},
        "mlp_norm": {"scale": (d,)},
        "mlp": {"w_gate": (d, f), "w_up": (d, f), "w_down": (f, d)},
    }
    shapes = {
        "embed": (v, d),
        "layers": {i: layer for i in range(config.num_layers)},
        "norm": {"scale": (d,)},
    }
    if not config.tie_embeddings:
        shapes["lm_head"] = (d, v)
    return shapes


# ---------------------------------------------------------------------------- config.json


def config_from_hf(cfg: Mapping, name: str = "llama") -> LlamaConfig:
    """Maps a HF Llama ``config.json`` dict to a :class:`LlamaConfig`.

    Raises:
      ValueError: a non-Llama model type or a feature specjax does not implement (attention or
        MLP biases, RoPE scaling other than Llama 3's).
    """
    model_type = cfg.get("model_type", "llama")
    if model_type != "llama":
        raise ValueError(f'config.json model_type is "{model_type}"; specjax loads llama')
    for flag in ("attention_bias", "mlp_bias"):
        if cfg.get(flag):
            raise ValueError(f"config.json sets {flag}=true; specjax's Llama has no biases")
    rope = dict(cfg.get("rope_parameters") or {})  # transformers >= 5 moved RoPE keys here
    scaling = cfg.get("rope_scaling") or (rope if rope.get("rope_type") == "llama3" else None)
    rope_scaling = None
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "llama3":
            rope_scaling = RopeScaling(
                factor=float(scaling["factor"]),
                low_freq_factor=float(scaling["low_freq_factor"]),
                high_freq_factor=float(scaling["high_freq_factor"]),
                original_max_position=int(scaling["original_max_position_embeddings"]),
            )
        elif kind != "default":
            raise ValueError(f"config.json rope_scaling type {kind!r} is unsupported (llama3 only)")
    heads = int(cfg["num_attention_heads"])
    return LlamaConfig(
        vocab_size=int(cfg["vocab_size"]),
        dim=int(cfg["hidden_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        ffn_dim=int(cfg["intermediate_size"]),
        head_dim=cfg.get("head_dim"),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0))),
        rope_scaling=rope_scaling,
        max_seq_len=int(cfg.get("max_position_embeddings", 2048)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        name=name,
    )


def config_to_hf(config: LlamaConfig) -> dict:
    """The HF ``config.json`` dict of a :class:`LlamaConfig` (inverse of :func:`config_from_hf`)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "intermediate_size": config.ffn_dim,
        "head_dim": config.head_dim,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": config.max_seq_len,
        "tie_word_embeddings": config.tie_embeddings,
        "hidden_act": "silu",
        "torch_dtype": config.param_dtype,
    }
    if config.rope_scaling is not None:
        s = config.rope_scaling
        cfg["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position,
        }
    return cfg


# ---------------------------------------------------------------------------- tensor mapping

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def hf_to_params(
    get: Callable[[str], np.ndarray | None],
    names: set[str],
    config: LlamaConfig,
    dtype=np.float32,
    source: str = "weights",
) -> Params:
    """Builds specjax params from HF-named ``[out, in]`` tensors.

    Args:
      get: returns the tensor of a name (loaded lazily, one at a time).
      names: every tensor name available.
      config: the target configuration (shapes are checked against it).
      dtype: NumPy dtype of the returned leaves.
      source: what the tensors come from, for error messages.

    Returns:
      Params: a nested dict of NumPy arrays (see the module docstring).

    Raises:
      ValueError: a missing tensor, a shape that does not match ``config``, or weights for more
        layers than ``config`` has.
    """
    c = config
    d, h, g, e = c.dim, c.num_heads, c.num_kv_heads, c.head_dim
    extra = sorted(
        {int(m.group(1)) for n in names if (m := _LAYER.match(n))} - set(range(c.num_layers))
    )
    if extra:
        raise ValueError(
            f"{source} hold layer {extra[0]} but the config has {c.num_layers} layers; "
            "fix num_hidden_layers / block_count"
        )
    missing = [n for n in _hf_names(c) if n not in names]
    if missing:
        raise ValueError(
            f"{source} lack {len(missing)} tensor(s) the config needs, e.g. {missing[:3]}; "
            "check that the weights belong to this config (tie_word_embeddings, layer count)"
        )

    def take(name, shape):
        x = np.asarray(get(name))
        if x.shape != shape:
            raise ValueError(
                f"{source}: tensor {name} has shape {list(x.shape)} but the config expects "
                f"{list(shape)}; the weights and config do not match"
            )
        return x.astype(dtype)

    def layer(i):
        p = f"model.layers.{i}."
        return {
            "attn_norm": {"scale": take(p + "input_layernorm.weight", (d,))},
            "attn": {
                "wq": take(p + "self_attn.q_proj.weight", (h * e, d)).T.reshape(d, h, e),
                "wk": take(p + "self_attn.k_proj.weight", (g * e, d)).T.reshape(d, g, e),
                "wv": take(p + "self_attn.v_proj.weight", (g * e, d)).T.reshape(d, g, e),
                "wo": take(p + "self_attn.o_proj.weight", (d, h * e)).T.reshape(h, e, d),
            },
            "mlp_norm": {"scale": take(p + "post_attention_layernorm.weight", (d,))},
            "mlp": {
                "w_gate": take(p + "mlp.gate_proj.weight", (c.ffn_dim, d)).T,
                "w_up": take(p + "mlp.up_proj.weight", (c.ffn_dim, d)).T,
                "w_down": take(p + "mlp.down_proj.weight", (d, c.ffn_dim)).T,
            },
        }

    params = {
        "embed": take("model.embed_tokens.weight", (c.vocab_size, d)),
        "layers": {i: layer(i) for i in range(c.num_layers)},
        "norm": {"scale": take("model.norm.weight", (d,))},
    }
    if not c.tie_embeddings:
        params["lm_head"] = take("lm_head.weight", (c.vocab_size, d)).T
    return _contiguous(params)


def params_to_hf(params: Params, config: LlamaConfig) -> dict[str, np.ndarray]:
    """HF-named ``[out, in]`` NumPy tensors of specjax params (inverse of :func:`hf_to_params`)."""
    c = config
    out = {
        "model.embed_tokens.weight": np.asarray(params["embed"]),
        "model.norm.weight": np.asarray(params["norm"]["scale"]),
    }
    if not c.tie_embeddings:
        out["lm_head.weight"] = np.asarray(params["lm_head"]).T
    for i in range(c.num_layers):
        lp, p = params["layers"][i], f"model.layers.{i}."
        a, m = lp["attn"], lp["mlp"]
        out[p + "input_layernorm.weight"] = np.asarray(lp["attn_norm"]["scale"])
        out[p + "post_attention_layernorm.weight"] = np.asarray(lp["mlp_norm"]["scale"])
        for hf, ours in (("q", "wq"), ("k", "wk"), ("v", "wv")):
            w = np.asarray(a[ours])
            out[p + f"self_attn.{hf}_proj.weight"] = w.reshape(c.dim, -1).T
        out[p + "self_attn.o_proj.weight"] = np.asarray(a["wo"]).reshape(-1, c.dim).T
        out[p + "mlp.gate_proj.weight"] = np.asarray(m["w_gate"]).T
        out[p + "mlp.up_proj.weight"] = np.asarray(m["w_up"]).T
        out[p + "mlp.down_proj.weight"] = np.asarray(m["w_down"]).T
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def _hf_names(config: LlamaConfig) -> Iterator[str]:
    yield from ("model.embed_tokens.weight", "model.norm.weight")
    if not config.tie_embeddings:
        yield "lm_head.weight"
    for i in range(config.num_layers):
        for n in (
            "input_layernorm",
            "post_attention_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ):
            yield f"model.layers.{i}.{n}.weight"


def _contiguous(tree):
    if isinstance(tree, dict):
        return {k: _contiguous(v) for k, v in tree.items()}
    return np.ascontiguousarray(tree)


# ---------------------------------------------------------------------------- directories


def load_safetensors(directory: str | Path, dtype=None):
    """Loads a HF Llama directory: ``config.json`` and one or more ``*.safetensors`` files
    (a sharded checkpoint's ``model.safetensors.index.json`` is followed when present).

    Args:
      directory: the model directory.
      dtype: dtype (name) of the returned parameters and the config (default float32).

    Returns:
      ``(config, params, tokenizer)``; ``tokenizer`` is None without a ``tokenizer.json``.

    Raises:
      FileNotFoundError: no directory, no ``config.json`` or no safetensors file.
      ValueError: an unreadable config or weight file, missing tensors, or shape mismatches.
    """
    directory = Path(directory)
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(
            f"no config.json in {directory}; a Hugging Face model directory needs config.json "
            "next to its *.safetensors files"
        )
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        config = config_from_hf(cfg, name=cfg.get("_name_or_path") or directory.name)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{cfg_path}: not a usable Llama config.json ({e!r})") from e
    config = with_dtype(config, dtype)
    index_path = directory / "model.safetensors.index.json"
    if index_path.is_file():
        try:
            where = {
                k: directory / v
                for k, v in json.loads(index_path.read_text())["weight_map"].items()
            }
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{index_path} is not a safetensors index ({e!r})") from e
    else:
        where = {}
        for f in sorted(directory.glob("*.safetensors")):
            where.update(dict.fromkeys(_open(f).keys(), f))
    if not where:
        raise FileNotFoundError(f"no *.safetensors files in {directory}")
    handles = {}

    def get(name):
        f = where[name]
        if f not in handles:
            if not f.is_file():
                raise FileNotFoundError(f"{f} (listed in {index_path.name}) does not exist")
            handles[f] = _open(f)
        try:
            return handles[f].get_tensor(name)
        except Exception as e:
            raise ValueError(f"{f}: cannot read tensor {name} ({e}); the file is corrupt") from e

    params = hf_to_params(get, set(where), config, config.weight_dtype, source=str(directory))
    tokenizer = (
        Tokenizer.from_hf_dir(directory) if (directory / "tokenizer.json").is_file() else None
    )
    return config, params, tokenizer


def save_safetensors(
    directory: str | Path, params: Params, config: LlamaConfig, max_shard_bytes: int | None = None
) -> Path:
    """Writes ``config.json`` and HF-layout safetensors (sharded with an index json when the
    weights exceed ``max_shard_bytes``). Returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config_to_hf(config), indent=2) + "\n")
    tensors = params_to_hf(params, config)
    shards, size = [{}], 0
    for name, x in tensors.items():
        if max_shard_bytes and size + x.nbytes > max_shard_bytes and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = x
        size += x.nbytes
    if len(shards) == 1:
        save_file(shards[0], str(directory / "model.safetensors"))
        return directory
    weight_map = {}
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / fname))
        weight_map.update(dict.fromkeys(shard, fname))
    index = {"metadata": {"total_size": sum(x.nbytes for x in tensors.values())}}
    index["weight_map"] = weight_map
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return directory


def _open(path: Path):
    try:
        return safe_open(str(path), framework="np")
    except Exception as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e}); re-download it") from e


def with_dtype(config: LlamaConfig, dtype) -> LlamaConfig:
    """``config`` with parameters and activations in ``dtype`` (a name or a NumPy/JAX dtype;
    None keeps float32)."""
    name = "float32" if dtype is None else np.dtype(DTYPES.get(dtype, dtype)).name
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return dataclasses.replace(config, dtype=name, param_dtype=name)
