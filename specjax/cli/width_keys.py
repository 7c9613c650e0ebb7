"""The decode CLI's width keys: ``widths`` (the draft widths chosen per step) and
``width_costs`` (their relative costs: numbers, a costs file ``python -m specjax.calibrate``
wrote, or empty), as :class:`~specjax.decode.DecodeConfig` fields."""

from __future__ import annotations

from specjax.cli.checks import F32_MAX, F32_TINY, ConfigError


def widths(cfg) -> tuple[int, ...]:
    """``DecodeConfig.widths`` of the ``widths`` key: ``auto`` (0 and L: a one-token step when
    drafts do not pay; not for SSD or a draft on its own devices, which keep L), ``fixed`` (always
    L) or comma-separated draft lengths, e.g. ``0,2,6``."""
    from specjax.decode.widths import check_widths

    text = str(cfg.widths).strip()
    l_len = cfg.num_speculative_tokens
    special = cfg.drafter == "none" or cfg.mode == "ssd" or cfg.draft_placement == "submesh"
    # A batch job at temperature > 0 promises each prompt the sample of its id and the seed,
    # whatever rows run beside it; a width chosen for all rows would break that, unless the
    # verifier's output does not depend on the widths (gumbel).
    sampled_job = (
        bool(cfg.input or cfg.prompts_file) and cfg.temperature > 0 and cfg.verifier != "gumbel"
    )
    if text == "fixed" or (text == "auto" and (special or sampled_job)):
        return ()
    if text == "auto":
        return (0, l_len)
    try:
        chosen = tuple(int(w) for w in text.split(","))
    except ValueError:
        raise ConfigError(
            f"widths={text!r}: give auto, fixed or comma-separated draft lengths such as "
            f"0,2,{l_len}"
        ) from None
    if special:
        raise ConfigError(
            "widths: mode=ssd, drafter=none and draft_placement=submesh keep one width; set "
            "widths=auto or fixed"
        )
    if sampled_job:
        raise ConfigError(
            "widths: a batch job at temperature > 0 drafts one fixed width, so that each "
            "prompt's sample depends only on its id and the seed; set widths=auto or fixed, or "
            "verifier=gumbel (its sample does not depend on the widths)"
        )
    try:
        check_widths(chosen, l_len)
    except ValueError as e:
        raise ConfigError(f"widths: {e}") from None
    return chosen


def costs_file(cfg) -> str | None:
    """The costs file the ``width_costs`` key names (a path ending in ``.json``), else None."""
    text = str(cfg.width_costs).strip()
    return text if text.endswith(".json") else None


def pair_name(cfg) -> str:
    """What a costs file keys a pair's costs by: target, drafter, draft, L, K, verifier, dtype."""
    draft = f" {cfg.draft}" if cfg.drafter in ("model", "eagle") else ""
    return (
        f"{cfg.target} | {cfg.drafter}{draft} | L={cfg.num_speculative_tokens} "
        f"K={cfg.num_paths} | {cfg.verifier} | dtype={cfg.dtype or 'checkpoint'}"
    )


def batch_bucket(cfg) -> int:
    """The batch bucket a costs file keys the CLI's runs by (``batch_size`` rounded up)."""
    from specjax.decode.buckets import round_up

    sizes = tuple(int(b) for b in str(cfg.batch_buckets).split(",") if b.strip())
    return round_up(cfg.batch_size, sizes) if sizes else cfg.batch_size


def width_costs(cfg, read_file: bool = True) -> tuple[float, ...]:
    """``DecodeConfig.width_costs`` of the ``width_costs`` key: ``""`` (measured where the output
    cannot depend on them, else guessed: :mod:`specjax.decode.costs`), one cost per width, or
    a costs file (read where ``read_file``; ``python -m specjax.calibrate`` writes it)."""
    text = str(cfg.width_costs).strip()
    if not text:
        return ()
    chosen = widths(cfg)
    if not chosen:
        raise ConfigError(
            f"width_costs={text!r} prices the widths chosen per step; widths=fixed has none: "
            "leave width_costs empty, or choose widths (e.g. widths=0,4)"
        )
    path = costs_file(cfg)
    if path is not None:
        if not read_file:
            return ()
        from specjax.decode import costs

        try:
            return costs.lookup(path, pair_name(cfg), batch_bucket(cfg), chosen)
        except (OSError, ValueError) as e:
            raise ConfigError(f"width_costs: {e}") from None
    try:
        values = tuple(float(c) for c in text.split(","))
    except ValueError:
        raise ConfigError(
            f"width_costs={text!r}: give one relative cost per width, e.g. 1,1.8, a costs file "
            "(.json) from python -m specjax.calibrate, or leave it empty"
        ) from None
    if len(values) != len(chosen) or not all(F32_TINY <= c <= F32_MAX for c in values):
        raise ConfigError(
            f"width_costs={text!r}: give one positive cost per width of {chosen}, "
            f"each in [{F32_TINY:.3g}, {F32_MAX:.3g}] (float32)"
        )
    return values
