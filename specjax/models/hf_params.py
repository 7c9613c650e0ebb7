"""The mapping between Hugging Face tensor names/layouts and specjax parameters, for every family.

HF stores linear weights as ``[out, in]``; specjax keeps ``[in, ...out]`` with heads split out:

==============================================  ==========================  ================
HF name (``model.`` prefix omitted)              specjax path                specjax shape
==============================================  ==========================  ================
``embed_tokens.weight`` [V, D]                   ``embed``                   [V, D]
``layers.i.self_attn.q_proj.weight`` [H*E, D]    ``layers/i/attn/wq``        [D, H, E]
``layers.i.self_attn.k_proj.weight`` [G*E, D]    ``layers/i/attn/wk``        [D, G, E]
``layers.i.self_attn.v_proj.weight`` [G*E, D]    ``layers/i/attn/wv``        [D, G, E]
``layers.i.self_attn.o_proj.weight`` [D, H*E]    ``layers/i/attn/wo``        [H, E, D]
``layers.i.self_attn.{q,k,v}_proj.bias``         ``layers/i/attn/b{q,k,v}``  [H or G, E]
``layers.i.self_attn.o_proj.bias`` [D]           ``layers/i/attn/bo``        [D]
``layers.i.self_attn.{q,k}_norm.weight`` [E]     ``layers/i/attn/{q,k}_norm/scale``  [E]
``layers.i.mlp.gate_proj.weight`` [F, D]         ``layers/i/mlp/w_gate``     [D, F]
``layers.i.mlp.up_proj.weight`` [F, D]           ``layers/i/mlp/w_up``       [D, F]
``layers.i.mlp.down_proj.weight`` [D, F]         ``layers/i/mlp/w_down``     [F, D]
``layers.i.input_layernorm.weight``              ``layers/i/attn_norm/scale``  [D]
``layers.i.post_attention_layernorm.weight``     ``layers/i/mlp_norm/scale``   [D]
``norm.weight``                                  ``norm/scale``              [D]
``lm_head.weight`` [V, D] (no prefix)            ``lm_head`` (untied only)   [D, V]
==============================================  ==========================  ================

Gemma's four norms per block (``post_norms``) are named differently: ``input_layernorm`` ->
``attn_norm``, ``post_attention_layernorm`` -> ``post_attn_norm``, ``pre_feedforward_layernorm``
-> ``mlp_norm``, ``post_feedforward_layernorm`` -> ``post_mlp_norm``. Gemma's norms store ``w``
of ``x * (1 + w)`` in both libraries, so no tensor changes value on the way.

"Params" throughout :mod:`specjax.models` is the pure nested dict of ``nnx.to_pure_dict(
nnx.state(Decoder(...)))``: the paths above, integer layer keys, array leaves. Each parameter is
read from one HF tensor by a :class:`Source` (a transpose for 2-D weights, then a reshape that
splits one axis), which can read just a slice, so a mesh's devices read only what they hold.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator

import numpy as np

from specjax.models.config import ModelConfig

Params = dict
Path = tuple  # a parameter's path in Params, e.g. ("layers", 0, "attn", "wq")


@dataclasses.dataclass(frozen=True)
class Source:
    """Where one specjax parameter comes from: ``hf.T.reshape(shape)`` (``transpose``) or
    ``hf.reshape(shape)`` of the HF tensor ``name`` of shape ``hf_shape``."""

    name: str
    hf_shape: tuple[int, ...]
    shape: tuple[int, ...]
    transpose: bool = False

    def read(self, get: Callable, index: tuple | None = None) -> np.ndarray:
        """The parameter, or its block ``index`` (a tuple of slices in specjax's layout), from
        ``get(name, hf_index)`` (``hf_index`` a tuple of slices of the HF tensor, or None for all
        of it). Only the HF rows and columns the block needs are asked for."""
        if index is None:
            x = np.asarray(get(self.name, None))
            return (x.T if self.transpose else x).reshape(self.shape)
        mid = self.hf_shape[::-1] if self.transpose else self.hf_shape
        groups = _groups(self.shape, mid)
        mid_index, block, after = [], [], []
        for axes in groups:
            sl = [index[a].indices(self.shape[a]) for a in axes]
            inner = math.prod(self.shape[a] for a in axes[1:])
            whole_inner = all(
                s == (0, self.shape[a], 1) for s, a in zip(sl[1:], axes[1:], strict=True)
            )
            if whole_inner and sl[0][2] == 1:  # a contiguous range of the merged axis
                mid_index.append(slice(sl[0][0] * inner, sl[0][1] * inner))
                block.extend(stop - start for start, stop, _ in sl)
                after.extend([slice(None)] * len(axes))
            else:  # read the outer range whole inside, then cut
                start, stop, _ = sl[0]
                mid_index.append(slice(start * inner, stop * inner))
                block.extend([stop - start, *(self.shape[a] for a in axes[1:])])
                after.extend([slice(None, None, sl[0][2])] + [index[a] for a in axes[1:]])
        hf_index = tuple(mid_index[::-1] if self.transpose else mid_index)
        x = np.asarray(get(self.name, hf_index))
        x = (x.T if self.transpose else x).reshape(block)
        return x[tuple(after)]


def _groups(shape: tuple[int, ...], mid: tuple[int, ...]) -> list[list[int]]:
    """Which axes of ``shape`` each axis of ``mid`` splits into, in order (a reshape that
    only splits axes)."""
    groups, a = [], 0
    for size in mid:
        group, prod = [a], shape[a]
        a += 1
        while prod < size:
            group.append(a)
            prod *= shape[a]
            a += 1
        if prod != size:
            raise ValueError(f"shape {shape} does not split {mid}")
        groups.append(group)
    return groups


def _norm_names(config: ModelConfig) -> dict[str, str]:
    if config.post_norms:
        return {
            "input_layernorm": "attn_norm",
            "post_attention_layernorm": "post_attn_norm",
            "pre_feedforward_layernorm": "mlp_norm",
            "post_feedforward_layernorm": "post_mlp_norm",
        }
    return {"input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm"}


def sources(config: ModelConfig) -> dict[Path, Source]:
    """Every parameter of ``Decoder(config)``: its path and its :class:`Source`.

    Raises:
      ValueError: ``config`` is a load-time form (fused or quantized weights), which has no
        Hugging Face layout (nor, therefore, a checkpoint of its own).
    """
    c = config
    if c.transformed:
        raise ValueError(
            f"model {c.name} has fused_projections / weight_quant, a form made at load time "
            "that is neither saved nor exported; save the model as loaded (before "
            "fuse_projections / quantize_weights) and apply them again when loading "
            "(load_model(..., fuse_projections=True, weight_quant='int8'))"
        )
    d, h, g, e, f, v = c.dim, c.num_heads, c.num_kv_heads, c.head_dim, c.ffn_dim, c.vocab_size
    out = {("embed",): Source("model.embed_tokens.weight", (v, d), (v, d))}
    for i in range(c.num_layers):
        p, at = f"model.layers.{i}.", ("layers", i)
        a = p + "self_attn."
        out[(*at, "attn", "wq")] = Source(a + "q_proj.weight", (h * e, d), (d, h, e), True)
        out[(*at, "attn", "wk")] = Source(a + "k_proj.weight", (g * e, d), (d, g, e), True)
        out[(*at, "attn", "wv")] = Source(a + "v_proj.weight", (g * e, d), (d, g, e), True)
        out[(*at, "attn", "wo")] = Source(a + "o_proj.weight", (d, h * e), (h, e, d), True)
        if c.qkv_bias:
            out[(*at, "attn", "bq")] = Source(a + "q_proj.bias", (h * e,), (h, e))
            out[(*at, "attn", "bk")] = Source(a + "k_proj.bias", (g * e,), (g, e))
            out[(*at, "attn", "bv")] = Source(a + "v_proj.bias", (g * e,), (g, e))
        if c.out_bias:
            out[(*at, "attn", "bo")] = Source(a + "o_proj.bias", (d,), (d,))
        if c.qk_norm:
            for x in ("q", "k"):
                out[(*at, "attn", f"{x}_norm", "scale")] = Source(
                    a + f"{x}_norm.weight", (e,), (e,)
                )
        for hf, ours in _norm_names(c).items():
            out[(*at, ours, "scale")] = Source(p + hf + ".weight", (d,), (d,))
        out[(*at, "mlp", "w_gate")] = Source(p + "mlp.gate_proj.weight", (f, d), (d, f), True)
        out[(*at, "mlp", "w_up")] = Source(p + "mlp.up_proj.weight", (f, d), (d, f), True)
        out[(*at, "mlp", "w_down")] = Source(p + "mlp.down_proj.weight", (d, f), (f, d), True)
    out[("norm", "scale")] = Source("model.norm.weight", (d,), (d,))
    if not c.tie_embeddings:
        out[("lm_head",)] = Source("lm_head.weight", (v, d), (d, v), True)
    return out


def nest(flat: dict[Path, object]) -> Params:
    """``{path: leaf}`` -> the nested params dict."""
    tree: dict = {}
    for path, leaf in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = leaf
    return tree


def param_shapes(config: ModelConfig) -> Params:
    """The shape of every parameter of ``Decoder(config)``, as a params-shaped dict of tuples."""
    return nest({path: s.shape for path, s in sources(config).items()})


_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_IGNORED = re.compile(r"rotary_emb\.inv_freq$")  # RoPE tables older checkpoints saved


def check_names(names: set[str], config: ModelConfig, source: str = "weights") -> None:
    """Raises one ``ValueError`` if the tensors ``names`` are not exactly what ``config``
    reads: a missing tensor, a layer past the config's, or a block tensor it would ignore
    (a bias or norm of another family: ignoring it would change the model)."""
    c = config
    extra = sorted(
        {int(m.group(1)) for n in names if (m := _LAYER.match(n))} - set(range(c.num_layers))
    )
    if extra:
        raise ValueError(
            f"{source} hold layer {extra[0]} but the config has {c.num_layers} layers; "
            "fix num_hidden_layers / block_count"
        )
    wanted = {s.name for s in sources(c).values()}
    missing = sorted(wanted - names)
    if missing:
        raise ValueError(
            f"{source} lack {len(missing)} tensor(s) the config needs, e.g. {missing[:3]}; "
            "check that the weights belong to this config (model_type, tie_word_embeddings, "
            "layer count)"
        )
    unused = sorted(n for n in names - wanted if _LAYER.match(n) and not _IGNORED.search(n))
    if unused:
        raise ValueError(
            f"{source} hold {len(unused)} block tensor(s) a {c.family} config does not use, "
            f"e.g. {unused[:3]}; check config.json's model_type and its bias/norm keys"
        )


def hf_to_params(
    get: Callable[[str], np.ndarray],
    names: set[str],
    config: ModelConfig,
    dtype=np.float32,
    source: str = "weights",
) -> Params:
    """Builds specjax params from HF-named ``[out, in]`` tensors.

    Args:
      get: returns the whole tensor of a name (loaded lazily, one at a time).
      names: every tensor name available.
      config: the target configuration (shapes are checked against it).
      dtype: NumPy dtype of the returned leaves.
      source: what the tensors come from, for error messages.

    Returns:
      Params: a nested dict of NumPy arrays (see the module docstring).

    Raises:
      ValueError: a missing or unused tensor, a shape that does not match ``config``, or
        weights for more layers than ``config`` has.
    """
    check_names(names, config, source)

    def whole(name, index):
        x = np.asarray(get(name))
        want = shapes[name]
        if x.shape != want:
            raise ValueError(
                f"{source}: tensor {name} has shape {list(x.shape)} but the config expects "
                f"{list(want)}; the weights and config do not match"
            )
        return x

    table = sources(config)
    shapes = {s.name: s.hf_shape for s in table.values()}
    flat = {path: np.ascontiguousarray(s.read(whole).astype(dtype)) for path, s in table.items()}
    return nest(flat)


def params_to_hf(params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
    """HF-named ``[out, in]`` NumPy tensors of specjax params (inverse of :func:`hf_to_params`)."""
    out = {}
    for path, s in sources(config).items():
        x = params
        for key in path:
            x = x[key]
        x = np.asarray(x)
        x = x.reshape(s.hf_shape[::-1]).T if s.transpose else x.reshape(s.hf_shape)
        out[s.name] = np.ascontiguousarray(x)
    return out


def hf_names(config: ModelConfig) -> Iterator[str]:
    """The HF tensor names ``config`` reads."""
    yield from (s.name for s in sources(config).values())
