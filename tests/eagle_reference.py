"""An independent NumPy (float64) statement of the published EAGLE-3 draft forward, written from
the peers' code and not from specjax's head, and random head directories in both published
layouts (``tests/eagle_heads.py``) feed it and specjax's loader.

Sources, followed line by line:

* vllm-project/speculators 0.9.0, ``speculators/models/eagle3/core.py``
  (``Eagle3DraftModel.forward``: ``input_norm`` / ``fc_norm`` then ``fc``; per training-time-test
  step ``cat([embed(ids), hidden])`` through the layers, ``norm_output``; teacher forcing shifts
  the ids left by one per step and ``position_ids + 1``), ``model_definitions.py``
  (``Eagle3FirstLayerMixin``: the first layer splits its input, ``input_layernorm`` on the
  embeddings, ``hidden_norm`` on the hidden part, residual the hidden part or, with
  ``norm_before_residual``, its normed value), ``attention.py`` (causal within a document, plus
  the diagonal of every later step's block: ``extend_dense_mask_for_draft_tokens``) and
  ``data.py`` (``shift_batch``: row i pairs the hidden states of position i with the token at
  i + 1, at position i + 1).
* vLLM ``vllm/model_executor/models/llama_eagle3.py`` (the same first layer; layers after the
  first are plain pre-norm Llama blocks; ``compute_logits``: target id = i + d2t[i]; ``fc`` reads
  ``target_hidden_size`` wide features) and ``llama.py`` (the auxiliary hidden states are the
  residual stream *before* layer i); SGLang's ``set_eagle3_layers_to_capture`` (explicit ids,
  SpecForge's ``eagle_config`` ones, plus one; default ``[2, N // 2, N - 3]`` block inputs).
* transformers' Llama / Qwen3 attention (rotate-half RoPE, GQA by ``repeat_kv``, Qwen3's per-head
  q/k RMSNorm before RoPE, scale ``head_dim ** -0.5``), ``LlamaMLP`` (``down(silu(gate) * up)``),
  ``LlamaRMSNorm`` and ``modeling_rope_utils`` (default, ``linear`` and ``llama3`` inverse
  frequencies).

Tensor names are the layouts' (torch ``[out, in]``): ``fc.weight``, ``midlayer.*`` /
``midlayer.{i}.*`` / ``layers.{i}.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``,
``embed_tokens.weight``, ``fc_norm.{i}.weight``, ``input_norm.weight``; a ``model.`` prefix is
ignored.
"""

from __future__ import annotations

import math

import numpy as np

LAYER_TYPES = ("llama", "qwen3")


# --- configs ------------------------------------------------------------------------------------


def layer_config(config: dict) -> dict:
    """The decoder-layer fields of a head's ``config.json``: speculators nests them in
    ``transformer_layer_config``; EAGLE / SpecForge heads are a Llama config at top level."""
    return config["transformer_layer_config"] if "speculators_model_type" in config else config


def block_inputs(config: dict, num_target_layers: int) -> list[int]:
    """The target *block inputs* the peers capture for this head (input of block N: the final
    hidden state before the target's norm). SpecForge's ``eagle_config`` ids are captured by
    SGLang at id + 1; top-level ids (vLLM, speculators) are inputs; default ``[2, N // 2, N - 3]``.
    """
    nested = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if "speculators_model_type" not in config and nested is not None:
        return [int(i) + 1 for i in nested]
    top = config.get("eagle_aux_hidden_state_layer_ids")
    if top is not None:
        return [int(i) for i in top]
    n = num_target_layers
    return [2, n // 2, n - 3]


def aux_hidden_states(target_module, tokens, inputs, forward=None) -> np.ndarray:
    """``[T, A * D_t]`` float64: the concatenated inputs of the target's blocks ``inputs`` at
    every position of ``tokens [T]``. The input of block i is block i - 1's output (block 0's:
    the embeddings, which a specjax Decoder returns as feature layer -1). ``forward(target,
    tokens [T], layers)``: the Decoder's ``[1, T, A, D]`` block outputs ``layers`` (default: an
    eager call of ``target_module(tokens[None], features=layers)``)."""
    import jax.numpy as jnp

    layers = tuple(int(i) - 1 for i in inputs)
    tokens = jnp.asarray(np.asarray(tokens), jnp.int32)
    if forward is None:
        hidden = target_module(tokens[None], features=layers).features
    else:
        hidden = forward(target_module, tokens, layers)
    h = np.asarray(hidden, np.float64)[0]  # [T, A, D]
    return h.reshape(h.shape[0], -1)


def rope_inverse_frequencies(layer: dict) -> np.ndarray:
    """``[E/2]`` the head's RoPE inverse frequencies (transformers' ``modeling_rope_utils``:
    ``rope_parameters`` or the legacy ``rope_theta`` + ``rope_scaling``)."""
    params = dict(layer.get("rope_scaling") or {})
    params.update(layer.get("rope_parameters") or {})
    base = float(params.get("rope_theta", layer.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    e = int(layer.get("head_dim") or layer["hidden_size"] // layer["num_attention_heads"])
    inv = 1.0 / base ** (np.arange(0, e, 2, dtype=np.float64) / e)
    if kind == "default":
        return inv
    factor = float(params["factor"])
    if kind == "linear":
        return inv / factor
    if kind != "llama3":
        raise NotImplementedError(f"rope_type {kind!r}")
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old = float(params["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    inv_llama = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_llama)


# --- the forward --------------------------------------------------------------------------------


def _rms(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x, positions, inv):
    """Rotate-half RoPE of ``x [R, heads, E]`` at ``positions [R]``."""
    ang = positions[:, None].astype(np.float64) * inv[None, :]  # [R, E/2]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class _Head:
    """The head's tensors (float64, torch layout) and shape."""

    def __init__(self, config: dict, tensors: dict):
        self.cfg, layer = config, layer_config(config)
        self.t = {k.removeprefix("model."): np.asarray(v) for k, v in tensors.items()}
        self.kind = layer.get("model_type", "llama")
        if self.kind not in LAYER_TYPES:
            raise NotImplementedError(self.kind)
        self.n_layers = int(layer.get("num_hidden_layers", 1))
        self.h = int(layer["num_attention_heads"])
        self.g = int(layer.get("num_key_value_heads") or self.h)
        self.e = int(layer.get("head_dim") or layer["hidden_size"] // self.h)
        self.eps = float(layer.get("rms_norm_eps", 1e-6))
        self.bias = bool(layer.get("attention_bias", False))
        self.inv = rope_inverse_frequencies(layer)

    def w(self, name):
        return np.asarray(self.t[name], np.float64)

    def prefix(self, i: int) -> str:
        for p in (f"layers.{i}.", f"midlayer.{i}.", "midlayer."):
            if p + "post_attention_layernorm.weight" in self.t and (p != "midlayer." or i == 0):
                return p
        raise KeyError(f"no tensors of layer {i}")

    def linear(self, x, name):
        """``x @ W.T`` (+ the bias of an attention projection with ``attention_bias``)."""
        y = x @ self.w(name + ".weight").T
        return y + self.w(name + ".bias") if self.bias and ".self_attn." in name else y


def draft_logits(
    config: dict,
    tensors: dict,
    aux: np.ndarray,
    tokens: np.ndarray,
    steps: int,
    target_embed: np.ndarray | None = None,
    return_hidden: bool = False,
):
    """The draft logits of the published EAGLE-3 forward, training-time-test style.

    Args:
      config: the head's ``config.json`` dict (either layout).
      tensors: its tensors by layout name (torch ``[out, in]``).
      aux: ``[n, A * D_t]`` the target's auxiliary hidden states of positions 0 .. n - 1.
      tokens: ``[n]`` the tokens x_0 .. x_{n-1}.
      steps: J, the steps (1: the first step only).
      target_embed: ``[V, D]`` the target's input embedding, used when the head ships none.

    Returns:
      ``[J, n - 1, W]``: step 0 at row i drafts from the pair (aux_i, x_{i+1}) at position
      i + 1, seeing rows <= i; step j at row i feeds step j - 1's output at row i with the
      token x_{i+1+j} (teacher forcing; 0 past the end, as speculators pads) at position
      i + 1 + j, seeing rows <= i of step 0 and row i of steps 1 .. j. With ``return_hidden``
      also the fed-back states ``[J, n - 1, D]``.
    """
    hd = _Head(config, tensors)
    aux = np.asarray(aux, np.float64)
    tokens = np.asarray(tokens, np.int64)
    embed = hd.w("embed_tokens.weight") if "embed_tokens.weight" in hd.t else target_embed
    if embed is None:
        raise ValueError("the head ships no embed_tokens.weight: pass target_embed")
    embed = np.asarray(embed, np.float64)
    # shift_batch: row i = (hidden of position i, token at i + 1), position i + 1
    hidden, ids = aux[:-1], tokens[1:]
    rows = len(ids)
    positions = 1 + np.arange(rows)
    if config.get("norm_before_fc", False):
        hidden = _rms(hidden, hd.w("input_norm.weight"), hd.eps)
    if config.get("fc_norm", False):
        chunks = np.split(hidden, _num_aux(hd), -1)
        hidden = np.concatenate(
            [_rms(c, hd.w(f"fc_norm.{i}.weight"), hd.eps) for i, c in enumerate(chunks)], -1
        )
    hidden = hidden @ hd.w("fc.weight").T  # [R, D]
    keys = [[] for _ in range(hd.n_layers)]
    values = [[] for _ in range(hd.n_layers)]
    out_logits, out_hidden = [], []
    step_ids = ids
    for step in range(steps):
        x = embed[step_ids]
        for i in range(hd.n_layers):
            p = hd.prefix(i)
            if i == 0:
                residual = hidden
                normed = _rms(hidden, hd.w(p + "hidden_norm.weight"), hd.eps)
                if config.get("norm_before_residual", False):
                    residual = normed
                inp = np.concatenate(
                    [_rms(x, hd.w(p + "input_layernorm.weight"), hd.eps), normed], -1
                )
            else:
                residual = hidden
                inp = _rms(hidden, hd.w(p + "input_layernorm.weight"), hd.eps)
            attn = _attention(hd, p, inp, positions, keys[i], values[i])
            hidden = residual + hd.linear(attn, p + "self_attn.o_proj")
            m = _rms(hidden, hd.w(p + "post_attention_layernorm.weight"), hd.eps)
            gate = hd.linear(m, p + "mlp.gate_proj")
            act = gate / (1.0 + np.exp(-gate)) * hd.linear(m, p + "mlp.up_proj")
            hidden = hidden + hd.linear(act, p + "mlp.down_proj")
        normed = _rms(hidden, hd.w("norm.weight"), hd.eps)
        if config.get("norm_output", False):
            hidden = normed
        out_logits.append(normed @ hd.w("lm_head.weight").T)
        out_hidden.append(hidden)
        step_ids = np.concatenate([ids[1 + step :], np.zeros(1 + step, np.int64)])
        positions = positions + 1
    logits = np.stack(out_logits)
    return (logits, np.stack(out_hidden)) if return_hidden else logits


def _num_aux(hd: _Head) -> int:
    return sum(1 for k in hd.t if k.startswith("fc_norm.") and k.endswith(".weight"))


def _attention(hd: _Head, p: str, inp, positions, keys: list, values: list):
    """One step's attention of a layer; appends the step's keys and values (its cache)."""
    r = inp.shape[0]
    q = hd.linear(inp, p + "self_attn.q_proj").reshape(r, hd.h, hd.e)
    k = hd.linear(inp, p + "self_attn.k_proj").reshape(r, hd.g, hd.e)
    v = hd.linear(inp, p + "self_attn.v_proj").reshape(r, hd.g, hd.e)
    if hd.kind == "qwen3":
        q = _rms(q, hd.w(p + "self_attn.q_norm.weight"), hd.eps)
        k = _rms(k, hd.w(p + "self_attn.k_norm.weight"), hd.eps)
    q, k = _rope(q, positions, hd.inv), _rope(k, positions, hd.inv)
    keys.append(k)
    values.append(v)
    kk, vv = np.concatenate(keys, 0), np.concatenate(values, 0)  # [(s + 1) R, G, E]
    # step 0's block causal, each later step's block its diagonal
    mask = np.concatenate(
        [np.tril(np.ones((r, r), bool))] + [np.eye(r, dtype=bool)] * (len(keys) - 1), 1
    )
    rep = hd.h // hd.g
    kk, vv = np.repeat(kk, rep, axis=1), np.repeat(vv, rep, axis=1)  # repeat_kv
    scores = np.einsum("qhe,khe->hqk", q, kk) * hd.e**-0.5
    scores = np.where(mask[None], scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("hqk,khe->qhe", probs, vv).reshape(r, hd.h * hd.e)


def target_ids(tensors: dict, draft_vocab: int) -> np.ndarray:
    """``[W]`` target ids of the draft ids (vLLM's ``compute_logits``: i + d2t[i])."""
    d2t = tensors.get("d2t")
    return np.arange(draft_vocab) + (0 if d2t is None else np.asarray(d2t, np.int64))
