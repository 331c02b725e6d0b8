"""The ``volley`` command: ``volley train | tune | evaluate | presets | plot | bench``.

User mistakes (a bad flag, an unknown environment, a corrupt checkpoint) print one
line and exit with status 2; a traceback means a bug in volley.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from volley.errors import ConfigError, VolleyError, WorkerError

# What str.splitlines() breaks at, written out as escapes so an error stays on one line
_ESCAPED_BREAKS = {ord(c): c.encode("unicode_escape").decode()
                   for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """A message with its line breaks escaped (``\\n``): a user's argument may hold one."""
    return message.translate(_ESCAPED_BREAKS)


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage dump) and exit status 2."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse, but unrecognized arguments are quoted, so an empty one still shows."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(shlex.quote(a) for a in extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see '{self.prog} --help')\n")


def _count(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError(f"worker counts must be >= 0, got '{text}'")
    return counts


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw  # a bare string such as env=Pendulum-v1


def _values(text: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...``: each value parsed as in ``--set`` (commas inside [] or {} stay)."""
    key, sep, raw = text.partition("=")
    if not sep or not key or not raw:
        raise argparse.ArgumentTypeError(f"expected KEY=V1,V2,..., got '{text}'")
    parts, depth, start = [], 0, 0
    for i, char in enumerate(raw + ","):
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            parts.append(raw[start:i])
            start = i + 1
    return key, [_key_value(f"{key}={part}")[1] for part in parts]


def _add_run_flags(command: argparse.ArgumentParser, workers_default: str) -> None:
    """Flags ``volley train`` and ``volley tune`` share (defaults None where a resumed run keeps
    its own setting unless the flag is given)."""
    start = command.add_mutually_exclusive_group()
    start.add_argument("--preset", help="start from a tuned preset (`volley presets` lists them); "
                       "the flags below override its values")
    start.add_argument("--config", dest="config_file", metavar="FILE.yaml",
                       help="start from a preset file of your own (the form of volley/tuned/*.yaml, or "
                       "an RLlib tuned example: `rllib train file FILE`)")
    command.add_argument("--framework", choices=["torch"],
                         help="RLlib's flag: run a file written for TensorFlow on torch (volley's only one)")
    command.add_argument("--algo", help="algorithm (default: ppo)")
    command.add_argument("--env", help="Gymnasium id or registered name (default: CartPole-v1)")
    command.add_argument("--workers", type=_count(0), help=f"rollout workers (default: {workers_default}; "
                         "0 samples in this process)")
    command.add_argument("--envs-per-worker", type=_count(1), help="environments per worker")
    command.add_argument("--seed", type=int, help="random seed (default: 0)")
    command.add_argument("--stop-reward", type=float,
                         help="stop at this 100-episode mean return (default: the env's reward_threshold)")
    command.add_argument("--max-iters", type=_count(1), help="stop after this many iterations")
    command.add_argument("--max-timesteps", type=_count(1), help="stop after this many env steps")
    command.add_argument("--max-time", type=_count(1), metavar="SECONDS",
                         help="stop after this many seconds of training")
    command.add_argument("--eval-every", type=_count(1), metavar="N",
                         help="evaluate every N iterations (evaluation_interval; episodes: "
                         "--set evaluation_duration=K)")
    command.add_argument("--logdir", help="parent of the run directory (default: runs)")
    command.add_argument("--checkpoint-freq", type=_count(0),
                         help="checkpoint every N iterations, and always at the end (default: 10)")
    command.add_argument("--address", help="join this Ray cluster ('auto', 'host:port')")
    command.add_argument("--num-cpus", type=_count(1), help="CPUs for an embedded Ray cluster")
    command.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[],
                         metavar="KEY=VALUE", help="any config key, e.g. --set lr=1e-3 (repeatable)")
    _add_import_flag(command)


def _add_import_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                         help="import this module first (from the current directory or installed; "
                         "repeatable): one that registers environments or custom models, or defines "
                         "the classes a checkpoint names")


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="volley", description="Train RL agents with parallel rollout workers.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train an agent until a stop criterion")
    _add_run_flags(train, "CPU count")
    train.add_argument("--resume", metavar="RUN_DIR",
                       help="continue that run from its newest checkpoint, in the same directory "
                       "(its config, stop criteria and checkpoint settings unless given here)")
    train.add_argument("--name", help="run directory name under --logdir (default: algo_env_time)")
    train.add_argument("--keep-checkpoints", type=_count(1),
                       help="keep the newest N checkpoints of the run (default: 5)")
    train.add_argument("--engine", choices=["ray", "local", "mpi"],
                       help="where workers run (default: ray; mpi: one worker per rank)")
    train.add_argument("--nprocs", type=_count(1),
                       help="with --engine mpi: start this many ranks under mpiexec")
    train.add_argument("--no-tensorboard", action="store_true", help="skip TensorBoard event files")

    sweep = commands.add_parser("tune", help="a hyperparameter sweep on Ray Tune, trials in parallel")
    _add_run_flags(sweep, "0 per trial")
    sweep.add_argument("--grid", type=_values, action="append", default=[], metavar="KEY=V1,V2",
                       help="grid-search a config key over these values (repeatable)")
    sweep.add_argument("--uniform", type=_values, action="append", default=[], metavar="KEY=LO,HI",
                       help="sample a config key uniformly in [LO, HI] (repeatable)")
    sweep.add_argument("--loguniform", type=_values, action="append", default=[], metavar="KEY=LO,HI",
                       help="sample a config key log-uniformly in [LO, HI] (repeatable)")
    sweep.add_argument("--samples", type=_count(1), default=1,
                       help="repeat the grid this many times, drawing the random keys anew (default: 1)")
    sweep.add_argument("--asha", action="store_true",
                       help="stop poor trials early with Tune's ASHA scheduler (needs --max-iters)")
    sweep.add_argument("--name", help="experiment directory under --logdir (default: algo_env_time)")

    bench = commands.add_parser("bench", help="measurements")
    bench_kinds = bench.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    speed = bench_kinds.add_parser("speedup", help="the first iterations with each worker count")
    speed.add_argument("--algo", default="ppo", help="algorithm (default: ppo)")
    speed.add_argument("--env", default="CartPole-v1", help="Gymnasium id")
    speed.add_argument("--iters", type=_count(1), default=10, help="iterations per count (default: 10)")
    speed.add_argument("--warmup", type=_count(0), default=1,
                       help="untimed iterations before the timed ones (default: 1)")
    speed.add_argument("--workers", type=_counts, default=[0, 1, 2],
                       help="comma-separated worker counts, 0 = in-process (default: 0,1,2)")
    speed.add_argument("--mpi", type=_counts, default=[], metavar="RANKS",
                       help="also measure the MPI engine with these rank counts, e.g. 1,2")
    speed.add_argument("--num-cpus", type=_count(1), help="CPUs for the embedded Ray cluster")
    speed.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[],
                       metavar="KEY=VALUE", help="any config key (repeatable)")

    sampler = bench_kinds.add_parser("sampler", help="one worker's sampling against the raw environment")
    sampler.add_argument("--env", action="append", metavar="ENV",
                         help="only this environment (repeatable; default: CartPole x16, Pong RAM, "
                         "Pong pixels, HalfCheetah, Humanoid)")
    sampler.add_argument("--seconds", type=float, default=5.0, help="time per measurement (default: 5)")
    sampler.add_argument("--rounds", type=_count(1), default=1,
                         help="measure an environment's rows' sampling in turns, this many times each, and "
                         "keep each row's median (default: 1)")
    sampler.add_argument("--custom-model", action="store_true",
                         help="each vector environment also with RLlib's FullyConnectedNetwork as a custom "
                         "model (the built-in MLP's layers, traced into numpy), in the row below its own")
    sampler.add_argument("--lstm", action="store_true",
                         help="each vector environment also with an LSTM of 64 cells on its 64x64 MLP "
                         "(use_lstm), in the row below its own; by default CartPole with 1 and 16 envs")

    commands.add_parser("presets", help="the tuned presets and the results measured with them")

    evaluate = commands.add_parser("evaluate", help="play episodes with a checkpoint's policy")
    evaluate.add_argument("checkpoint", help="checkpoint directory (a run's 'checkpoint' link works)")
    evaluate.add_argument("--episodes", type=_count(1), default=10, help="episodes (default: 10)")
    evaluate.add_argument("--video", metavar="PATH",
                          help="also write the episodes as a video (.mp4 or .gif)")
    _add_import_flag(evaluate)

    plot = commands.add_parser("plot", help="learning curves of runs (progress.jsonl) as an image")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run or Tune trial directories")
    plot.add_argument("-o", "--output", default="curves.png", help="image file (default: curves.png)")
    return parser


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
    algo, run_dir, saved = _resume(args, overrides) if args.resume is not None else _start(args, overrides)
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
    print(f"volley: stopped ({outcome.reason}) at iteration {algo.iteration}, "
          f"{algo.timesteps_total} env steps, {outcome.wall_time_s:.1f} s")
    print(f"volley: checkpoint {outcome.checkpoint}")
    # a run stopped by a signal exits as shells expect (130 for Ctrl-C, 143 for SIGTERM)
    return 128 + outcome.signal if outcome.signal else 0


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
    algo = trained.from_checkpoint(checkpoint, **overrides)
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
                        checkpoint_freq=_first(args.checkpoint_freq, 10),
                        scheduler=scheduler)
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
    from volley.presets import presets_table

    print(presets_table())
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
    from volley.algorithms import Algorithm
    from volley.video import FrameRecorder, check_video_path, write_video

    video = check_video_path(args.video) if args.video else None
    algo = Algorithm.from_checkpoint(args.checkpoint, to_play=True)
    try:
        recorder = FrameRecorder(algo.driver_worker(), algo.config.env) if video else None
        stats = algo.evaluate(args.episodes, before_step=recorder)
    finally:
        algo.stop()
    print(f"volley: {stats['episodes_this_iter']} episodes of {algo.config.env}: return "
          f"{stats['episode_reward_mean']:.2f} +/- {stats['episode_reward_std']:.2f}, "
          f"length {stats['episode_len_mean']:.1f}")
    if recorder is not None and video is not None:
        if recorder.failure is not None:
            print(f"volley evaluate: cannot render {algo.config.env} ({recorder.failure}); "
                  "no video written", file=sys.stderr)
        else:
            write_video(recorder.frames, video, recorder.fps)
            print(f"volley: video of {len(recorder.frames)} frames written to {video}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    try:
        if getattr(args, "address", None) is not None:
            use_cluster_auth_token()  # before anything imports Ray
        import_user_modules(getattr(args, "imports", []))
        commands = {"train": _train, "tune": _tune, "bench": _bench, "evaluate": _evaluate,
                    "presets": _presets, "plot": _plot}
        return commands[args.command](args)
    except VolleyError as exc:
        if _mpi_rank() != 0 and sys.excepthook is not sys.__excepthook__ and not isinstance(exc, ConfigError):
            raise  # this rank's own failure once the MPI job is up: its hook names it and aborts all
        if _mpi_rank() == 0:  # every rank hits the same mistake (a config is the same on all); say it once
            print(f"volley {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C while the final checkpoint was being written
        print(f"volley {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        from volley.engines import ray_boot

        ray_boot.abandon()  # a cluster `volley train` began for a run that failed before taking it


def _mpi_rank() -> int:
    """This process's rank under mpiexec (MPICH or Open MPI), 0 elsewhere, without importing MPI."""
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


if __name__ == "__main__":
    raise SystemExit(main())
