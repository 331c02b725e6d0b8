"""The ``volley`` command: ``volley train | tune | evaluate | presets | plot | bench``.

User mistakes (a bad flag, an unknown environment, a corrupt checkpoint) print one
line and exit with status 2; a traceback means a bug in volley. The arguments are
``volley.arguments``'s; this module runs the commands (``volley train`` is
:mod:`volley.cli_train`'s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from volley.arguments import build_parser, one_line, say
from volley.cli_train import (
    checked_env_id,
    first_given,
    mpi_rank,
    new_config,
    overrides_of,
    preset_of,
    reward_threshold,
    stop_of,
    train,
)
from volley.errors import ConfigError, VolleyError, WorkerError


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


def _tune(args: argparse.Namespace) -> int:
    workers = args.workers if args.workers is not None else 0
    overrides = overrides_of(args, num_workers=workers)
    preset = preset_of(args)
    config = new_config(args, overrides, preset, checked_env_id(args, preset, overrides))
    stop = stop_of(args, dict(preset.stop) if preset is not None else {"reward": reward_threshold(config.env)})
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
                        checkpoint_freq=first_given(args.checkpoint_freq, 10), scheduler=scheduler,
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
    from volley.bench import (
        SAMPLER_CASES,
        measure_samplers,
        sampler_parts,
        sampler_table,
        speedup,
        table,
    )
    from volley.envs import check_env_id
    from volley.logging import ProgressBar

    if args.bench == "sampler":
        cases = [case for case in SAMPLER_CASES if args.env is None or case[0] in args.env]
        if args.lstm and args.env is None:  # a recurrent policy's cost over one env and over a vector
            cases = [("CartPole-v1", 1, {}), ("CartPole-v1", 16, {})]
        for env in args.env or []:
            check_env_id(env)
            if env not in [case[0] for case in SAMPLER_CASES]:
                cases.append((env, 1, {}))
        variants = [name for name, asked in (("custom model", args.custom_model), ("LSTM 64", args.lstm)) if asked]
        runs = [(env, n, keys, [] if env.startswith("ALE/") and "-ram" not in env else variants)
                for env, n, keys in cases]  # pixels: the CNN, no MLP to copy
        bar = ProgressBar.on_terminal(sys.stderr, sum(sampler_parts(v, args.rounds) for *_, v in runs))
        rows = []
        for env, n, keys, run_variants in runs:
            rows += measure_samplers(env, n, keys, args.seconds, run_variants, args.rounds, bar)
        if bar is not None:
            bar.clear()
        print(sampler_table(rows))
        return 0

    overrides = dict(args.overrides)
    get_config_class(args.algo)().environment(args.env).update(**overrides).validate()
    check_env_id(args.env)
    print(f"volley: {args.algo} on {args.env}, {args.iters} iterations per worker count "
          f"after {args.warmup} untimed")
    counts = len(args.workers) + len(args.mpi or [])
    bar = ProgressBar.on_terminal(sys.stderr, counts * (args.warmup + args.iters))
    measured = speedup(args.algo, args.env, args.iters, args.workers, overrides, args.num_cpus, args.warmup,
                       args.mpi, bar)
    if bar is not None:
        bar.clear()
    print(table(measured))
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
        commands = {"train": train, "tune": _tune, "bench": _bench, "evaluate": _evaluate,
                    "presets": _presets, "plot": _plot}
        return commands[args.command](args)
    except VolleyError as exc:
        if mpi_rank() != 0 and sys.excepthook is not sys.__excepthook__ and not isinstance(exc, ConfigError):
            raise  # this rank's own failure once the MPI job is up: its hook names it and aborts all
        if mpi_rank() == 0:  # every rank hits the same mistake (a config is the same on all); say it once
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


if __name__ == "__main__":
    raise SystemExit(main())
