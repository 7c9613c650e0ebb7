"""The decode CLI's width keys: ``widths`` (the draft widths chosen per step) and
``width_costs`` (their relative costs, else measured), as :class:`~specjax.decode.DecodeConfig`
fields."""

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
    # whatever rows run beside it; a width chosen for all rows would break that.
    sampled_job = bool(cfg.input or cfg.prompts_file) and cfg.temperature > 0
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
            "prompt's sample depends only on its id and the seed; set widths=auto or fixed"
        )
    try:
        check_widths(chosen, l_len)
    except ValueError as e:
        raise ConfigError(f"widths: {e}") from None
    return chosen


def width_costs(cfg) -> tuple[float, ...]:
    """``DecodeConfig.width_costs`` of the ``width_costs`` key (``""``: measured)."""
    text = str(cfg.width_costs).strip()
    if not text:
        return ()
    try:
        costs = tuple(float(c) for c in text.split(","))
    except ValueError:
        raise ConfigError(
            f"width_costs={text!r}: give one relative cost per width, e.g. 1,1.8 (or empty)"
        ) from None
    chosen = widths(cfg)
    if not chosen:
        raise ConfigError(
            f"width_costs={text!r} prices the widths chosen per step; widths=fixed has none: "
            "leave width_costs empty, or choose widths (e.g. widths=0,4)"
        )
    if len(costs) != len(chosen) or not all(F32_TINY <= c <= F32_MAX for c in costs):
        raise ConfigError(
            f"width_costs={text!r}: give one positive cost per width of {chosen}, "
            f"each in [{F32_TINY:.3g}, {F32_MAX:.3g}] (float32)"
        )
    return costs
