"""Tuned presets: one YAML file per (algorithm, task), with the result measured with it.

Like rl-zoo's ``hyperparams/*.yml`` and RLlib's ``tuned_examples/``, a preset says what
to train and how, and what that gave on a named machine, so a user can reproduce it
(``volley train --preset ppo-halfcheetah``) or start from it. The shipped ones live in
``volley/tuned/`` (inside the wheel); ``volley train --config FILE.yaml`` reads a user's
file of the same form::

    description: one line on where the settings come from
    algo: ppo                      # an algorithm name (volley.algorithms.ALGORITHMS)
    env: HalfCheetah-v5            # a Gymnasium id or registered name
    nprocs: 2                      # optional: MPI ranks, when config.engine is mpi
    config: {gamma: 0.98, ...}     # config keys (RLlib aliases accepted), on the algorithm's defaults
    stop: {timesteps: 1000000}     # any of reward, iterations, timesteps, time_s
    result: {...}                  # optional: what this preset measured (return, steps, time, ...)

Flags given to ``volley train`` override the preset's values. RLlib's tuned-example files
(``rllib train file FILE``) are read too, as they are: one experiment
``{name: {env, run, stop, config}}``, ``run`` an RLlib algorithm name (``PPO``, ``DQN``,
``APEX``), ``stop`` RLlib's result keys (:data:`RLLIB_STOP`); every key of ``config`` goes
through the builder, which refuses what volley does not support in one line.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from volley.algorithms import get_algorithm_class, get_config_class
from volley.config import AlgorithmConfig
from volley.errors import ConfigError, VolleyError, did_you_mean

TUNED = Path(__file__).parent / "tuned"
KEYS = ("description", "algo", "env", "nprocs", "config", "stop", "result")
STOP_KEYS = ("reward", "iterations", "timesteps", "time_s")
# RLlib's stop criteria (its result keys, both stacks) as volley's
RLLIB_STOP = {"episode_reward_mean": "reward", "sampler_results/episode_reward_mean": "reward",
              "env_runners/episode_return_mean": "reward", "episode_return_mean": "reward",
              "training_iteration": "iterations", "timesteps_total": "timesteps",
              "num_env_steps_sampled_lifetime": "timesteps", "num_env_steps_sampled": "timesteps",
              "env_runners/num_env_steps_sampled_lifetime": "timesteps", "time_total_s": "time_s"}
RLLIB_EXPERIMENT_KEYS = ("env", "run", "stop", "config")


@dataclass
class Preset:
    """A parsed preset; :meth:`make_config` turns it into a validated algorithm config."""

    name: str
    algo: str
    env: str
    config: dict[str, Any] = field(default_factory=dict)
    stop: dict[str, float] = field(default_factory=dict)
    nprocs: int | None = None
    description: str = ""
    result: dict[str, Any] | None = None

    def make_config(self, overrides: dict[str, Any] | None = None) -> AlgorithmConfig:
        """The algorithm's config with the preset's keys and then ``overrides`` applied (the preset's
        keys that ``overrides`` sets are not checked: the command line's value replaces them)."""
        overrides = overrides or {}
        own = {k: v for k, v in self.config.items() if k not in overrides}
        config = get_config_class(self.algo)().update(env=self.env, **own)
        return config.update(**overrides)


def preset_names() -> list[str]:
    """The presets shipped with volley, sorted."""
    return sorted(path.stem for path in TUNED.glob("*.yaml"))


def load_preset(name: str) -> Preset:
    """The shipped preset ``name``; a ConfigError naming it (and close names) if there is none."""
    path = TUNED / f"{name}.yaml"
    if not path.is_file():
        names = preset_names()
        raise ConfigError(f"unknown preset '{name}'{did_you_mean(name, names)} "
                          f"(`volley presets` lists all {len(names)})")
    return load_file(path, name)


def load_file(path: str | Path, name: str | None = None, overrides: dict[str, Any] | None = None) -> Preset:
    """A preset from a YAML file (volley's form or RLlib's tuned-example form), checked with the
    command line's ``overrides`` on top; every mistake is one ConfigError naming the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file '{path}': {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"config file '{path}' is not valid YAML{at}: "
                          f"{getattr(exc, 'problem', None) or exc}") from None
    try:
        preset = _parse(_from_rllib(data) if _is_rllib_file(data) else data, name or path.stem)
        preset.make_config(overrides).validate()
    except VolleyError as exc:
        raise ConfigError(f"config file '{path}': {exc}") from None
    return preset


def _is_rllib_file(data: Any) -> bool:
    """RLlib's tuned-example form: experiment names mapping to ``{run: ..., ...}``."""
    return isinstance(data, dict) and bool(data) and all(
        isinstance(v, dict) and "run" in v for v in data.values())


def _from_rllib(data: dict[str, Any]) -> dict[str, Any]:
    """RLlib's ``{name: {env, run, stop, config}}`` as volley's preset form."""
    if len(data) != 1:
        raise ConfigError(f"holds {len(data)} RLlib experiments ({', '.join(map(str, data))}); volley trains "
                          "one at a time: give each its own file")
    (name, experiment), = data.items()
    unknown = [key for key in experiment if key not in RLLIB_EXPERIMENT_KEYS]
    if unknown:
        raise ConfigError(f"RLlib experiment key {unknown[0]!r} is not supported by volley"
                          f"{did_you_mean(str(unknown[0]), RLLIB_EXPERIMENT_KEYS)}; it reads "
                          f"{', '.join(RLLIB_EXPERIMENT_KEYS)}")
    config = dict(experiment.get("config") or {})
    stop: dict[str, Any] = {}
    for key, value in (experiment.get("stop") or {}).items():
        if key not in RLLIB_STOP:
            raise ConfigError(f"RLlib stop criterion {key!r} is not supported by volley"
                              f"{did_you_mean(str(key), RLLIB_STOP)}; it stops on {', '.join(RLLIB_STOP)}")
        stop[RLLIB_STOP[key]] = value
    return {"description": f"RLlib's tuned example '{name}'", "algo": str(experiment["run"]),
            "env": experiment.get("env", config.pop("env", None)), "config": config, "stop": stop}


def _parse(data: Any, name: str) -> Preset:
    if not isinstance(data, dict):
        raise ConfigError(f"must be a mapping with keys {', '.join(KEYS)}, got {type(data).__name__}")
    unknown = [key for key in data if key not in KEYS]
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), KEYS)}")
    for key in ("algo", "env"):
        if not isinstance(data.get(key), str):
            raise ConfigError(f"'{key}' must be a string, got {data.get(key)!r}")
    for key in ("config", "stop", "result"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ConfigError(f"'{key}' must be a mapping, got {data[key]!r}")
    stop = data.get("stop") or {}
    for key, value in stop.items():
        if key not in STOP_KEYS:
            raise ConfigError(f"unknown stop criterion {key!r}{did_you_mean(str(key), STOP_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"stop criterion '{key}' must be a number, got {value!r}")
    nprocs = data.get("nprocs")
    if nprocs is not None and (isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1):
        raise ConfigError(f"'nprocs' must be an integer >= 1, got {nprocs!r}")
    return Preset(name=name, algo=data["algo"], env=data["env"], config=dict(data.get("config") or {}),
                  stop=dict(stop), nprocs=nprocs, description=str(data.get("description") or ""),
                  result=data.get("result"))


def steps_to_threshold(preset: Preset) -> tuple[str, int] | None:
    """The env steps a preset's result records for reaching its threshold, and the key it is under
    (``steps_to_475_median``, ``steps_to_-15``, ``median_steps``); None if it records none."""
    for key, value in (preset.result or {}).items():
        if (key.startswith("steps_to_") or key == "median_steps") and isinstance(value, int):
            return key, value
    return None


def short_run_hint(algorithm: str, env: str, steps: int, preset: str | None = None) -> str | None:
    """One line for a run that stopped on its budget at under 3/4 of the steps its preset
    (``preset``, else the shipped one training ``algorithm`` on ``env``) took to reach its
    threshold: a short run that ends worse than it began is then expected, not a fault."""
    trained = get_algorithm_class(algorithm)
    candidates = [load_preset(preset)] if preset is not None else [
        each for each in map(load_preset, preset_names())
        if each.env == env and get_algorithm_class(each.algo) is trained]
    for each in candidates:
        recorded = steps_to_threshold(each)
        if recorded is not None and steps < 0.75 * recorded[1]:
            return (f"volley: note: {steps:,} env steps is far below the {recorded[1]:,} that preset "
                    f"'{each.name}' took to reach its threshold ({recorded[0]}); for a policy that learns, "
                    f"give it more steps (volley train --preset {each.name})")
    return None


def _stop_text(preset: Preset) -> str:
    return ", ".join(f"{key} {value:,}" if isinstance(value, int) else f"{key} {value:,g}"
                     for key, value in preset.stop.items()) or "-"


def _measured(preset: Preset) -> str:
    return preset.result.get("summary", "-") if preset.result else "not measured yet"


def presets_table(width: int = 100) -> str:
    """The shipped presets for a terminal (``volley presets``): a row each, with what it measured
    wrapped under it, every line at most ``width`` characters."""
    presets = [load_preset(name) for name in preset_names()]
    cells = [(p.name, p.algo, p.env, _stop_text(p)) for p in presets]
    widths = [max(len(row[i]) for row in [("preset", "algo", "environment", "stop"), *cells]) for i in range(4)]
    lines = ["  ".join(text.ljust(w) for text, w in zip(("preset", "algo", "environment", "stop"), widths,
                                                          strict=True)).rstrip()]
    for preset, row in zip(presets, cells, strict=True):
        lines.append("  ".join(text.ljust(w) for text, w in zip(row, widths, strict=True)).rstrip())
        lines += textwrap.wrap(_measured(preset), width, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


def presets_markdown() -> str:
    """A markdown table of the shipped presets with what each measured (``volley presets --markdown``)."""
    lines = ["| preset | algorithm | environment | stop | measured |", "| --- | --- | --- | --- | --- |"]
    for name in preset_names():
        preset = load_preset(name)
        lines.append(f"| {name} | {preset.algo} | {preset.env} | {_stop_text(preset)} | {_measured(preset)} |")
    return "\n".join(lines)
