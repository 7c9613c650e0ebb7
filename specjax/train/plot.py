"""Loss-curve plots (PNG) of training runs; matplotlib is an optional dependency (``[train]``)."""

from __future__ import annotations

from pathlib import Path


def plot_history(history: list[dict], path: str | Path, title: str) -> Path | None:
    """Plots train and validation loss against steps into ``path`` (PNG).

    Args:
      history: points with ``step``, ``train_loss`` and ``val_loss`` (nats/token).
      path: output file.
      title: plot title.

    Returns:
      The path written, or None if matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(steps, [h["train_loss"] for h in history], label="train (last batch)")
    ax.plot(steps, [h["val_loss"] for h in history], label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
