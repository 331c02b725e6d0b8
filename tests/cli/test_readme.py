"""Every command the README shows runs: its Python example trains and saves, each ``volley`` line
is a command volley's parser takes, and its two quick-start commands are what CI runs."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from volley.arguments import build_parser
from volley.presets import preset_names

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.M | re.S)


def commands() -> list[str]:
    """The README's shell commands, one per line, comments and continuations removed."""
    text = "\n".join(blocks("bash")).replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in text.splitlines() if line.strip()]


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 150


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    install_and_train, install_and_test = commands()[:2]
    assert install_and_train == "pip install torch==2.13.0 && pip install -e . && volley train"
    pip_torch, pip_extras, pytest_line = install_and_test.split(" && ")
    ci = (ROOT / ".ci" / "run").read_text()
    torch = pip_torch.split()[-1]
    assert f"pip install --quiet {torch}\n" in ci  # the same pinned CPU wheel, installed first
    extras = re.search(r'"\.\[([\w,]+)\]"', pip_extras)[1].split(",")
    ci_extras = re.search(r'pip install --quiet -e "\.\[([\w,]+)\]"', ci)[1].split(",")
    assert set(extras) <= set(ci_extras)
    assert ci.rstrip().splitlines()[-1] == pytest_line  # exactly the README's test command, last


@pytest.mark.parametrize("line", [c for c in commands() if c.startswith("volley ")], ids=lambda c: c[:40])
def test_each_volley_command_parses(line):
    args = build_parser().parse_args(shlex.split(line)[1:])
    if getattr(args, "preset", None):
        assert args.preset in preset_names()


def test_the_development_commands_name_what_exists():
    lines = [c for c in commands() if "mkdocs" in c or ".ci/run" in c]
    assert lines and (ROOT / "mkdocs.yml").exists() and (ROOT / ".ci" / "run").exists()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "mkdocs build --strict" in ci
    assert re.search(r'"\.\[[\w,]*docs[\w,]*\]"', ci)


def test_the_python_example_trains_saves_and_evaluates(tmp_path):
    (example,) = blocks("python")
    out = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    *rewards, evaluation = out.stdout.strip().splitlines()
    assert len(rewards) == 5 and all(float(r) > 0 for r in rewards)
    assert "'episode_reward_mean'" in evaluation
    assert (tmp_path / "ckpt").is_dir()
