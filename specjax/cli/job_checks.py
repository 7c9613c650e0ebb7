"""The batch-job keys of the decode CLI (``input``, ``results``, ``resume``, ``progress``),
checked with the others before any work (:func:`specjax.cli.validate.check_decode`)."""

from __future__ import annotations

from pathlib import Path

from specjax.cli.checks import ConfigError, choice, readable_file
from specjax.cli.job_files import ResultsFile
from specjax.cli.job_input import input_key, parse_input

OUTPUTS = ("output", "metrics_json", "results")
"""The decode CLI's output files."""

PROGRESS = ("auto", "on", "off")


def batch_job(cfg) -> None:
    """The batch-job keys: ``input``, ``results``, ``resume``, ``progress``."""
    choice(cfg, "progress", PROGRESS)
    if not isinstance(cfg.resume, bool):
        raise ConfigError(f"resume must be True or False, got {cfg.resume!r}")
    if cfg.input:
        readable_file(cfg.input, "input")
        if cfg.prompts_file:
            raise ConfigError("give input or prompts_file, not both (input reads both formats)")
    job = bool(cfg.input or cfg.prompts_file)
    fixed = cfg.mode == "ssd" or cfg.draft_placement == "submesh"
    if job and fixed and (cfg.input or cfg.results):
        where = "mode=ssd" if cfg.mode == "ssd" else "draft_placement=submesh"
        raise ConfigError(
            f"{where} decodes fixed batches and has no continuous batching: input, results and "
            "resume are not supported there; use prompts_file (one prompt per line) and output"
        )
    if cfg.results and not job:
        raise ConfigError("results records the prompts of input; give input=<a prompts file>")
    if cfg.resume and not cfg.results:
        raise ConfigError("resume=True continues a results file; give results=<its path>")
    results = Path(cfg.results).expanduser() if cfg.results else None
    if results is not None and not cfg.resume and results.is_file() and results.stat().st_size:
        raise ConfigError(
            f"results {cfg.results} already holds records; set resume=True to skip the prompts "
            "it has and append the rest, or give another path"
        )
    # The files themselves, before any model loads: the input's lines (not yet tokenized) and,
    # on resume, the records (read only: a torn last line is cut when the job starts).
    try:
        if job and not fixed:
            key = input_key(cfg)
            readable_file(cfg[key], key)
            parse_input(cfg[key], key)
        if results is not None and cfg.resume and results.is_file():
            ResultsFile(results, resume=True, write=False)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if job and cfg.stream and not fixed:
        raise ConfigError(
            "stream=True prints one prompt as it is decoded; a batch job (input or "
            "prompts_file) writes each prompt's record to results as soon as it finishes"
        )
