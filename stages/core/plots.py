"""Plots of the evaluation reports: matplotlib without a display, figures written atomically."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .tables import atomic_write_bytes  # noqa: E402


def save_png(fig, path: str) -> None:
    """The figure as a PNG, written atomically (core.tables.atomic_write_bytes), then closed."""
    buffer = io.BytesIO()
    try:
        fig.tight_layout()
        fig.savefig(buffer, format="png", dpi=120)
    finally:
        plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def grouped_bars(groups: list[str], series: dict[str, list[float | None]], title: str, ylabel: str, path: str, ymax: float | None = 100) -> None:
    """Bars per group, one bar per series; a missing value is drawn as 0 and marked "n/a"."""
    fig, ax = plt.subplots(figsize=(max(5, 1.5 * max(1, len(groups))), 3.6))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [x + i * width for x in range(len(groups))]
        heights = [v or 0.0 for v in values]
        ax.bar(xs, heights, width, label=name)
        for x, v in zip(xs, values):
            ax.annotate("n/a" if v is None else f"{v:.0f}", (x, v or 0.0), ha="center", va="bottom", fontsize="x-small")
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(groups))], groups, fontsize="small")
    ax.set_ylabel(ylabel)
    if ymax is not None:
        ax.set_ylim(0, ymax)
    ax.set_title(title)
    if series and groups:
        ax.legend(fontsize="small")
    save_png(fig, path)
