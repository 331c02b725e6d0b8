"""The console: plain rows in logs, a progress bar with ETA on a terminal when a limit is known."""

from __future__ import annotations

import io

from volley.logging import ProgressBar, ResultLogger
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
    bar = ProgressBar(io.StringIO(), Stop(iterations=20).fraction)
    # a quarter done after 30 s: 90 s to go
    assert bar.line(RESULT, 30.0) == f"[{'#' * 8}{'.' * 22}]  25%  0:30 elapsed, ETA 1:30"
    assert ProgressBar(io.StringIO(), Stop(reward=1).fraction).line(RESULT, 30.0) is None


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
