"""Draft heads on disk: specjax's own directories (``config.json`` + ``params.npz``) and the
published EAGLE-3 layouts (:mod:`specjax.models.eagle_layouts`), detected from the directory;
:func:`load_head` reads any of them, :func:`save_head` writes specjax's and :func:`export_head`
the published ones, so a head trained here is served by vLLM or SGLang unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.models import eagle_layouts as layouts
from specjax.models.eagle import EagleConfig, EagleHead, Frozen
from specjax.models.safetensors_file import SafetensorsFile, save_file

FORMATS = ("specjax", *layouts.LAYOUTS)
STATS = ("feature_shift", "feature_scale")
# specjax's heads before several layers: the first layer's parameters were the head's own.
_FIRST_LAYER = (
    *("norm_embed", "norm_feature", "wq", "wk", "wv", "wo"),
    *("norm_mlp", "w_gate", "w_up", "w_down"),
)


def detect_format(path: str | Path) -> str:
    """``specjax``, ``eagle`` or ``speculators``.

    Raises:
      FileNotFoundError: no such directory or no ``config.json``.
      ValueError: a directory that is none of them (one line naming what is supported).
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: not a draft head directory")
    cfg = json.loads((path / "config.json").read_text())
    if isinstance(cfg.get("config"), dict) and (path / "params.npz").is_file():
        return "specjax"
    kind = cfg.get("speculators_model_type")
    if kind == "eagle3":
        return "speculators"
    if kind is not None:
        raise ValueError(
            f"{path}: speculators_model_type {kind!r} is not an EAGLE-3 head; specjax reads "
            "eagle3 speculators, EAGLE/SpecForge heads and its own"
        )
    arch = " ".join(cfg.get("architectures") or [])
    if "Eagle3" in arch or ("Eagle" in arch and "eagle_config" in cfg):
        return "eagle"
    raise ValueError(
        f"{path} is no draft head specjax reads: its own (config.json + params.npz), an EAGLE / "
        "SpecForge head (LlamaForCausalLMEagle3) or a speculators eagle3 head"
    )


def _tensors(path: Path) -> dict[str, object]:
    """``{name: array or lazy reader}`` of a head's weights (safetensors, else a torch .bin)."""
    files = sorted(path.glob("*.safetensors"))
    if files:
        out = {}
        for f in files:
            reader = SafetensorsFile(f)
            out.update({k: (reader, k) for k in reader.keys()})
        return out
    bins = sorted(path.glob("*.bin"))
    if not bins:
        raise FileNotFoundError(f"{path} has no model.safetensors or pytorch_model.bin")
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"{bins[0]} is a PyTorch file, which specjax reads only with torch installed; "
            'convert it once: python -c "import torch, safetensors.torch as s; '
            f"s.save_file(torch.load('{bins[0]}', weights_only=True), "
            f"'{path / 'model.safetensors'}')\""
        ) from None
    out = {}
    for f in bins:
        for k, v in torch.load(f, map_location="cpu", weights_only=True).items():
            out[k] = v.float().numpy() if v.is_floating_point() else v.numpy()
    return out


def _read(entry) -> np.ndarray:
    if isinstance(entry, tuple):
        reader, name = entry
        return reader.get(name)
    return np.asarray(entry)


def _load_layout(path: Path, kind: str, target_module) -> EagleHead:
    cfg = json.loads((path / "config.json").read_text())
    tensors = {k.removeprefix("model."): v for k, v in _tensors(path).items()}
    config = layouts.config_from_layout(cfg, kind, target_module.config, set(tensors))
    table = layouts.tensor_names(config, kind)
    wanted = {name for name, _ in table.values()}
    optional = {"d2t", "t2d", "embed_tokens.weight", "verifier_norm.weight"}
    optional |= {"verifier_lm_head.weight"}
    missing = sorted(wanted - set(tensors))
    unknown = sorted(set(tensors) - wanted - optional)
    if missing or unknown:
        raise ValueError(
            f"{path}: the {kind} head lacks {missing[:3]} / holds {unknown[:3]} that its "
            "config.json does not describe (num_hidden_layers, attention_bias, fc_norm, ...)"
        )
    d2t = _read(tensors["d2t"]) if "d2t" in tensors else None
    t2d = _read(tensors["t2d"]) if "t2d" in tensors else None
    ids = layouts.ids_from_offsets(d2t, t2d, config.draft_vocab, config.vocab_size)
    if "embed_tokens.weight" in tensors:
        embed = jnp.asarray(_read(tensors["embed_tokens.weight"]), jnp.float32)
    else:
        embed = target_module.embed[...]
    head = nnx.eval_shape(lambda: EagleHead(config, embed, ids, rngs=nnx.Rngs(0)))
    head.embed, head.d2t = Frozen(embed), Frozen(jnp.asarray(ids))
    head.feature_shift = Frozen(jnp.zeros((len(config.feature_layers), config.target_dim)))
    head.feature_scale = Frozen(jnp.ones((len(config.feature_layers), config.target_dim)))
    rows = {}
    for at, (name, transposed) in table.items():
        if at[0] == "fc_norms":  # one row per feature
            rows[at[1]] = np.asarray(_read(tensors[name]), np.float32)
            continue
        param = _param(head, at)
        value = layouts.to_ours(_read(tensors[name]), transposed, tuple(param.shape))
        param.set_value(jnp.asarray(value))
    if rows:
        head.fc_norms.set_value(jnp.asarray(np.stack([rows[i] for i in sorted(rows)])))
    return head


def _param(head, at: tuple):
    node = head
    for key in at:
        node = node[key] if isinstance(key, int) else getattr(node, key)
    return node


def _check_fits(config: EagleConfig, target_module, path) -> None:
    t = target_module.config
    if (config.vocab_size, config.target_dim) != (t.vocab_size, t.dim):
        raise ValueError(
            f"the head at {path} drafts for a target with V = {config.vocab_size}, D = "
            f"{config.target_dim}; this target has V = {t.vocab_size}, D = {t.dim}"
        )


def load_head(path: str | Path, target_module) -> EagleHead:
    """The draft head at ``path`` in any format of :data:`FORMATS`, for ``target_module`` (the
    target :class:`~specjax.models.Decoder`: its embedding, and the layer count the layouts'
    default feature layers need).

    Raises:
      FileNotFoundError: ``path`` is not a head directory.
      ValueError: an unsupported layout or key (named), or a head of another model.
    """
    path = Path(path)
    kind = detect_format(path)
    if kind != "specjax":
        return _load_layout(path, kind, target_module)
    config = EagleConfig.from_json(json.loads((path / "config.json").read_text())["config"])
    _check_fits(config, target_module, path)
    with np.load(path / "params.npz") as data:
        arrays = {k: np.asarray(data[k]) for k in data.files}
    embed = arrays.pop("embed") if "embed" in arrays else target_module.embed[...]
    head = nnx.eval_shape(lambda: EagleHead(config, embed, arrays["d2t"], rngs=nnx.Rngs(0)))
    head.embed = Frozen(jnp.asarray(embed))
    head.d2t = Frozen(jnp.asarray(arrays.pop("d2t"), jnp.int32))
    for name in STATS:
        if name in arrays:
            setattr(head, name, Frozen(jnp.asarray(arrays.pop(name), jnp.float32)))
    for name, value in arrays.items():
        at = (
            ("layers", 0, name)
            if name in _FIRST_LAYER
            else tuple(int(k) if k.isdigit() else k for k in name.split("/"))
        )
        _param(head, at).set_value(jnp.asarray(value, jnp.float32))
    return head


def save_head(path: str | Path, head: EagleHead, extra: dict | None = None) -> None:
    """Writes specjax's layout into the directory ``path``: ``config.json`` and ``params.npz``
    (trained weights as float16, ``d2t`` and the feature statistics); the target's embedding
    is not stored (it comes from the target), a head's own is."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    flat = {}

    def walk(tree, prefix):
        for k, v in tree.items():
            key = f"{prefix}/{k}" if prefix else str(k)
            if isinstance(v, dict):
                walk(v, key)
            else:
                flat[key] = v

    walk(nnx.to_pure_dict(nnx.state(head, nnx.Param)), "")
    arrays = {k: np.asarray(v, np.float16) for k, v in flat.items()}
    arrays["d2t"] = np.asarray(head.d2t[...], np.int32)
    for name in STATS:
        arrays[name] = np.asarray(getattr(head, name)[...], np.float32)
    if head.config.dim != head.config.target_dim:
        arrays["embed"] = np.asarray(head.embed[...], np.float32)
    tmp = path / ".params.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(path / "params.npz")
    meta = {"config": head.config.to_json(), **(extra or {})}
    (path / "config.json").write_text(json.dumps(meta, indent=2) + "\n")


def export_head(
    path: str | Path,
    head: EagleHead,
    kind: str,
    *,
    drop_shift: bool = False,
    verifier: dict | None = None,
) -> Path:
    """Writes ``head`` in a published layout (``eagle`` or ``speculators``): ``config.json`` and
    ``model.safetensors`` (fp32). The per-dimension feature scale is folded into ``fc`` exactly;
    neither layout has an ``fc`` bias, so a head standardised with a shift is refused unless
    ``drop_shift`` (its drafts then differ: measure them). The embedding is written
    (speculators: ``embed_tokens.weight``, as it saves it; eagle: only a head's own).

    Raises:
      ValueError: an unknown layout, a shift without ``drop_shift``, or a scale that cannot fold
        (behind ``fc_norm`` / ``norm_before_fc``).
    """
    if kind not in layouts.LAYOUTS:
        raise ValueError(f"unknown head layout {kind!r}; choose one of {layouts.LAYOUTS}")
    c = head.config
    shift = np.asarray(head.feature_shift[...])
    scale = np.asarray(head.feature_scale[...], np.float32)
    if np.any(shift) and not drop_shift:
        raise ValueError(
            "the head standardises its features with a shift, which no published layout can "
            "hold (fc has no bias); retrain with scale-only standardisation, or export with "
            "drop_shift (its drafts change)"
        )
    if np.any(scale != 1) and (c.fc_norm or c.norm_before_fc):
        raise ValueError("a feature scale cannot fold into fc behind fc_norm / norm_before_fc")
    tensors = {}
    for at, (name, transposed) in layouts.tensor_names(c, kind).items():
        if at[0] == "fc_norms":
            tensors[name] = np.asarray(head.fc_norms[...][at[1]], np.float32)
            continue
        value = np.asarray(_param(head, at)[...], np.float32)
        if at == ("fc",):  # x / s @ fc == x @ (fc / s): the scale folds into fc's rows
            value = value / scale.reshape(-1, 1)
        tensors[name] = layouts.to_theirs(value, transposed)
    if c.draft_vocab < c.vocab_size:  # a full vocabulary has no map (speculators: no buffers)
        d2t, t2d = layouts.offsets_and_mask(np.asarray(head.d2t[...]), c.vocab_size)
        tensors["d2t"], tensors["t2d"] = d2t, t2d
    if kind == "speculators" or c.dim != c.target_dim:
        tensors["embed_tokens.weight"] = np.asarray(head.embed[...], np.float32)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, path / "model.safetensors", {"format": "pt"})
    config = layouts.config_to_layout(c, kind, verifier)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path
