"""Draws a protocol's examples (harness.examples) as one figure: a row per example, its panels
left to right (`ssl-bench show`)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.examples import Example, Panel


SHOW_DIR = "show"  # beside the report: the drawings of `ssl-bench show` and their index
INDEX = "index.json"


def read_index(out_dir: Path) -> list[dict]:
    """The drawn examples listed in ``out_dir/show/index.json`` (empty when there are none)."""
    path = Path(out_dir) / SHOW_DIR / INDEX
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and {"protocol", "model", "png"} <= set(e)]


def _draw_panel(ax, panel: Panel) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(panel.label + (f"\n{panel.text}" if panel.text and panel.kind != "text" else ""), fontsize=8)
    if panel.kind == "text":
        ax.text(0.5, 0.5, panel.text, ha="center", va="center", fontsize=9, wrap=True, transform=ax.transAxes)
        ax.set_frame_on(False)
        return
    if panel.kind == "rgb":
        ax.imshow(panel.image, interpolation="nearest")
    elif panel.kind == "labels":
        shown = np.ma.masked_equal(panel.image, panel.ignore) if panel.ignore is not None else panel.image
        ax.imshow(shown, cmap="tab20", vmin=0, vmax=19, interpolation="nearest")
    else:
        low, high = panel.value_range or (None, None)
        im = ax.imshow(panel.image, cmap="viridis", interpolation="nearest", vmin=low, vmax=high)
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label=panel.unit or None)
    if panel.lines is not None:
        _draw_lines(ax, panel)


def _draw_lines(ax, panel: Panel) -> None:
    ok = panel.line_ok
    for k, (x0, y0, x1, y1) in enumerate(panel.lines):
        colour = "white" if ok is None else ("limegreen" if ok[k] else "red")
        ax.plot([x0, x1], [y0, y1], color=colour, linewidth=0.8, marker="o", markersize=2)
    h, w = panel.image.shape[:2]
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)


def draw_examples(examples: list[Example], path: Path, title: str) -> Path:
    """One PNG at ``path``: ``title`` above, one row per example."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not examples:
        raise ValueError("no examples to draw")
    cols = max(len(e.panels) for e in examples)
    fig, axes = plt.subplots(len(examples), cols, figsize=(2.2 * cols, 2.4 * len(examples)), squeeze=False)
    for row, example in zip(axes, examples):
        mark = "" if example.correct is None else (" ✓" if example.correct else " ✗")
        row[0].set_ylabel(example.title + mark, fontsize=8)
        for ax, panel in zip(row, example.panels):
            _draw_panel(ax, panel)
        for ax in row[len(example.panels):]:
            ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
