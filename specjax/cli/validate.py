"""Every key of every CLI's config, checked before any work (see :mod:`specjax.cli.checks`).

``check_decode`` / ``check_train`` / ``check_distill`` raise :class:`ConfigError` naming the key
and the fix; the CLIs call them before loading a model, compiling a program or waiting for peer
processes.
"""

from __future__ import annotations

from pathlib import Path

from specjax.cli import job_checks
from specjax.cli.checks import (
    F32_TINY,
    ConfigError,
    choice,
    distinct_paths,
    integer,
    model_source,
    number,
    readable_file,
    seed,
    source_has_chat_template,
    source_limits,
    source_vocab,
    writable_dir,
    writable_file,
)
from specjax.cli.width_keys import width_costs, widths

DRAFTERS = ("model", "ngram", "self", "eagle", "none")
PLACEMENTS = ("replicated", "sharded", "submesh")
DTYPES = ("", "float32", "bfloat16")
WEIGHT_QUANTS = ("", "int8", "fp8")  # (specjax.models.config.WEIGHT_QUANTS, "" for none)
DATA_SOURCES = ("corpus", "target_samples")
MODES = ("sd", "ssd")
SSD_DEVICES = ("", "next", "cpu")
SEED_HEADROOM = 2**20  # the decode CLI decodes batch i with seed + i


def check_decode(cfg) -> None:
    """Checks a ``configs/shakespeare.py``-style decode record (types, ranges, files, paths)."""
    from specjax import verify
    from specjax.decode.config import AUTOREGRESSIVE, DecodeConfig
    from specjax.decode.inputs import check_paths, check_replacement, tree_positions
    from specjax.sampling import SamplingParams

    drafter = choice(cfg, "drafter", DRAFTERS)
    placement = choice(cfg, "draft_placement", PLACEMENTS)
    choice(cfg, "dtype", DTYPES)
    choice(cfg, "weight_quant", WEIGHT_QUANTS)
    if not isinstance(cfg.fuse_projections, bool):
        raise ConfigError(f"fuse_projections must be True or False, got {cfg.fuse_projections!r}")
    choice(cfg, "verifier", verify.NAMES)
    l_len = integer(cfg, "num_speculative_tokens", 1, 64)
    k_paths = integer(cfg, "num_paths", 1, 64)
    integer(cfg, "draft_layers", 1)
    ngram_min = integer(cfg, "ngram_min", 1, 64)
    integer(cfg, "ngram_max", ngram_min, 64)  # longer suffixes only slow compiling
    integer(cfg, "max_new_tokens", 1)
    integer(cfg, "batch_size", 1)
    integer(cfg, "top_k", 0)
    number(cfg, "temperature", 0.0)
    if isinstance(cfg.top_p, (int, float)) and not isinstance(cfg.top_p, bool) and cfg.top_p <= 0:
        raise ConfigError(f"top_p must be in (0, 1] (1 keeps every token), got {cfg.top_p}")
    number(cfg, "top_p", F32_TINY, 1.0)  # a smaller top_p kept every token
    seed(cfg, headroom=SEED_HEADROOM)
    vocab = source_vocab(cfg.target) or 2**63  # unknown: bounded once the target is loaded
    for i, token in enumerate(cfg.stop_tokens):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab:
            what = f"in [0, {vocab})" if vocab < 2**63 else "(an integer >= 0)"
            raise ConfigError(
                f"stop_tokens[{i}] must be a token id {what}: {token!r} (no stop tokens: "
                "stop_tokens='()')"
            )
    verifier = AUTOREGRESSIVE if drafter == "none" else cfg.verifier
    sampling = SamplingParams(cfg.temperature, cfg.top_k, cfg.top_p)
    config = DecodeConfig(
        verifier, sampling, cfg.max_new_tokens, (), widths=widths(cfg), width_costs=width_costs(cfg)
    )
    if config.speculative:  # the drafter's own checks, before the models are loaded
        fixed = drafter == "ngram" or (drafter == "eagle" and cfg.top_paths)
        check_paths(config, k_paths, fixed=fixed and k_paths > 1)
        check_replacement(config, cfg.replacement)  # replacement configures the drafter
    shape_buckets(cfg)
    model_source(cfg.target, "target", need_tokenizer=True)
    if drafter == "model":
        model_source(cfg.draft, "draft")
        sizes = source_vocab(cfg.target), source_vocab(cfg.draft)
        if None not in sizes and sizes[0] != sizes[1]:
            raise ConfigError(
                f"draft {cfg.draft} has vocab_size {sizes[1]} but the target {sizes[0]}; a "
                "draft model must share the target's tokenizer and vocabulary (give a draft "
                "of the same family, or drafter=ngram / self)"
            )
    if config.speculative and cfg.mode != "ssd":  # (SSD's own tree: checked once it loads)
        source_limits(cfg, drafter, tree_positions(k_paths, l_len))
    else:
        source_limits(cfg, drafter, tree_positions(1, 0))
    if cfg.chat is True and source_has_chat_template(cfg.target) is False:
        raise ConfigError(
            "chat=True but the target's tokenizer has no chat template; set chat=False"
        )
    if cfg.top_paths and drafter != "eagle":
        raise ConfigError(
            f"top_paths branches a feature head's draft; drafter={drafter} has none: set "
            "drafter=eagle or top_paths=False"
        )
    if drafter == "eagle":
        head_source(cfg.draft)
        if not cfg.replacement:
            raise ConfigError("drafter=eagle draws i.i.d. paths; set replacement=True")
        if cfg.mode == "ssd":
            raise ConfigError("mode=ssd drafts with a model; set drafter=model or self")
    job_checks.batch_job(cfg)
    if cfg.prompts_file:
        readable_file(cfg.prompts_file, "prompts_file")
    elif not cfg.prompt and not cfg.input:
        raise ConfigError("prompt is empty; give a prompt, an input or a prompts_file")
    for key in ("output", "metrics_json", "results"):
        if cfg[key]:
            writable_file(cfg[key], key)
    distinct_paths(cfg, inputs=("input", "prompts_file"), outputs=job_checks.OUTPUTS)
    compilation_cache(cfg)
    _check_devices(cfg, placement)
    if choice(cfg, "mode", MODES) == "ssd":
        ssd_config(cfg)


def compilation_cache(cfg) -> None:
    """``compilation_cache``: ``auto`` and ``off`` always pass (an unusable ``auto`` directory
    is a warning when the run starts, and the run goes on uncached); an explicit directory must
    be writable or creatable, or at least readable (a pre-warmed read-only cache)."""
    from specjax.decode import compile_cache

    setting = str(cfg.compilation_cache).strip()
    if setting.lower() in ("auto", "", *compile_cache.OFF):
        return
    try:
        compile_cache.access(setting)
    except ValueError as err:
        raise ConfigError(f"compilation_cache: {err}") from None


def head_source(path: str) -> None:
    """A feature draft head directory in a layout specjax reads (its own, EAGLE / SpecForge or
    speculators: :func:`specjax.models.eagle_formats.detect_format`), before loading."""
    from specjax.models.eagle_formats import detect_format

    if not path:
        raise ConfigError(
            "drafter=eagle needs draft=<a head directory>, e.g. checkpoints/smollm2_eagle"
        )
    try:
        detect_format(path)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(
            f"draft {path!r}: {err}; train one with scripts/train_draft_head.py"
        ) from None


def shape_buckets(cfg):
    """The :class:`~specjax.decode.ShapeBuckets` of ``prompt_buckets`` and ``batch_buckets``."""
    from specjax.decode.buckets import ShapeBuckets, parse_sizes

    return ShapeBuckets(
        parse_sizes(cfg.prompt_buckets, "prompt_buckets"),
        parse_sizes(cfg.batch_buckets, "batch_buckets"),
    )


def ssd_config(cfg):
    """The :class:`~specjax.decode.ssd.drafter.SSDConfig` of the ``ssd_*`` keys (mode=ssd).

    Where the draft's vocabulary V can be read without loading it (``random:``, specjax
    checkpoints, Hugging Face directories) the keys are also bounded by it: after k < L accepted
    tokens at most V - 1 tokens can be the bonus (the rejected drafted one never is), V after
    all L, so each fan-out entry is bounded by that (the geometric and uniform fan-outs use at
    most V - 1 per term: ssd_budget <= (L + 1)(V - 1)), and ssd_saguaro_top <= V. For other
    sources :func:`specjax.decode.generate_ssd` checks the same bounds once the draft is
    loaded, before compiling.
    """
    from specjax.decode.ssd.fanout import fan_out_excess, parse_fan_out
    from specjax.decode.ssd.speculation import BACKUPS, SSDConfig

    if cfg.drafter not in ("model", "self"):
        raise ConfigError(
            f"mode=ssd drafts with a model; set drafter=model or self, not {cfg.drafter!r}"
        )
    if cfg.verifier not in ("greedy", "token", "block") or cfg.num_paths != 1:
        raise ConfigError(
            "mode=ssd serves one chain per row: set verifier to greedy, token or block and "
            "num_paths=1"
        )
    if cfg.mesh_shape or cfg.stream:
        raise ConfigError(
            "mode=ssd runs on one device or two (ssd_draft_device); unset mesh_shape and stream"
        )
    choice(cfg, "ssd_backup", BACKUPS)
    choice(cfg, "ssd_draft_device", SSD_DEVICES)
    l_len = cfg.num_speculative_tokens
    budget = integer(cfg, "ssd_budget", 1, 1024)
    alpha = number(cfg, "ssd_alpha", 0.0, 1.0, open_low=True)
    if alpha >= 1.0:
        raise ConfigError(f"ssd_alpha must be in (0, 1), got {alpha}")
    number(cfg, "ssd_saguaro", 0.0, 1.0, open_low=True)
    vocab = source_vocab(cfg.target if cfg.drafter == "self" else cfg.draft)
    integer(cfg, "ssd_saguaro_top", 0, vocab)
    most = None if vocab is None else vocab - 1  # bonus candidates per accepted length
    if most is not None and str(cfg.ssd_fan_out).strip() in ("geometric", "uniform"):
        if budget > (l_len + 1) * most:
            raise ConfigError(
                f"ssd_budget={budget} exceeds (L + 1)(V - 1) = {(l_len + 1) * most}: each of the "
                f"L + 1 = {l_len + 1} accepted lengths has at most V - 1 = {most} bonus "
                "candidates (the draft's vocabulary less the drafted token); lower ssd_budget"
            )
    try:
        fan = parse_fan_out(cfg.ssd_fan_out, l_len, budget, alpha, cap=most)
        miss = (
            parse_fan_out(cfg.ssd_fan_out_miss, l_len, sum(fan), alpha, cap=most)
            if cfg.ssd_fan_out_miss
            else None
        )
        ssd = SSDConfig(
            fan_out=fan,
            fan_out_miss=miss,
            saguaro=cfg.ssd_saguaro,
            saguaro_top=cfg.ssd_saguaro_top,
            backup=cfg.ssd_backup,
            ngram_max=cfg.ngram_max,
            ngram_min=cfg.ngram_min,
        )
    except ValueError as err:
        raise ConfigError(f"ssd: {err}") from None
    for key, fans in (("ssd_fan_out", fan), ("ssd_fan_out_miss", miss)):
        problem = None if vocab is None or fans is None else fan_out_excess(fans, vocab)
        if problem:
            raise ConfigError(f"{key}={cfg[key]!r}: {problem}; lower that entry")
    return ssd


def _check_devices(cfg, placement: str) -> None:
    from specjax import sharding
    from specjax.cli import processes

    if cfg.mesh_shape:
        sharding.parse_mesh_shape(cfg.mesh_shape)
        if cfg.stream:
            raise ConfigError("stream=True decodes on one device; unset mesh_shape to stream")
    if placement == "submesh":
        if not cfg.mesh_shape or not cfg.draft_mesh_shape:
            raise ConfigError("draft_placement='submesh' needs mesh_shape and draft_mesh_shape")
        if cfg.drafter != "model":
            raise ConfigError("draft_placement='submesh' places a draft model; set drafter=model")
        sharding.parse_mesh_shape(cfg.draft_mesh_shape)
    integer(cfg, "num_cpu_devices", 0, 1024)  # 10**5 took minutes and GBs, 2**31 an XLA error
    processes_n = integer(cfg, "num_processes", 1)
    integer(cfg, "process_id", 0, processes_n - 1)
    number(cfg, "init_timeout", 0.0, 2**31 - 31, open_low=True)  # jax takes int32 s (+ 30 s)
    if cfg.coordinator_address and cfg.coordinator_address != "auto":
        processes.check_address(cfg.coordinator_address)


def check_training_run(cfg) -> None:
    """The keys that training and distillation share: corpus, split, seed, directories, the
    ``train`` block, and the ``model`` block's shape."""
    from specjax.models import checkpoint

    if cfg.corpus not in ("shakespeare", "shakespeare_slice") and not Path(cfg.corpus).exists():
        raise ConfigError(
            f"corpus {cfg.corpus!r} is neither 'shakespeare', 'shakespeare_slice' nor an existing "
            "path; give a file or a directory of *.txt"
        )
    number(cfg, "val_fraction", 0.0, 0.5, open_low=True)
    seed(cfg)
    writable_dir(cfg.workdir, "workdir")
    writable_dir(cfg.export_dir, "export_dir")
    export = Path(cfg.export_dir).expanduser()
    if export.exists() and not checkpoint.is_checkpoint(export) and any(export.iterdir()):
        raise ConfigError(
            f"export_dir {export} exists and is not a specjax checkpoint; the export would not "
            "replace it: choose a new export_dir (or remove it yourself)"
        )
    model_cfg, train_cfg = model_config(cfg), train_config(cfg)
    if train_cfg.seq_len > model_cfg.max_seq_len:
        raise ConfigError(
            f"train.seq_len {train_cfg.seq_len} exceeds model.max_seq_len "
            f"{model_cfg.max_seq_len}; shorten the windows or raise max_seq_len"
        )


def check_train(cfg) -> None:
    """Checks a ``configs/shakespeare_target.py``-style training record."""
    from specjax.models.tokenizer import ByteTokenizer

    choice(cfg, "tokenizer", ("bytes",))
    check_training_run(cfg)
    vocab = ByteTokenizer().vocab_size
    if model_config(cfg).vocab_size < vocab:
        raise ConfigError(
            f"model.vocab_size {cfg.model.vocab_size} is smaller than the byte tokenizer's "
            f"vocabulary ({vocab}); set model.vocab_size >= {vocab}"
        )


def check_distill(cfg) -> None:
    """Checks a ``configs/shakespeare_draft.py``-style distillation record."""
    from specjax.models import checkpoint
    from specjax.train.distill import LOSSES

    choice(cfg, "loss", LOSSES)
    data = choice(cfg, "data", DATA_SOURCES)
    number(cfg, "temperature", 0.0, open_low=True)
    if data == "target_samples":
        batch = integer(cfg, "sample_batch", 1)
        integer(cfg, "num_samples", batch)
        integer(cfg, "prompt_len", 1)
        integer(cfg, "sample_len", 1)
    model_source(cfg.target, "target", need_tokenizer=True)
    check_training_run(cfg)
    if not checkpoint.is_checkpoint(Path(cfg.target).expanduser()):
        return  # GGUF / HF sources: their vocabulary is compared once loaded
    target = checkpoint.read_config(Path(cfg.target).expanduser())
    draft = model_config(cfg)
    if draft.vocab_size != target.vocab_size:
        raise ConfigError(
            f"model.vocab_size ({draft.vocab_size}) != the target's vocab_size "
            f"({target.vocab_size}); draft and target must share one tokenizer"
        )
    if data == "target_samples" and cfg.prompt_len + cfg.sample_len > target.max_seq_len:
        raise ConfigError(
            f"prompt_len + sample_len = {cfg.prompt_len + cfg.sample_len} exceeds the target's "
            f"max_seq_len {target.max_seq_len}; shorten the samples"
        )


def model_config(cfg):
    """The :class:`ModelConfig` of ``cfg.model``; unknown or bad fields are one error."""
    from specjax.models import ModelConfig

    return _build(ModelConfig, cfg.model, "model")


def train_config(cfg):
    """The :class:`TrainConfig` of ``cfg.train``; unknown or bad fields are one error."""
    from specjax.train.trainer import TrainConfig

    return _build(TrainConfig, cfg.train, "train")


def _build(cls, block, key: str):
    values = block.to_dict() if hasattr(block, "to_dict") else dict(block)
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"unknown {key} key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(known))}"
        )
    try:
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}: {err}") from None
