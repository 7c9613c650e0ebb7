"""The published EAGLE-3 head layouts, tensor by tensor and key by key: **eagle** (EAGLE,
SpecForge and ModelOpt: ``LlamaForCausalLMEagle3``, ``midlayer.*``) and **speculators**
(vllm-project/speculators: ``speculators_model_type: eagle3``, ``layers.N.*``), read into and
written from specjax's :class:`~specjax.models.eagle.EagleHead`.

Each convention is written down once here, with its source; ``docs/feature_drafter.md``
("Heads users download") says the same for users:

* **Feature layers.** specjax's ``feature_layers`` are block outputs (0-based). SpecForge's
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` are block outputs too (SGLang adds 1 to read
  the next block's input: ``set_eagle3_layers_to_capture``); the top-level
  ``eagle_aux_hidden_state_layer_ids`` of speculators and vLLM are block *inputs*: vLLM captures
  the residual stream before layer i (``llama.py``), speculators' id ``N`` is the final hidden
  state (``resolve_target_layer_ids``), so id i is block i - 1's output (id 0: the
  embeddings, ``-1`` here). Absent: vLLM's and speculators' default inputs ``(2, N // 2, N - 3)``.
* **Vocabulary.** ``d2t [W]`` holds offsets: target id = i + d2t[i] (SGLang's ``hot_token_id``,
  vLLM's ``compute_logits``); specjax keeps the ids. ``t2d [V]`` (bool, W trues) must mark
  exactly those ids (speculators' ``load_vocab_mappings``). Without ``d2t`` the draft
  vocabulary is the whole vocabulary (vLLM: ``draft_vocab_size`` defaults to V).
* **Embedding.** A shipped ``embed_tokens.weight`` is used (vLLM); a head without one reads the
  target's (SGLang always does; they agree for heads trained with a frozen embedding,
  ``embed_requires_grad: false``). A head whose width differs from the target's
  (``target_hidden_size``) must ship one.
* **RoPE** is the head's own: ``rope_theta`` (default 10000: the EAGLE training config has
  none) and ``rope_scaling`` / ``rope_parameters`` of its config, not the target's.
* **norm_before_residual** defaults to False (speculators' ``Eagle3SpeculatorConfig`` and the
  EAGLE trainer; files speculators writes always carry it. vLLM's translation of a speculators
  config without the key assumes True).
* **EAGLE-3.1**: ``fc_norm`` (``fc_norm.{i}.weight``, a norm per feature before ``fc``),
  ``norm_before_fc`` (``input_norm.weight`` over the concatenated features), ``norm_output``
  (the normed state is fed back, ``lm_head`` reads it without another norm): speculators'
  ``Eagle3DraftModel.forward``.
* **Layers.** Layer 0 reads ``concat(embed, hidden)`` (q/k/v ``[., 2D]``); layers 1.. are
  plain pre-norm blocks (vLLM's ``LlamaDecoderLayer`` with ``layer_idx > 0``). The eagle
  layout names one layer ``midlayer.*`` and several ``midlayer.{i}.*`` (ModelOpt).
* **Pairs.** vLLM's draft pairs the feature of position i with the token at i + 1, so no pair
  holds the first token; specjax's head has one (feature zero), hidden from every later pair
  (:class:`~specjax.models.eagle.EagleConfig`).
"""

from __future__ import annotations

import numpy as np

from specjax.models.config import ROPE_KINDS, RopeScaling
from specjax.models.eagle import EagleConfig

LAYOUTS = ("eagle", "speculators")


def _layer_names(kind: str, i: int, num_layers: int) -> str:
    if kind == "speculators":
        return f"layers.{i}."
    return "midlayer." if num_layers == 1 else f"midlayer.{i}."


def eagle_layer_ids(feature_layers, kind: str) -> list[int]:
    """The layout's ``eagle_aux_hidden_state_layer_ids`` of specjax's ``feature_layers``."""
    return [i + 1 for i in feature_layers] if kind == "speculators" else list(feature_layers)


def feature_layers_of(cfg: dict, kind: str, target_layers: int) -> tuple[int, ...]:
    """specjax's ``feature_layers`` (block outputs; -1: the embeddings) of a head's config."""
    nested = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    if kind == "eagle" and nested is not None:
        return tuple(int(i) for i in nested)  # SpecForge: block outputs
    inputs = top if top is not None else (2, target_layers // 2, target_layers - 3)
    return tuple(int(i) - 1 for i in inputs)  # vLLM / speculators: block inputs


def _rope(cfg: dict) -> tuple[float, RopeScaling | None]:
    params = dict(cfg.get("rope_parameters") or {})
    params.update(cfg.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in (None, "default"):
        return theta, None
    if kind not in ROPE_KINDS:
        raise ValueError(
            f"the head's rope_scaling rope_type {kind!r} is unsupported; specjax implements "
            f"default, {', '.join(ROPE_KINDS)}"
        )
    if kind == "linear":
        return theta, RopeScaling(factor=float(params["factor"]), kind="linear")
    return theta, RopeScaling(
        factor=float(params["factor"]),
        low_freq_factor=float(params["low_freq_factor"]),
        high_freq_factor=float(params["high_freq_factor"]),
        original_max_position=int(params["original_max_position_embeddings"]),
    )


def config_from_layout(cfg: dict, kind: str, target, names: set[str]) -> EagleConfig:
    """The :class:`EagleConfig` of a published head's ``config.json`` (``kind``: a
    :data:`LAYOUTS` entry), for ``target`` (its :class:`~specjax.models.config.ModelConfig`).

    Raises:
      ValueError: a key specjax does not implement (named), or a head that does not fit the
        target.
    """
    layer = cfg.get("transformer_layer_config", cfg) if kind == "speculators" else cfg
    arch = layer.get("model_type", "llama")
    if arch not in ("llama", "qwen3"):
        raise ValueError(
            f"the head's decoder layer model_type is {arch!r}; specjax reads llama and qwen3 layers"
        )
    for key, ok in (("mlp_bias", False), ("hidden_act", "silu")):
        if layer.get(key, ok) != ok:
            raise ValueError(f"the head's {key}={layer[key]!r} is unsupported (specjax: {ok!r})")
    heads = int(layer["num_attention_heads"])
    dim = int(layer["hidden_size"])
    vocab = int(layer.get("vocab_size") or target.vocab_size)
    theta, scaling = _rope(layer)
    target_dim = cfg.get("target_hidden_size") or target.dim
    config = EagleConfig(
        vocab_size=vocab,
        draft_vocab=int(cfg.get("draft_vocab_size") or vocab),
        dim=dim,
        num_heads=heads,
        num_kv_heads=int(layer.get("num_key_value_heads") or heads),
        head_dim=int(layer.get("head_dim") or dim // heads),
        ffn_dim=int(layer["intermediate_size"]),
        feature_layers=feature_layers_of(cfg, kind, target.num_layers),
        norm_eps=float(layer.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        max_seq_len=max(int(layer.get("max_position_embeddings", 2048)), target.max_seq_len),
        num_layers=int(layer.get("num_hidden_layers", 1)),
        target_dim=int(target_dim),
        rope_scaling=scaling,
        attention_bias=bool(layer.get("attention_bias", False)),
        qk_norm=arch == "qwen3",
        norm_before_residual=bool(cfg.get("norm_before_residual", False)),
        fc_norm=bool(cfg.get("fc_norm", False)),
        norm_before_fc=bool(cfg.get("norm_before_fc", False)),
        norm_output=bool(cfg.get("norm_output", False)),
    )
    if config.vocab_size != target.vocab_size:
        raise ValueError(
            f"the head drafts for a vocabulary of {config.vocab_size}; the target's is "
            f"{target.vocab_size}: a head of another model"
        )
    bad = [i for i in config.feature_layers if not -1 <= i < target.num_layers]
    if bad or config.target_dim != target.dim:
        raise ValueError(
            f"the head reads target layers {list(config.feature_layers)} of width "
            f"{config.target_dim}; the target has {target.num_layers} blocks of width "
            f"{target.dim}: a head of another model"
        )
    if config.dim != config.target_dim and "embed_tokens.weight" not in names:
        raise ValueError(
            f"the head's width {config.dim} differs from the target's {config.target_dim} and it "
            "ships no embed_tokens.weight, so no embedding fits it"
        )
    return config


def tensor_names(config: EagleConfig, kind: str) -> dict[tuple, tuple[str, bool]]:
    """``{specjax path: (layout tensor name, transposed)}`` of every trained parameter."""
    c = config
    out = {("fc",): ("fc.weight", True), ("norm_out",): ("norm.weight", False)}
    out[("head",)] = ("lm_head.weight", True)
    if c.fc_norm:
        for i in range(len(c.feature_layers)):
            out[("fc_norms", i)] = (f"fc_norm.{i}.weight", False)
    if c.norm_before_fc:
        out[("input_norm",)] = ("input_norm.weight", False)
    for i in range(c.num_layers):
        p, at = _layer_names(kind, i, c.num_layers), ("layers", i)
        norms = {"norm_embed": "input_layernorm", "norm_feature": "hidden_norm"}
        for ours, theirs in (norms if i == 0 else {"norm_attn": "input_layernorm"}).items():
            out[(*at, ours)] = (p + theirs + ".weight", False)
        out[(*at, "norm_mlp")] = (p + "post_attention_layernorm.weight", False)
        for x in "qkvo":
            out[(*at, f"w{x}")] = (p + f"self_attn.{x}_proj.weight", True)
            if c.attention_bias:
                out[(*at, f"b{x}")] = (p + f"self_attn.{x}_proj.bias", False)
        if c.qk_norm:
            out[(*at, "q_norm")] = (p + "self_attn.q_norm.weight", False)
            out[(*at, "k_norm")] = (p + "self_attn.k_norm.weight", False)
        for ours, theirs in (("w_gate", "gate"), ("w_up", "up"), ("w_down", "down")):
            out[(*at, ours)] = (p + f"mlp.{theirs}_proj.weight", True)
    return out


def to_ours(x: np.ndarray, transposed: bool, shape: tuple[int, ...]) -> np.ndarray:
    """A layout tensor (torch ``[out, in]``) in specjax's layout of ``shape``."""
    x = np.asarray(x, np.float32)
    return (x.T if transposed else x).reshape(shape)


def to_theirs(x, transposed: bool) -> np.ndarray:
    """specjax's parameter in the layout (``[in, ...out]`` flattened and transposed)."""
    x = np.asarray(x, np.float32)
    return np.ascontiguousarray(x.reshape(x.shape[0], -1).T if transposed else x.reshape(-1))


def ids_from_offsets(d2t: np.ndarray | None, t2d: np.ndarray | None, draft: int, vocab: int):
    """Target ids ``[W]`` of the draft ids from the layout's ``d2t`` offsets, checked against
    ``t2d``."""
    ids = np.arange(draft) + (0 if d2t is None else np.asarray(d2t, np.int64))
    if len(ids) != draft or ids.min() < 0 or ids.max() >= vocab or len(set(ids)) != draft:
        raise ValueError(f"d2t maps {draft} draft ids outside [0, {vocab}) or onto one id twice")
    if t2d is not None:
        t2d = np.asarray(t2d, bool)
        if t2d.shape != (vocab,) or t2d.sum() != draft or not t2d[ids].all():
            raise ValueError("t2d does not mark exactly the target ids that d2t maps to")
    return ids.astype(np.int32)


def offsets_and_mask(ids: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The layout's ``(d2t int64 offsets [W], t2d bool [V])`` of target ids ``[W]``."""
    ids = np.asarray(ids, np.int64)
    t2d = np.zeros(vocab, bool)
    t2d[ids] = True
    return ids - np.arange(len(ids)), t2d


def config_to_layout(config: EagleConfig, kind: str, verifier: dict | None = None) -> dict:
    """The ``config.json`` of ``config`` in layout ``kind``; ``verifier``: speculators'
    ``{"name_or_path", "architectures"}`` of the target."""
    c = config
    layer = {
        "model_type": "qwen3" if c.qk_norm else "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.dim,
        "intermediate_size": c.ffn_dim,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": c.norm_eps,
        "max_position_embeddings": c.max_seq_len,
        "attention_bias": c.attention_bias,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "rope_theta": c.rope_theta,
        "rope_scaling": _scaling_to_layout(c.rope_scaling),
    }
    switches = {
        "draft_vocab_size": c.draft_vocab,
        "norm_before_residual": c.norm_before_residual,
        "fc_norm": c.fc_norm,
        "norm_before_fc": c.norm_before_fc,
        "norm_output": c.norm_output,
    }
    ids = eagle_layer_ids(c.feature_layers, kind)
    wider = {"target_hidden_size": c.target_dim} if c.target_dim != c.dim else {}
    if kind == "eagle":  # vLLM and SGLang build fc from target_hidden_size when it is present
        return {
            "architectures": ["LlamaForCausalLMEagle3"],
            **layer,
            **switches,
            **wider,
            # SGLang reads eagle_config's ids (block outputs), vLLM the top-level ones (inputs)
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
            "eagle_aux_hidden_state_layer_ids": eagle_layer_ids(c.feature_layers, "speculators"),
            "torch_dtype": "float32",
        }
    return {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "transformer_layer_config": {k: v for k, v in layer.items() if v is not None},
        **switches,
        "target_hidden_size": wider.get("target_hidden_size"),
        "eagle_aux_hidden_state_layer_ids": ids,
        "embed_requires_grad": False,
        "tie_word_embeddings": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": verifier or {"name_or_path": None, "architectures": []},
        },
    }


def _scaling_to_layout(scaling: RopeScaling | None) -> dict | None:
    if scaling is None:
        return None
    if scaling.kind == "linear":
        return {"rope_type": "linear", "factor": scaling.factor}
    return {
        "rope_type": "llama3",
        "factor": scaling.factor,
        "low_freq_factor": scaling.low_freq_factor,
        "high_freq_factor": scaling.high_freq_factor,
        "original_max_position_embeddings": scaling.original_max_position,
    }
