"""The ``volley`` command's arguments: the parser, its flag types, and errors of one line.

argparse's own errors become one line naming the value (exit status 2, no usage dump), and
whatever is printed escapes what the stream cannot encode.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from typing import Any, NoReturn, TextIO

from volley._version import __version__

# What str.splitlines() breaks at, written out as escapes so an error stays on one line
_ESCAPED_BREAKS = {ord(c): c.encode("unicode_escape").decode()
                   for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """A message with its line breaks escaped (``\\n``): a user's argument may hold one."""
    return message.translate(_ESCAPED_BREAKS)


def say(message: str, stream: TextIO) -> None:
    """Write ``message`` to ``stream``, escaping what its encoding cannot hold (``\\ud800``): a
    user's argument may hold a lone surrogate, which a strict stream (a pipe with
    PYTHONIOENCODING=utf-8, a test's capture) would refuse with a UnicodeEncodeError."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(message.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


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

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            with contextlib.suppress(AttributeError, OSError):  # as argparse: no stream, a closed pipe
                say(message, file or sys.stderr)


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
    _add_wandb_flags(command)


def _add_wandb_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--wandb", action="store_true",
                         help="also log to Weights & Biases (pip install 'volley-rl[wandb]'; "
                         "WANDB_MODE=offline works without an account)")
    command.add_argument("--wandb-project", metavar="PROJECT", help="the W&B project (default: volley)")


def _add_import_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                         help="import this module first (from the current directory or installed; "
                         "repeatable): one that registers environments or custom models, or defines "
                         "the classes a checkpoint names")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="volley", description="Train RL agents with parallel rollout workers.")
    parser.add_argument("--version", action="version", version=f"volley {__version__}")
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

    presets = commands.add_parser("presets", help="the tuned presets and the results measured with them")
    presets.add_argument("--markdown", action="store_true", help="print a markdown table instead")

    evaluate = commands.add_parser("evaluate", help="play episodes with a checkpoint's policy")
    evaluate.add_argument("checkpoint", help="checkpoint directory (a run's 'checkpoint' link works)")
    evaluate.add_argument("--episodes", type=_count(1), default=10, help="episodes (default: 10)")
    evaluate.add_argument("--video", metavar="PATH",
                          help="also write the episodes as a video (.mp4 or .gif)")
    _add_import_flag(evaluate)
    _add_wandb_flags(evaluate)

    plot = commands.add_parser("plot", help="learning curves of runs (progress.jsonl) as an image")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run or Tune trial directories")
    plot.add_argument("-o", "--output", default="curves.png", help="image file (default: curves.png)")
    return parser
