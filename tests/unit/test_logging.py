"""The console: plain rows in logs, a progress bar with ETA on a terminal when a limit is known."""

from __future__ import annotations

import io

from volley.logging import OPTIONAL_COLUMNS, ProgressBar, ResultLogger
from volley.run import Stop

RESULT = {"training_iteration": 5, "timesteps_total": 4000, "episode_reward_mean": 50.0}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stop_fraction_is_the_nearest_limit():
    assert Stop(iterations=20).fraction(RESULT) == 0.25
    assert Stop(iterations=20, timesteps=5000).fraction(RESULT) == 0.8
    assert Stop(reward=475).fraction(RESULT) is None  # a reward target tells no time


def test_bar_shows_the_fraction_and_the_time_left():
    bar = ProgressBar(io.StringIO())
    # a quarter done after 30 s: 90 s to go
    assert bar.line(Stop(iterations=20).fraction(RESULT), 30.0) == f"[{'#' * 8}{'.' * 22}]  25%  0:30 elapsed, ETA 1:30"
    bar.draw(Stop(reward=1).fraction(RESULT))  # a reward target: no fraction, nothing drawn
    assert bar.out.getvalue() == ""


def test_a_bar_counts_units_of_a_total_on_a_terminal_only():
    assert ProgressBar.on_terminal(io.StringIO(), 4) is None
    bar = ProgressBar.on_terminal(Terminal(), 4)
    bar.advance()
    bar.advance(2)
    assert bar.out.getvalue().split("\r\033[K")[-1].startswith(f"[{'#' * 22}{'.' * 8}]  75%")


def test_bench_advances_its_bar_once_per_iteration_and_timed_part():
    from volley.bench import measure_samplers, sampler_parts, speedup

    bar = ProgressBar(Terminal(), total=3)
    speedup("pg", "CartPole-v1", 2, [0], {"train_batch_size": 200}, warmup=1, progress=bar)
    assert bar.done == 3 and bar.out.getvalue().split("\r\033[K")[-1].startswith(f"[{'#' * 30}] 100%")
    bar = ProgressBar(Terminal(), total=sampler_parts(["custom model"], 2))
    measure_samplers("CartPole-v1", 2, {}, 0.02, ["custom model"], rounds=2, progress=bar)
    assert bar.done == bar.total == 8


def test_bar_only_on_a_terminal():
    log = io.StringIO()
    logger = ResultLogger(None, out=log, fraction=Stop(iterations=20).fraction)
    logger.log(RESULT)
    logger.close()
    assert "ETA" not in log.getvalue() and "\r" not in log.getvalue()
    assert len(log.getvalue().splitlines()) == 2  # header and one row

    tty = Terminal()
    logger = ResultLogger(None, out=tty, fraction=Stop(iterations=20).fraction)
    logger.log(RESULT)
    assert tty.getvalue().splitlines()[-1].startswith("[########.")
    logger.log({**RESULT, "training_iteration": 10})
    logger.close()
    # each redraw first erases the bar, so rows never run into it
    assert tty.getvalue().count("\r\033[K") == 2
    assert tty.getvalue().endswith("\r\033[K")


def _table(result_rows: list[dict]) -> list[list[str]]:
    log = io.StringIO()
    logger = ResultLogger(None, out=log)
    for result in result_rows:
        logger.log(result)
    logger.close()
    return [line.split() for line in log.getvalue().splitlines()]


def test_each_algorithm_shows_its_own_loss_columns():
    """SAC's table shows its actor, critic and temperature, not PPO's empty columns (issue 48)."""
    from volley import DQNConfig, SACConfig

    small = {"engine": "local", "num_workers": 0, "train_batch_size": 64, "learning_starts": 32,
             "min_sample_timesteps_per_iteration": 64}
    for config, expected in [
        (SACConfig().environment("Pendulum-v1").update(**small),
         ["actor", "critic", "alpha", "a_loss", "entropy", "q_mean"]),
        (DQNConfig().environment("CartPole-v1").update(**small), ["loss", "q_mean", "epsilon"]),
    ]:
        algo = config.build()
        try:
            result = algo.train()
        finally:
            algo.stop()
        header, row = _table([result])
        assert header[9:] == expected
        keys = {"a_loss": "alpha_loss", "actor": "actor_loss", "critic": "critic_loss"}
        for name, cell in zip(header[9:], row[9:], strict=True):
            value = result[keys.get(name, name)]
            assert value == value and cell == format(value, next(c[3] for c in OPTIONAL_COLUMNS if c[0] == name))


def test_the_eval_column_appears_with_the_first_evaluation():
    ppo = {**RESULT, "policy_loss": -0.01, "vf_loss": 2.0, "entropy": 0.6, "kl": 0.01}
    lines = _table([ppo, {**ppo, "training_iteration": 6, "evaluation": {"episode_reward_mean": 321.0}},
                    {**ppo, "training_iteration": 7}])
    assert lines[0][9:] == ["pi_loss", "vf_loss", "entropy", "kl"]  # a run that never evaluates: no eval
    assert lines[2][9:] == ["pi_loss", "vf_loss", "entropy", "kl", "eval"]  # a new header with it
    assert lines[3][-1] == "321.0" and lines[4][-1] == "-"
