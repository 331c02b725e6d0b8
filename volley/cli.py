"""The ``volley`` command: ``volley train | tune | evaluate | presets | plot | bench``.

User mistakes (a bad flag, an unknown environment, a corrupt checkpoint) print one
line and exit with status 2; a traceback means a bug in volley. The arguments are
``volley.arguments``'s; this module runs the commands.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from volley.arguments import build_parser, one_line, say
from volley.errors import ConfigError, VolleyError, WorkerError

STARTED = time.monotonic()  # the stop line counts start-up (imports, Ray, workers) from here


def import_user_modules(modules: list[str]) -> None:
    """``--import``: the user's modules, imported as ``python -m`` would find them. volley itself
    never imports what a config or checkpoint names; the user asks for it here."""
    import importlib

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ConfigError(f"--import {module}: {exc}") from None
        except Exception as exc:  # the user's module failed: one line, as for an environment's creator
            raise ConfigError(f"--import {module} failed: {type(exc).__name__}: {exc}") from None


def use_cluster_auth_token() -> None:
    """Send this machine's Ray token when joining a cluster, as ``ray start`` expects.

    ``ray start --head`` turns token authentication on when a token exists, but a
    driver joining by address sends it only with ``RAY_AUTH_MODE=token``, which Ray
    reads when it is first imported (ray-project/ray#64755). So ``volley train
    --address`` sets it before importing Ray, unless RAY_AUTH_MODE is already set.
    """
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", str(Path.home() / ".ray" / "auth_token"))
    has_token = "RAY_AUTH_TOKEN" in os.environ or Path(token_path).is_file()
    if has_token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"


def _resumed_run(run_dir: Path) -> tuple[str | None, int | None]:
    """The engine a run to resume was started on, and its MPI ranks (from its params.json)."""
    from volley.run import PARAMS, run_settings

    try:
        engine = json.loads((run_dir / PARAMS).read_text())["config"].get("engine")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, None  # no or a damaged params.json: _resume reports what is wrong
    return engine, run_settings(run_dir).get("nprocs")


def _train(args: argparse.Namespace) -> int:
    preset = _preset(args)
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
    overrides = _overrides(args, engine=args.engine, num_workers=args.workers)
    if not args.wandb or _mpi_rank() != 0:  # under MPI, rank 0 trains and logs; the others serve it
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
        stop = _stop(args, saved.get("stop", {}))
        config = algo.config
        print(f"volley: {type(algo).__name__} on {config.env}, engine {config.engine}, "
              f"{algo.workers.plan.num_workers} worker(s) x {algo.workers.plan.num_envs_per_worker} envs, "
              f"seed {config.seed}")
        print(f"volley: run directory {run_dir}")
        if not stop.is_set:
            print("volley: no stop criterion: training until Ctrl-C")
        outcome = train_until(
            algo, stop, run_dir, tensorboard=not args.no_tensorboard,
            checkpoint_freq=_first(args.checkpoint_freq, saved.get("checkpoint_freq"), 10),
            keep_checkpoints=_first(args.keep_checkpoints, saved.get("keep_checkpoints"), 5))
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


def _preset(args: argparse.Namespace) -> Any:
    """The preset ``--preset`` or ``--config`` names, or None."""
    if getattr(args, "preset", None) is None and getattr(args, "config_file", None) is None:
        return None
    from volley.presets import load_file, load_preset

    if args.preset is not None:
        return load_preset(args.preset)
    return load_file(args.config_file, overrides=_overrides(args, engine=getattr(args, "engine", None),
                                                            num_workers=args.workers))


def _overrides(args: argparse.Namespace, **flags: Any) -> dict[str, Any]:
    """Config keys given by the run flags, then by ``--set`` (which wins)."""
    flags |= {"num_envs_per_worker": args.envs_per_worker, "seed": args.seed, "framework": args.framework,
              "ray_address": args.address, "num_cpus": args.num_cpus,
              "evaluation_interval": args.eval_every}
    return {k: v for k, v in flags.items() if v is not None} | dict(args.overrides)


def _env_id(args: argparse.Namespace, preset: Any, overrides: dict[str, Any]) -> str:
    """The run's environment id, checked (a typo is named before anything heavy is imported):
    ``--set env=``, else ``--env``, else the preset's, else CartPole-v1."""
    from volley.envs import check_env_id

    env = str(overrides.get("env", args.env or (preset.env if preset is not None else "CartPole-v1")))
    check_env_id(env)
    return env


def _new_config(args: argparse.Namespace, overrides: dict[str, Any], preset: Any, env: str) -> Any:
    """A new run's config: ``preset`` (``--preset``/``--config``) if given, else ``--algo``
    (default PPO); then ``env`` (from :func:`_env_id`) and the flags."""
    from volley.algorithms import get_algorithm_class, get_config_class

    if preset is None:
        return get_config_class(args.algo or "ppo")().update(**{**overrides, "env": env})
    if args.algo is not None and get_algorithm_class(args.algo) is not get_algorithm_class(preset.algo):
        raise ConfigError(f"--algo {args.algo} but preset '{preset.name}' trains {preset.algo}")
    return preset.make_config({**overrides, "env": env})


def _stop(args: argparse.Namespace, saved: dict[str, Any]) -> Any:
    """Stop criteria: the flags given, else ``saved`` (a resumed run's, or the env's threshold)."""
    from volley.run import Stop

    stop = Stop(**saved)
    for key, value in {"reward": args.stop_reward, "iterations": args.max_iters,
                       "timesteps": args.max_timesteps, "time_s": args.max_time}.items():
        if value is not None:
            setattr(stop, key, value)
    return stop


def _reward_threshold(env: str) -> float | None:
    """The env's registered ``reward_threshold`` (CartPole-v1: 475), the default stop reward."""
    import gymnasium as gym

    return gym.registry[env].reward_threshold if env in gym.registry else None


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _start(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Path, dict[str, Any]]:
    """A new run: build the algorithm; the stop reward defaults to the env's reward_threshold."""
    from volley.engines import ray_boot

    preset = _preset(args)
    logdir = args.logdir or "runs"
    try:  # before the workers start, so a bad path costs nothing
        Path(logdir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--logdir '{logdir}' cannot be created: {exc.strerror or exc}") from None
    if args.name is not None and (Path(logdir) / args.name).exists():
        raise ConfigError(f"run directory '{Path(logdir) / args.name}' exists already; choose another "
                          f"--name, or continue it with --resume {Path(logdir) / args.name}")
    env = _env_id(args, preset, overrides)
    settings = {**(preset.config if preset is not None else {}), **overrides}
    if (settings.get("engine", "ray") == "ray" and settings.get("ray_address") is None
            and not os.environ.get("RAY_ADDRESS") and str(settings.get("num_workers")) != "0"):
        # Ray's cluster starts while torch and the algorithm load; after a mistake found from
        # here on, main() shuts it down once the error is shown (the env id is checked first)
        ray_boot.begin(settings)
    config = _new_config(args, overrides, preset, env)
    if args.wandb:
        from volley.tracking import tracked_callbacks

        config.update(**tracked_callbacks(config.callbacks_class, True))
    _install_hooks(config.engine)
    algo = config.build()
    ray_boot.abandon()  # begun for a run whose config turned out to want no cluster
    from volley.run import run_dir_name

    stop = dict(preset.stop) if preset is not None else {"reward": _reward_threshold(config.env)}
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


def _tune(args: argparse.Namespace) -> int:
    workers = args.workers if args.workers is not None else 0
    overrides = _overrides(args, num_workers=workers)
    preset = _preset(args)
    config = _new_config(args, overrides, preset, _env_id(args, preset, overrides))
    stop = _stop(args, dict(preset.stop) if preset is not None else {"reward": _reward_threshold(config.env)})
    if not stop.is_set:
        raise ConfigError("volley tune needs a stop criterion: --stop-reward, --max-iters or "
                          "--max-timesteps (the env has no reward_threshold)")
    if args.asha and args.max_iters is None:
        raise ConfigError("--asha needs --max-iters (the longest a trial may run)")
    from ray.tune.schedulers import ASHAScheduler

    from volley.engines.ray_engine import init_ray, shutdown_ray
    from volley.tracking import tune_callback
    from volley.tune import METRIC, search_space, sweep

    space = search_space(type(config), args.grid, args.uniform, args.loguniform)
    if not space:
        raise ConfigError("nothing to search: give --grid KEY=V1,V2 (or --uniform/--loguniform)")
    name = args.name or f"{config.algo_name}_{config.env.replace('/', '-')}_{time.strftime('%Y%m%d-%H%M%S')}"
    started = init_ray(config)
    try:
        scheduler = ASHAScheduler(max_t=args.max_iters) if args.asha else None
        results = sweep(config, space, samples=args.samples, stop=stop,
                        storage=Path(args.logdir or "runs"), name=name,
                        checkpoint_freq=_first(args.checkpoint_freq, 10), scheduler=scheduler,
                        callbacks=[tune_callback(args.wandb_project)] if args.wandb else None)
    finally:
        if started:
            shutdown_ray()
    trials = [results[i] for i in range(len(results))]
    finished = [r for r in trials if r.metrics and r.error is None]
    for failed in (r for r in trials if r.error is not None):
        print(f"volley: trial {failed.path} failed: {str(failed.error).strip().splitlines()[-1]}")
    if not finished:
        raise WorkerError(f"all {len(results)} trials failed")
    best = max(finished, key=lambda r: _finite((r.metrics or {})[METRIC]))
    metrics, params = best.metrics or {}, best.config or {}
    chosen = ", ".join(f"{key}={params[key]!r}" for key in space)
    print(f"volley: {len(finished)} of {len(trials)} trials finished; best "
          f"{METRIC} {metrics[METRIC]:.2f} with {chosen}")
    print(f"volley: best trial {best.path}")
    if best.checkpoint is not None:
        print(f"volley: best checkpoint {best.checkpoint.path}")
    return 0


def _finite(value: float) -> float:
    return value if value == value else -float("inf")  # NaN: no episode ended yet


def _presets(args: argparse.Namespace) -> int:
    from volley.presets import presets_markdown, presets_table

    print(presets_markdown() if args.markdown else presets_table())
    print("\nvolley train --preset NAME runs one (flags override its values); see benchmarks/RESULTS.md")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from volley.plot import save_plot

    print(f"volley: {len(args.run_dirs)} run(s) plotted to {save_plot(args.run_dirs, args.output)}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from volley.algorithms import get_config_class
    from volley.bench import SAMPLER_CASES, measure_samplers, sampler_table, speedup, table
    from volley.envs import check_env_id

    if args.bench == "sampler":
        cases = [case for case in SAMPLER_CASES if args.env is None or case[0] in args.env]
        if args.lstm and args.env is None:  # a recurrent policy's cost over one env and over a vector
            cases = [("CartPole-v1", 1, {}), ("CartPole-v1", 16, {})]
        for env in args.env or []:
            check_env_id(env)
            if env not in [case[0] for case in SAMPLER_CASES]:
                cases.append((env, 1, {}))
        variants = [name for name, asked in (("custom model", args.custom_model), ("LSTM 64", args.lstm)) if asked]
        rows = []
        for env, n, keys in cases:
            pixels = env.startswith("ALE/") and "-ram" not in env  # the CNN: no MLP to copy
            rows += measure_samplers(env, n, keys, args.seconds, [] if pixels else variants, args.rounds)
        print(sampler_table(rows))
        return 0

    overrides = dict(args.overrides)
    get_config_class(args.algo)().environment(args.env).update(**overrides).validate()
    check_env_id(args.env)
    print(f"volley: {args.algo} on {args.env}, {args.iters} iterations per worker count "
          f"after {args.warmup} untimed")
    print(table(speedup(args.algo, args.env, args.iters, args.workers, overrides, args.num_cpus, args.warmup,
                        args.mpi)))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from volley.checkpoint import read_checkpoint
    from volley.tracking import tracked_callbacks
    from volley.video import check_video_path

    video = check_video_path(args.video) if args.video else None
    _, manifest = read_checkpoint(args.checkpoint)
    tracking = tracked_callbacks(manifest["config"].get("callbacks_class"), args.wandb)
    if not args.wandb:
        return _play(args, video, tracking)
    from volley.tracking import wandb_run

    with wandb_run(args.wandb_project, "evaluate") as tracker:
        return _play(args, video, tracking, tracker)


def _play(args: argparse.Namespace, video: Path | None, tracking: dict[str, Any], tracker: Any = None) -> int:
    """``volley evaluate``'s episodes, logged to ``tracker`` (a W&B run) if given."""
    from volley.algorithm import Algorithm
    from volley.video import FrameRecorder, write_video

    algo = Algorithm.from_checkpoint(args.checkpoint, to_play=True, **tracking)
    try:
        recorder = FrameRecorder(algo.driver_worker(), algo.config.env) if video else None
        stats = algo.evaluate(args.episodes, before_step=recorder)
    finally:
        algo.stop()
    print(f"volley: {stats['episodes_this_iter']} episodes of {algo.config.env}: return "
          f"{stats['episode_reward_mean']:.2f} +/- {stats['episode_reward_std']:.2f}, "
          f"length {stats['episode_len_mean']:.1f}")
    written = None
    if recorder is not None and video is not None:
        if recorder.failure is not None:
            print(f"volley evaluate: cannot render {algo.config.env} ({recorder.failure}); "
                  "no video written", file=sys.stderr)
        else:
            write_video(recorder.frames, video, recorder.fps)
            print(f"volley: video of {len(recorder.frames)} frames written to {video}")
            written = video
    if tracker is not None:
        from volley.tracking import log_evaluation

        log_evaluation(tracker, stats, algo.timesteps_total, written)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    try:
        if getattr(args, "address", None) is not None:
            use_cluster_auth_token()  # before anything imports Ray
        import_user_modules(getattr(args, "imports", []))
        import volley.multi_agent_env  # noqa: F401 (registers volley's own multi-agent names: MultiAgentCartPole)
        commands = {"train": _train, "tune": _tune, "bench": _bench, "evaluate": _evaluate,
                    "presets": _presets, "plot": _plot}
        return commands[args.command](args)
    except VolleyError as exc:
        if _mpi_rank() != 0 and sys.excepthook is not sys.__excepthook__ and not isinstance(exc, ConfigError):
            raise  # this rank's own failure once the MPI job is up: its hook names it and aborts all
        if _mpi_rank() == 0:  # every rank hits the same mistake (a config is the same on all); say it once
            say(f"volley {args.command}: error: {one_line(str(exc))}\n", sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C while the final checkpoint was being written
        print(f"volley {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`volley presets | head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush stays quiet
        return 141  # what a shell reports for a command ended by SIGPIPE
    finally:
        from volley.engines import ray_boot

        ray_boot.abandon()  # a cluster `volley train` began for a run that failed before taking it


def _mpi_rank() -> int:
    """This process's rank under mpiexec (MPICH or Open MPI), 0 elsewhere, without importing MPI."""
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


if __name__ == "__main__":
    raise SystemExit(main())
