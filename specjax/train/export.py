"""Publishing a finished run: the checkpoint plus its history, loss plot and summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specjax.models import checkpoint
from specjax.train import plot


def export_run(
    export_dir: str | Path,
    model,
    config,
    tokenizer,
    workdir: str | Path,
    history: list[dict],
    title: str,
    summary: dict,
) -> dict:
    """Writes ``model`` (atomically) to ``export_dir`` with the run's ``history.jsonl``, a
    ``loss.png`` titled ``title`` and ``summary.json``; prints and returns ``summary``."""
    export = Path(export_dir)
    checkpoint.save(export, model, config, tokenizer)
    shutil.copy(Path(workdir) / "history.jsonl", export / "history.jsonl")
    plot.plot_history(history, export / "loss.png", title)
    (export / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"exported to {export}: {json.dumps(summary)}", flush=True)
    return summary
