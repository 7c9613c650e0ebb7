"""Random EAGLE-3 heads in the published layouts (``eagle`` and ``speculators``), written with
NumPy and safetensors: the inputs of ``tests/eagle_reference.py``'s forward and of specjax's
loader. Every norm and bias is moved off its initial value, so each switch moves the logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def random_head(
    path: str | Path | None,
    kind: str,
    *,
    vocab: int,
    target_dim: int,
    dim: int | None = None,
    num_layers: int = 1,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    ffn_dim: int = 48,
    layer_type: str = "llama",
    attention_bias: bool = False,
    draft_vocab: int | None = None,
    norm_before_residual: bool = False,
    fc_norm: bool = False,
    norm_before_fc: bool = False,
    norm_output: bool = False,
    rope_theta: float = 500.0,
    rope_scaling: dict | None = None,
    rope_style: str = "legacy",
    layer_ids: list[int] | None = None,
    nested_ids: bool = True,
    num_aux: int = 3,
    ship_embed: bool | None = None,
    write_t2d: bool = True,
    seed: int = 0,
) -> tuple[dict, dict]:
    """A random head in layout ``kind`` (``eagle`` or ``speculators``): ``(config, tensors)``,
    written to ``path`` (``config.json`` + ``model.safetensors``) unless it is None.

    Every norm weight is ``1 + 0.3 N(0, 1)``, biases ``0.2 N(0, 1)`` and the projections are
    full-strength, so that each switch changes the logits (``norm_output`` the chained steps').

    Args:
      dim: the head's width D (default ``target_dim``; another needs a shipped embedding, which
        ``ship_embed`` None then writes).
      layer_type: ``llama`` or ``qwen3`` (per-head q/k norms).
      draft_vocab: W < V: a random sorted id set, written as ``d2t`` offsets (and ``t2d``).
      rope_scaling: e.g. ``{"rope_type": "llama3", ...}`` or ``{"rope_type": "linear", ...}``.
      rope_style: ``legacy`` (``rope_theta`` + ``rope_scaling``) or ``parameters``
        (transformers 5's ``rope_parameters`` holding ``rope_theta``).
      layer_ids: the ids written; for ``eagle`` in ``eagle_config`` (block outputs) if
        ``nested_ids`` else at top level (block inputs). None: no ids (the default inputs).
      num_aux: A, the features read (the length of ``layer_ids`` when given).
      ship_embed: write ``embed_tokens.weight`` (None: when D differs from the target's, and
        always for speculators, which saves it).
    """
    rng = np.random.default_rng(seed)
    dim = dim or target_dim
    a = len(layer_ids) if layer_ids is not None else num_aux
    w_vocab = draft_vocab or vocab
    if ship_embed is None:
        ship_embed = dim != target_dim or kind == "speculators"

    def normal(*shape, std=1.0):
        return (std * rng.standard_normal(shape)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.3 * rng.standard_normal(n)).astype(np.float32)

    t = {"fc.weight": normal(dim, a * target_dim, std=(a * target_dim) ** -0.5)}
    for i in range(num_layers):
        if kind == "speculators":
            p = f"layers.{i}."
        else:
            p = "midlayer." if num_layers == 1 else f"midlayer.{i}."
        inp = 2 * dim if i == 0 else dim
        t[p + "input_layernorm.weight"] = norm(dim)
        if i == 0:
            t[p + "hidden_norm.weight"] = norm(dim)
        t[p + "post_attention_layernorm.weight"] = norm(dim)
        for x, out in (("q", num_heads), ("k", num_kv_heads), ("v", num_kv_heads)):
            t[p + f"self_attn.{x}_proj.weight"] = normal(out * head_dim, inp, std=inp**-0.5)
            if attention_bias:
                t[p + f"self_attn.{x}_proj.bias"] = normal(out * head_dim, std=0.2)
        hd = num_heads * head_dim
        t[p + "self_attn.o_proj.weight"] = normal(dim, hd, std=hd**-0.5)
        if attention_bias:
            t[p + "self_attn.o_proj.bias"] = normal(dim, std=0.2)
        if layer_type == "qwen3":
            t[p + "self_attn.q_norm.weight"] = norm(head_dim)
            t[p + "self_attn.k_norm.weight"] = norm(head_dim)
        t[p + "mlp.gate_proj.weight"] = normal(ffn_dim, dim, std=dim**-0.5)
        t[p + "mlp.up_proj.weight"] = normal(ffn_dim, dim, std=dim**-0.5)
        t[p + "mlp.down_proj.weight"] = normal(dim, ffn_dim, std=ffn_dim**-0.5)
    t["norm.weight"] = norm(dim)
    t["lm_head.weight"] = normal(w_vocab, dim, std=2.0 * dim**-0.5)
    if fc_norm:
        for i in range(a):
            t[f"fc_norm.{i}.weight"] = norm(target_dim)
    if norm_before_fc:
        t["input_norm.weight"] = norm(a * target_dim)
    if ship_embed:
        t["embed_tokens.weight"] = normal(vocab, dim)
    if w_vocab < vocab:
        ids = np.sort(rng.choice(vocab, w_vocab, replace=False))
        t["d2t"] = (ids - np.arange(w_vocab)).astype(np.int64)
        if write_t2d:
            t2d = np.zeros(vocab, bool)
            t2d[ids] = True
            t["t2d"] = t2d

    layer = {
        "model_type": layer_type,
        "vocab_size": vocab,
        "hidden_size": dim,
        "intermediate_size": ffn_dim,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512,
        "attention_bias": attention_bias,
        "tie_word_embeddings": False,
    }
    if rope_style == "legacy":
        layer["rope_theta"] = rope_theta
        if rope_scaling is not None:
            layer["rope_scaling"] = dict(rope_scaling)
    else:
        layer["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
        layer["rope_parameters"].update(rope_scaling or {})
    switches = {
        "draft_vocab_size": w_vocab,
        "norm_before_residual": norm_before_residual,
        "fc_norm": fc_norm,
        "norm_before_fc": norm_before_fc,
        "norm_output": norm_output,
    }
    if dim != target_dim:
        switches["target_hidden_size"] = target_dim
    if kind == "eagle":
        config = {"architectures": ["LlamaForCausalLMEagle3"], **layer, **switches}
        if layer_ids is not None and nested_ids:
            config["eagle_config"] = {
                "eagle_aux_hidden_state_layer_ids": list(layer_ids),
                "use_aux_hidden_state": True,
            }
        elif layer_ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = list(layer_ids)
    else:
        config = {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "transformer_layer_config": layer,
            **switches,
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "verifier": {"name_or_path": None, "architectures": []},
            },
        }
        if layer_ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = list(layer_ids)
    if path is not None:
        write_head(path, config, t)
    return config, t


def write_head(path: str | Path, config: dict, tensors: dict) -> Path:
    """Writes ``config.json`` and ``model.safetensors`` (NumPy arrays) into ``path``."""
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path
