"""The ``volley`` command: ``volley train`` and ``volley evaluate``.

User mistakes (a bad flag, an unknown environment, a corrupt checkpoint) print one
line and exit with status 2; a traceback means a bug in volley.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

from volley.errors import ConfigError, VolleyError

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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="volley", description="Train RL agents with parallel rollout workers.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train an agent until a stop criterion")
    train.add_argument("--algo", help="algorithm (default: ppo)")
    train.add_argument("--env", help="Gymnasium id or registered name (default: CartPole-v1)")
    train.add_argument("--resume", metavar="RUN_DIR",
                       help="continue that run from its newest checkpoint, in the same directory "
                       "(its config, stop criteria and checkpoint settings unless given here)")
    train.add_argument("--engine", choices=["ray", "local", "mpi"],
                       help="where workers run (default: ray; mpi: one worker per rank)")
    train.add_argument("--nprocs", type=_count(1),
                       help="with --engine mpi: start this many ranks under mpiexec")
    train.add_argument("--workers", type=_count(0), help="rollout workers (default: CPU count; "
                       "0 samples in this process)")
    train.add_argument("--envs-per-worker", type=_count(1), help="environments per worker")
    train.add_argument("--seed", type=int, help="random seed (default: 0)")
    train.add_argument("--stop-reward", type=float,
                       help="stop at this 100-episode mean return (default: the env's reward_threshold)")
    train.add_argument("--max-iters", type=_count(1), help="stop after this many iterations")
    train.add_argument("--max-timesteps", type=_count(1), help="stop after this many env steps")
    train.add_argument("--logdir", help="parent of the run directory (default: runs)")
    train.add_argument("--checkpoint-freq", type=_count(0),
                       help="checkpoint every N iterations, and always at the end (default: 10)")
    train.add_argument("--keep-checkpoints", type=_count(1),
                       help="keep the newest N checkpoints of the run (default: 5)")
    train.add_argument("--address", help="join this Ray cluster ('auto', 'host:port')")
    train.add_argument("--num-cpus", type=_count(1), help="CPUs for an embedded Ray cluster")
    train.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[],
                       metavar="KEY=VALUE", help="any config key, e.g. --set lr=1e-3 (repeatable)")
    train.add_argument("--no-tensorboard", action="store_true", help="skip TensorBoard event files")

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

    evaluate = commands.add_parser("evaluate", help="play episodes with a checkpoint's policy")
    evaluate.add_argument("checkpoint", help="checkpoint directory (a run's 'checkpoint' link works)")
    evaluate.add_argument("--episodes", type=_count(1), default=10, help="episodes (default: 10)")
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



def _train(args: argparse.Namespace) -> int:
    if args.nprocs is not None:
        if args.engine != "mpi":
            raise ConfigError(f"--nprocs {args.nprocs} needs --engine mpi, got --engine {args.engine or 'ray'}")
        from volley.engines.mpi_engine import run_under_mpiexec

        rest = [a for i, a in enumerate(args.argv) if a != "--nprocs" and not a.startswith("--nprocs=")
                and (i == 0 or args.argv[i - 1] != "--nprocs")]
        return run_under_mpiexec(args.nprocs, [sys.executable, "-m", "volley", *rest])
    if args.address is not None:
        use_cluster_auth_token()
    from volley.run import Stop, train_until

    flags = {"engine": args.engine, "num_workers": args.workers, "num_envs_per_worker": args.envs_per_worker,
             "seed": args.seed, "ray_address": args.address, "num_cpus": args.num_cpus}
    overrides = {k: v for k, v in flags.items() if v is not None} | dict(args.overrides)
    algo, run_dir, saved = _resume(args, overrides) if args.resume is not None else _start(args, overrides)
    try:
        stop = Stop(**saved.get("stop", {}))
        for key, value in {"reward": args.stop_reward, "iterations": args.max_iters,
                           "timesteps": args.max_timesteps}.items():
            if value is not None:
                setattr(stop, key, value)
        config = algo.config
        print(f"volley: {type(algo).__name__} on {config.env}, engine {config.engine}, "
              f"{config.resolved_num_workers} worker(s) x {config.num_envs_per_worker} envs, "
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


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _start(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Path, dict[str, Any]]:
    """A new run: build the algorithm; the stop reward defaults to the env's reward_threshold."""
    import gymnasium as gym

    from volley.algorithms import get_config_class
    from volley.envs import check_env_id
    from volley.run import run_dir_name

    config = get_config_class(args.algo or "ppo")()
    config.update(env=args.env or "CartPole-v1", **overrides)
    check_env_id(config.env)
    threshold = gym.registry[config.env].reward_threshold if config.env in gym.registry else None
    logdir = args.logdir or "runs"
    try:  # before the workers start, so a bad path costs nothing
        Path(logdir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--logdir '{logdir}' cannot be created: {exc.strerror or exc}") from None
    algo = config.build()
    return algo, Path(logdir) / run_dir_name(algo), {"stop": {"reward": threshold}}


def _resume(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Path, dict[str, Any]]:
    """Continue ``args.resume`` from its newest checkpoint, in the same directory."""
    from volley.algorithm import Algorithm
    from volley.algorithms import get_algorithm_class
    from volley.checkpoint import read_checkpoint
    from volley.run import latest_checkpoint, rewind, run_settings

    run_dir = Path(args.resume)
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
    if merged.get("engine") == "mpi" and merged.get("mpi_mode") == "allreduce":
        # the replicas on ranks other than 0 never return from build(), so only rank 0 would restore
        raise ConfigError("--resume with mpi_mode='allreduce' is not supported: the replicas would "
                          "not load the checkpoint; resume with --set mpi_mode=gather")
    saved = run_settings(run_dir)
    algo = Algorithm.from_checkpoint(checkpoint, **overrides)
    rewind(run_dir, algo.iteration)
    print(f"volley: resuming from {checkpoint} (iteration {algo.iteration}, "
          f"{algo.timesteps_total} env steps)")
    return algo, run_dir, saved


def _bench(args: argparse.Namespace) -> int:
    from volley.algorithms import get_config_class
    from volley.bench import speedup, table
    from volley.envs import check_env_id

    overrides = dict(args.overrides)
    get_config_class(args.algo)().environment(args.env).update(**overrides).validate()
    check_env_id(args.env)
    print(f"volley: {args.algo} on {args.env}, {args.iters} iterations per worker count "
          f"after {args.warmup} untimed")
    print(table(speedup(args.algo, args.env, args.iters, args.workers, overrides, args.num_cpus, args.warmup,
                        args.mpi)))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from volley.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(args.checkpoint, engine="local", num_workers=0)
    try:
        stats = algo.evaluate(args.episodes)
    finally:
        algo.stop()
    print(f"volley: {stats['episodes']} episodes of {algo.config.env}: return "
          f"{stats['episode_reward_mean']:.2f} +/- {stats['episode_reward_std']:.2f}, "
          f"length {stats['episode_len_mean']:.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    try:
        commands = {"train": _train, "bench": _bench, "evaluate": _evaluate}
        return commands[args.command](args)
    except VolleyError as exc:
        if _mpi_rank() == 0:  # every rank hits the same mistake; say it once
            print(f"volley {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C while the final checkpoint was being written
        print(f"volley {args.command}: interrupted", file=sys.stderr)
        return 130


def _mpi_rank() -> int:
    """This process's rank under mpiexec (MPICH or Open MPI), 0 elsewhere, without importing MPI."""
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


if __name__ == "__main__":
    raise SystemExit(main())
