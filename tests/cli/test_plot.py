"""``volley plot``: one curve per run from progress.jsonl, against steps and wall-clock time."""

from __future__ import annotations

import io
import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from test_cli import volley

from volley import PPOConfig
from volley.errors import ConfigError
from volley.plot import plot_runs
from volley.run import Stop, train_until


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[str]:
    """Two real, short training runs with different seeds."""
    runs = []
    for seed in (1, 2):
        run_dir = tmp_path_factory.mktemp(f"run{seed}")
        config = PPOConfig().update(env="CartPole-v1", engine="local", num_workers=0, seed=seed,
                                    num_envs_per_worker=2, train_batch_size=128, minibatch_size=64)
        with config.build() as algo:
            train_until(algo, Stop(iterations=3), run_dir, checkpoint_freq=0, tensorboard=False,
                        out=io.StringIO())
        runs.append(str(run_dir))
    return runs


def progress(run_dir: str) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "progress.jsonl").read_text().splitlines()]


def test_each_panel_draws_every_run_from_its_progress(two_runs):
    figure = plot_runs(two_runs)
    steps_ax, time_ax = figure.axes
    assert [line.get_label() for line in steps_ax.lines] == [Path(r).name for r in two_runs]
    for run, on_steps, on_time in zip(two_runs, steps_ax.lines, time_ax.lines, strict=True):
        rows = [r for r in progress(run) if r["episode_reward_mean"] is not None]
        assert len(rows) == 3
        assert list(on_steps.get_xdata()) == [r["timesteps_total"] for r in rows]
        assert list(on_time.get_xdata()) == [r["time_total_s"] for r in rows]
        assert list(on_steps.get_ydata()) == [r["episode_reward_mean"] for r in rows]
        # the band spans min..max at every point
        band = next(c for c in steps_ax.collections if np.allclose(
            c.get_paths()[0].vertices[0, 0], rows[0]["timesteps_total"]))
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() == pytest.approx(min(r["episode_reward_min"] for r in rows))
        assert ys.max() == pytest.approx(max(r["episode_reward_max"] for r in rows))


def test_volley_plot_writes_a_png_with_two_coloured_lines(two_runs, tmp_path):
    output = tmp_path / "curves.png"
    out = volley("plot", *two_runs, "-o", str(output))
    assert out.returncode == 0, out.stderr
    assert "2 run(s) plotted" in out.stdout
    image = iio.imread(output)
    assert image.shape[:2] == (400, 1100)  # 11 x 4 inches at 100 dpi
    pixels = image[..., :3].reshape(-1, 3)
    blue, orange = (31, 119, 180), (255, 127, 14)  # matplotlib's first two line colours
    for colour in (blue, orange):
        assert (np.abs(pixels.astype(int) - colour).sum(1) < 30).sum() > 100


def test_runs_without_results_are_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no progress.jsonl in"):
        plot_runs([str(tmp_path)])
    (tmp_path / "progress.jsonl").write_text("")
    with pytest.raises(ConfigError, match="has no results"):
        plot_runs([str(tmp_path)])
    (tmp_path / "progress.jsonl").write_text('{"timesteps_total": 1}\n')
    with pytest.raises(ConfigError, match="line 1 is not a volley result"):
        plot_runs([str(tmp_path)])
