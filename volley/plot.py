"""Learning curves from run directories: ``volley plot RUN_DIR [RUN_DIR ...] -o curves.png``.

Each run directory (``volley train``'s, or a ``volley tune`` trial's) holds a
``progress.jsonl`` with one result per iteration. The figure has two panels,
episode reward mean against environment steps and against wall-clock time, one
line per run with its min-max band shaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from volley.errors import ConfigError

X_AXES = (("timesteps_total", "environment steps"), ("time_total_s", "wall-clock time (s)"))


def read_progress(run_dir: str | Path) -> dict[str, list[float]]:
    """The curve columns of a run's ``progress.jsonl`` (iterations without an episode yet skipped)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"no run directory '{run_dir}'")
    path = run / "progress.jsonl"
    if not path.is_file():
        raise ConfigError(f"no progress.jsonl in '{run_dir}' (is it a volley run directory?)")
    keys = ("timesteps_total", "time_total_s", "episode_reward_mean", "episode_reward_min",
            "episode_reward_max")
    columns: dict[str, list[float]] = {key: [] for key in keys}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            result = json.loads(line)
            values = [result[key] for key in keys]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f"'{path}' line {number} is not a volley result: {exc}") from None
        if None in values:  # no episode had ended yet
            continue
        for key, value in zip(keys, values, strict=True):
            columns[key].append(float(value))
    if not columns["timesteps_total"]:
        raise ConfigError(f"'{path}' has no results with finished episodes yet")
    return columns


def plot_runs(run_dirs: list[str], labels: list[str] | None = None) -> Any:
    """A matplotlib Figure of every run's curves (read and checked before anything is drawn)."""
    curves = [read_progress(run) for run in run_dirs]
    labels = labels or [Path(run).resolve().name for run in run_dirs]
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'volley-rl[plot]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for curve, label in zip(curves, labels, strict=True):
        for ax, (x_key, _) in zip(axes, X_AXES, strict=True):
            (line,) = ax.plot(curve[x_key], curve["episode_reward_mean"], label=label)
            ax.fill_between(curve[x_key], curve["episode_reward_min"], curve["episode_reward_max"],
                            color=line.get_color(), alpha=0.2, linewidth=0)
    for ax, (_, title) in zip(axes, X_AXES, strict=True):
        ax.set_xlabel(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode reward mean (min-max band)")
    axes[0].legend(fontsize="small")
    figure.tight_layout()
    return figure


def save_plot(run_dirs: list[str], output: str) -> Path:
    """Draw ``run_dirs`` into the image file ``output`` (PNG, SVG or PDF)."""
    out = Path(output)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"unsupported plot extension '{out.suffix or output}': use .png, .svg or .pdf")
    if not out.parent.is_dir():
        raise ConfigError(f"no directory '{out.parent}' to write '{output}' into")
    figure = plot_runs(run_dirs)
    figure.savefig(out, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return out
