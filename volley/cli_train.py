"""``volley train``: a new run or a resumed one, and the run's settings the flags make (the preset,
the config keys, the environment id, the stop criteria), which ``volley tune`` reads too.

The cluster a run wants starts before torch is imported (:mod:`volley.engines.ray_boot`), so the
two overlap; an MPI run re-runs itself under ``mpiexec`` (``--nprocs``), and every rank but 0
serves rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from volley.errors import ConfigError

STARTED = time.monotonic()  # the stop line counts start-up (imports, Ray, workers) from here


def _resumed_run(run_dir: Path) -> tuple[str | None, int | None]:
    """The engine a run to resume was started on, and its MPI ranks (from its params.json)."""
    from volley.run import PARAMS, run_settings

    try:
        engine = json.loads((run_dir / PARAMS).read_text())["config"].get("engine")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, None  # no or a damaged params.json: _resume reports what is wrong
    return engine, run_settings(run_dir).get("nprocs")


def train(args: argparse.Namespace) -> int:
    """``volley train``: a new run, or ``--resume`` one; with ``--nprocs``, first re-run under mpiexec."""
    preset = preset_of(args)
    engine = args.engine or (preset.config.get("engine") if preset else None)
    if args.resume is not None and args.engine is None and not _under_mpiexec():
        engine, nprocs = _resumed_run(Path(args.resume))
        if engine == "mpi" and args.nprocs is None:
            args.nprocs = nprocs  # an MPI run continues on as many ranks as it started with
    if args.nprocs is None and preset is not None and preset.nprocs and engine == "mpi" and not _under_mpiexec():
        args.nprocs = preset.nprocs  # the preset's ranks: start mpiexec as --nprocs would
    if args.nprocs is not None:
        if engine != "mpi":
            raise ConfigError(f"--nprocs {args.nprocs} needs --engine mpi, got --engine {engine or 'ray'}")
        from volley.engines.mpi_engine import run_under_mpiexec

        rest = [a for i, a in enumerate(args.argv) if a != "--nprocs" and not a.startswith("--nprocs=")
                and (i == 0 or args.argv[i - 1] != "--nprocs")]
        return run_under_mpiexec(args.nprocs, [sys.executable, "-m", "volley", *rest])
    overrides = overrides_of(args, engine=args.engine, num_workers=args.workers)
    if not args.wandb or mpi_rank() != 0:  # under MPI, rank 0 trains and logs; the others serve it
        return _run(args, overrides)
    from volley.tracking import wandb_run

    with wandb_run(args.wandb_project, "train") as tracker:
        return _run(args, overrides, tracker)


def _run(args: argparse.Namespace, overrides: dict[str, Any], tracker: Any = None) -> int:
    """``volley train`` once the process is the one to train in (``tracker``: its W&B run)."""
    algo, run_dir, saved = _resume(args, overrides) if args.resume is not None else _start(args, overrides)
    if tracker is not None:
        tracker.name = run_dir.name  # the run directory's name, as CleanRL names its runs
    from volley.run import train_until  # imports torch: after _start has begun Ray's cluster
    try:
        if not algo.is_driver:  # an MPI rank other than 0: it serves rank 0, which prints and saves
            algo.serve_forever()
            return 0
        stop = stop_of(args, saved.get("stop", {}))
        config = algo.config
        print(f"volley: {type(algo).__name__} on {config.env}, engine {config.engine}, "
              f"{algo.workers.plan.num_workers} worker(s) x {algo.workers.plan.num_envs_per_worker} envs, "
              f"seed {config.seed}")
        print(f"volley: run directory {run_dir}")
        if not stop.is_set:
            print("volley: no stop criterion: training until Ctrl-C")
        outcome = train_until(
            algo, stop, run_dir, tensorboard=not args.no_tensorboard,
            checkpoint_freq=first_given(args.checkpoint_freq, saved.get("checkpoint_freq"), 10),
            keep_checkpoints=first_given(args.keep_checkpoints, saved.get("keep_checkpoints"), 5))
    finally:
        algo.stop()
    print(f"volley: stopped ({outcome.reason}) at iteration {algo.iteration}, {algo.timesteps_total} env "
          f"steps, {outcome.wall_time_s:.1f} s of training ({time.monotonic() - STARTED:.1f} s with start-up)")
    print(f"volley: checkpoint {outcome.checkpoint}")
    if _on_budget(stop, outcome):
        from volley.presets import short_run_hint

        hint = short_run_hint(type(algo).__name__, config.env, algo.timesteps_total, args.preset)
        if hint is not None:
            print(hint)
    # a run stopped by a signal exits as shells expect (130 for Ctrl-C, 143 for SIGTERM)
    return 128 + outcome.signal if outcome.signal else 0


def _on_budget(stop: Any, outcome: Any) -> bool:
    """Whether a run stopped on its step or iteration limit (not its reward, time or a signal)."""
    from volley.run import Stop

    budget = Stop(iterations=stop.iterations, timesteps=stop.timesteps)
    return bool(outcome.result) and budget.reason(outcome.result) == outcome.reason


def _under_mpiexec() -> bool:
    """True in a process that mpiexec started (MPICH's or Open MPI's), without importing MPI."""
    return "PMI_SIZE" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ


def mpi_rank() -> int:
    """This process's rank under mpiexec (MPICH or Open MPI), 0 elsewhere, without importing MPI."""
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


def preset_of(args: argparse.Namespace) -> Any:
    """The preset ``--preset`` or ``--config`` names, or None."""
    if getattr(args, "preset", None) is None and getattr(args, "config_file", None) is None:
        return None
    from volley.presets import load_file, load_preset

    if args.preset is not None:
        return load_preset(args.preset)
    return load_file(args.config_file, overrides=overrides_of(args, engine=getattr(args, "engine", None),
                                                            num_workers=args.workers))


def overrides_of(args: argparse.Namespace, **flags: Any) -> dict[str, Any]:
    """Config keys given by the run flags, then by ``--set`` (which wins)."""
    flags |= {"num_envs_per_worker": args.envs_per_worker, "seed": args.seed, "framework": args.framework,
              "ray_address": args.address, "num_cpus": args.num_cpus,
              "evaluation_interval": args.eval_every}
    return {k: v for k, v in flags.items() if v is not None} | dict(args.overrides)


def checked_env_id(args: argparse.Namespace, preset: Any, overrides: dict[str, Any]) -> str:
    """The run's environment id, checked (a typo is named before anything heavy is imported):
    ``--set env=``, else ``--env``, else the preset's, else CartPole-v1."""
    from volley.envs import check_env_id

    env = str(overrides.get("env", args.env or (preset.env if preset is not None else "CartPole-v1")))
    check_env_id(env)
    return env


def new_config(args: argparse.Namespace, overrides: dict[str, Any], preset: Any, env: str) -> Any:
    """A new run's config: ``preset`` (``--preset``/``--config``) if given, else ``--algo``
    (default PPO); then ``env`` (from :func:`checked_env_id`) and the flags."""
    from volley.algorithms import get_algorithm_class, get_config_class

    if preset is None:
        return get_config_class(args.algo or "ppo")().update(**{**overrides, "env": env})
    if args.algo is not None and get_algorithm_class(args.algo) is not get_algorithm_class(preset.algo):
        raise ConfigError(f"--algo {args.algo} but preset '{preset.name}' trains {preset.algo}")
    return preset.make_config({**overrides, "env": env})


def stop_of(args: argparse.Namespace, saved: dict[str, Any]) -> Any:
    """Stop criteria: the flags given, else ``saved`` (a resumed run's, or the env's threshold)."""
    from volley.run import Stop

    stop = Stop(**saved)
    for key, value in {"reward": args.stop_reward, "iterations": args.max_iters,
                       "timesteps": args.max_timesteps, "time_s": args.max_time}.items():
        if value is not None:
            setattr(stop, key, value)
    return stop


def reward_threshold(env: str) -> float | None:
    """The env's registered ``reward_threshold`` (CartPole-v1: 475), the default stop reward."""
    import gymnasium as gym

    return gym.registry[env].reward_threshold if env in gym.registry else None


def first_given(*values: Any) -> Any:
    """The first of ``values`` that is not None (a flag, else a saved setting, else the default)."""
    return next(v for v in values if v is not None)


def _start(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Path, dict[str, Any]]:
    """A new run: build the algorithm; the stop reward defaults to the env's reward_threshold."""
    from volley.engines import ray_boot

    preset = preset_of(args)
    logdir = args.logdir or "runs"
    try:  # before the workers start, so a bad path costs nothing
        Path(logdir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--logdir '{logdir}' cannot be created: {exc.strerror or exc}") from None
    if args.name is not None and (Path(logdir) / args.name).exists():
        raise ConfigError(f"run directory '{Path(logdir) / args.name}' exists already; choose another "
                          f"--name, or continue it with --resume {Path(logdir) / args.name}")
    env = checked_env_id(args, preset, overrides)
    settings = {**(preset.config if preset is not None else {}), **overrides}
    if (settings.get("engine", "ray") == "ray" and settings.get("ray_address") is None
            and not os.environ.get("RAY_ADDRESS") and str(settings.get("num_workers")) != "0"):
        # Ray's cluster starts while torch and the algorithm load; after a mistake found from
        # here on, main() shuts it down once the error is shown (the env id is checked first)
        ray_boot.begin(settings)
    config = new_config(args, overrides, preset, env)
    if args.wandb:
        from volley.tracking import tracked_callbacks

        config.update(**tracked_callbacks(config.callbacks_class, True))
    _install_hooks(config.engine)
    algo = config.build()
    ray_boot.abandon()  # begun for a run whose config turned out to want no cluster
    from volley.run import run_dir_name

    stop = dict(preset.stop) if preset is not None else {"reward": reward_threshold(config.env)}
    return algo, Path(logdir) / (args.name or run_dir_name(algo)), {"stop": stop}


def _resume(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Path, dict[str, Any]]:
    """Continue ``args.resume`` from its newest checkpoint, in the same directory."""
    from volley.algorithms import get_algorithm_class
    from volley.checkpoint import read_checkpoint
    from volley.run import latest_checkpoint, rewind, run_settings
    from volley.tracking import tracked_callbacks

    run_dir = Path(args.resume)
    if args.preset is not None or args.config_file is not None:
        raise ConfigError(f"--resume {args.resume} continues that run with its own config; drop "
                          f"--{'preset' if args.preset is not None else 'config'}")
    if args.logdir is not None:
        raise ConfigError(f"--logdir {args.logdir} and --resume {args.resume} both choose the run "
                          "directory; give one")
    checkpoint = latest_checkpoint(run_dir)
    _, manifest = read_checkpoint(checkpoint)
    trained = get_algorithm_class(str(manifest.get("algorithm")))
    if args.algo is not None and get_algorithm_class(args.algo) is not trained:
        raise ConfigError(f"--algo {args.algo} but run '{run_dir}' trains {trained.__name__}")
    if args.env is not None and args.env != manifest["config"]["env"]:
        raise ConfigError(f"--env {args.env} but run '{run_dir}' trains on {manifest['config']['env']}")
    merged = {**manifest["config"], **overrides}
    saved = run_settings(run_dir)
    _install_hooks(merged.get("engine", ""))
    tracking = tracked_callbacks(manifest["config"].get("callbacks_class"), args.wandb)
    algo = trained.from_checkpoint(checkpoint, **overrides, **tracking)
    if algo.is_driver:  # under MPI every rank restores; rank 0 alone touches the run directory
        rewind(run_dir, algo.iteration)
        print(f"volley: resuming from {checkpoint} (iteration {algo.iteration}, "
              f"{algo.timesteps_total} env steps)")
    return algo, run_dir, saved


def _install_hooks(engine: str) -> None:
    """Under MPI, before anything can fail on one rank: a failure anywhere ends the whole job."""
    if engine == "mpi":
        from volley.engines.mpi_engine import install_rank_hooks

        install_rank_hooks()
