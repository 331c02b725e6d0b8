"""The MPI engine: one rollout worker per rank under ``mpiexec``; rank 0 is the learner.

Every rank runs the same program and builds its own worker, whose environments are
seeded ``seed + global env index`` (rank ``r`` holds envs ``r·N … r·N + N − 1``), so
ranks never replay each other's episodes. Two ways of sharing work:

- **gather** (default, every batch algorithm): ranks other than 0 never return from
  ``build()``; they serve rank 0's calls until it stops, then exit. Rank 0 broadcasts
  each call (the weight vector with ``Bcast``, the few small arguments pickled), runs
  it on its own worker too, and gathers the results: batches column by column with
  ``Gatherv`` on numpy buffers, episode statistics and filter deltas as small objects.
- **allreduce** (PPO and PG): every rank builds the whole algorithm and trains a
  replica on its own data; gradients are averaged with ``Allreduce`` before every
  optimizer step, episode statistics and filter deltas are exchanged every iteration,
  so the replicas stay identical. Rank 0 tells the others when to run an iteration.

Only rank 0 prints, logs and writes checkpoints. An exception on any rank prints one
line naming the rank and aborts the whole job (``MPI.COMM_WORLD.Abort``) rather than
leaving the other ranks waiting in a collective forever.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from volley.config import AlgorithmConfig
from volley.engines.base import WorkerGroup
from volley.envs import EnvCreator
from volley.errors import ConfigError
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats, RunningStats
from volley.rollout.worker import Postprocess, RolloutWorker, SampleResult

if TYPE_CHECKING:
    from volley.algorithm import Algorithm

STOP, CALL, TRAIN, WEIGHTS = "stop", "call", "train", "weights"


def _comm() -> Any:
    try:
        from mpi4py import MPI
    except ImportError:
        raise ConfigError("engine 'mpi' needs mpi4py: pip install 'volley-rl[mpi]'") from None
    return MPI.COMM_WORLD


def mpiexec_path() -> str:
    """``mpiexec`` from this Python's environment (the mpich wheel puts it there) or the PATH."""
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    found = shutil.which("mpiexec", path=search)
    if found is None:
        raise ConfigError("mpiexec not found: pip install 'volley-rl[mpi]' (mpi4py and mpich)")
    return found


def run_under_mpiexec(nprocs: int, command: list[str]) -> int:
    """Run ``command`` as ``mpiexec -n nprocs command`` and return its exit status."""
    return subprocess.call([mpiexec_path(), "-n", str(nprocs), *command])


def world_size() -> int:
    """Ranks in this MPI job (1 when not started by ``mpiexec``)."""
    return int(_comm().Get_size())


class _ArrayArg:
    """Stands in for an array argument that travels by ``Bcast`` instead of pickle."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype


def _abort_on_error(comm: Any, rank: int) -> None:
    """Make an unhandled exception on this rank end the whole job, naming the rank."""
    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            comm.Abort(130)
        detail = "".join(traceback.format_exception(kind, error, tb)[-3:]) if rank != 0 else ""
        print(f"volley: rank {rank} failed: {kind.__name__}: {error}\n{detail}".rstrip(),
              file=sys.stderr, flush=True)
        comm.Abort(1)
    sys.excepthook = hook


def _prefix_warnings(rank: int) -> None:
    show = warnings.showwarning

    def shown(message: Warning | str, *args: Any, **kwargs: Any) -> None:
        show(f"[rank {rank}] {message}", *args, **kwargs)
    warnings.showwarning = shown


class MPIWorkerGroup(WorkerGroup):
    """This rank's worker, and (on rank 0) the collectives that reach all the others."""

    def __init__(self, config: AlgorithmConfig, postprocess: Postprocess,
                 env_creator: EnvCreator | None) -> None:
        self.comm = _comm()
        self.rank, self.num_workers = int(self.comm.Get_rank()), int(self.comm.Get_size())
        if config.num_workers not in ("auto", self.num_workers):
            raise ConfigError(f"num_workers={config.num_workers} but mpiexec started "
                              f"{self.num_workers} rank(s): under the MPI engine each rank is one "
                              "worker; leave num_workers unset or change mpiexec -n")
        self.mode = config.mpi_mode
        self.running = True
        # one torch thread per rank: the ranks already fill the cores (and waiting MPICH ranks
        # spin), so more threads only fight over them; it also makes sampling match the local engine
        torch.set_num_threads(1)
        if self.num_workers > 1:
            _abort_on_error(self.comm, self.rank)
            if self.rank == 0:
                atexit.register(self._abort_if_running)
            else:
                _prefix_warnings(self.rank)
        self.worker = RolloutWorker(config, self.rank, postprocess, env_creator)
        if self.mode == "gather" and self.rank != 0:
            self._serve_calls()

    # -- rank 0 ------------------------------------------------------------------------------

    def call(self, method: str, *args: Any) -> list[Any]:
        if self.mode == "allreduce":  # every rank calls its own worker; statistics are pooled
            result = getattr(self.worker, method)(*args)
            if isinstance(result, SampleResult):
                self._pool(result)
            elif isinstance(result, tuple) and isinstance(result[-1], SampleResult):
                self._pool(result[-1])
            return [result]
        self._broadcast(CALL, method, args)
        return self._gather(getattr(self.worker, method)(*args))

    def begin_iteration(self) -> None:
        if self.mode == "allreduce" and self.rank == 0:
            self.comm.bcast((TRAIN,), root=0)

    def average_gradients(self, parameters: list[torch.Tensor]) -> None:
        """Replace every gradient by its mean over the ranks (allreduce mode), in one Allreduce."""
        if self.mode != "allreduce" or self.num_workers == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = self.average_over_replicas(torch.cat([g.reshape(-1) for g in grads]).numpy())
        offset = 0
        for param in parameters:
            param.grad = torch.as_tensor(flat[offset:offset + param.numel()], dtype=param.dtype
                                         ).view_as(param).clone()
            offset += param.numel()

    def average_over_replicas(self, values: np.ndarray) -> np.ndarray:
        """``values`` averaged over the ranks in float64 (allreduce mode; elsewhere as they are)."""
        if self.mode != "allreduce" or self.num_workers == 1:
            return values
        from mpi4py import MPI

        total = np.array(values, np.float64)  # a copy: the Allreduce works in place
        self.comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        return total / self.num_workers

    def replica_weights(self, weights: np.ndarray) -> list[np.ndarray]:
        """Every rank's flat weight vector, rank order (allreduce mode: to check they agree)."""
        if self.mode == "allreduce" and self.num_workers > 1:
            self.comm.bcast((WEIGHTS,), root=0)
            return list(self.comm.gather(weights, root=0))
        return [weights]

    def stop(self) -> None:
        if self.running and self.rank == 0 and self.num_workers > 1:
            if self.mode == "allreduce":
                self.comm.bcast((STOP,), root=0)
            else:
                self._broadcast(STOP, "", ())
        self.running = False
        self.worker.env.close()

    def _abort_if_running(self) -> None:
        if self.running:  # rank 0 is exiting without stop(): do not leave the others waiting
            print("volley: rank 0 exited without stopping its workers; aborting the job",
                  file=sys.stderr, flush=True)
            self.comm.Abort(1)

    # -- the other ranks -------------------------------------------------------------------------

    def serve(self, algo: Algorithm) -> None:
        """Ranks other than 0 in allreduce mode: run iterations in step with rank 0, then exit."""
        if self.mode != "allreduce" or self.rank == 0:
            return
        while (command := self.comm.bcast(None, root=0)[0]) != STOP:
            if command == TRAIN:
                algo.train()
            else:
                self.comm.gather(algo.policy.get_flat_weights(), root=0)
        self.worker.env.close()
        sys.exit(0)

    def _serve_calls(self) -> None:
        """Ranks other than 0 in gather mode: run rank 0's calls on this worker, then exit."""
        while True:
            command, method, args = self._receive()
            if command == STOP:
                break
            self._gather(getattr(self.worker, method)(*args))
        self.worker.env.close()
        sys.exit(0)

    # -- messages ------------------------------------------------------------------------------

    def _broadcast(self, command: str, method: str, args: tuple) -> None:
        arrays = [np.ascontiguousarray(a) for a in args if isinstance(a, np.ndarray)]
        header = [_ArrayArg(a.shape, a.dtype.str) if isinstance(a, np.ndarray) else a for a in args]
        self.comm.bcast((command, method, header), root=0)
        for array in arrays:
            self.comm.Bcast(array, root=0)

    def _receive(self) -> tuple[str, str, list]:
        command, method, header = self.comm.bcast(None, root=0)
        args = []
        for arg in header:
            if isinstance(arg, _ArrayArg):
                arg_array = np.empty(arg.shape, np.dtype(arg.dtype))
                self.comm.Bcast(arg_array, root=0)
                args.append(arg_array)
            else:
                args.append(arg)
        return command, method, args

    def _gather(self, result: Any) -> list[Any]:
        """Every rank's result at rank 0; a SampleResult's batch travels by ``Gatherv``."""
        if not isinstance(result, SampleResult):
            return list(self.comm.gather(result, root=0) or [])
        batch, result.batch = result.batch, Batch()
        results = self.comm.gather(result, root=0)
        batches = gather_batches(self.comm, batch)
        for each, each_batch in zip(results or [], batches, strict=False):
            each.batch = each_batch
        return list(results or [])

    def _pool(self, result: SampleResult) -> None:
        """Allreduce mode: every rank gets all ranks' episodes, steps and filter statistics
        (so replicas normalise alike and rank 0 reports the whole job), and batches are cut
        to the shortest rank's length so every rank takes the same number of SGD steps."""
        from mpi4py import MPI

        everyone = self.comm.allgather((result.episode_returns, result.episode_lengths,
                                        result.filter_delta, result.env_steps, result.env_errors))
        result.episode_returns = np.concatenate([e[0] for e in everyone])
        result.episode_lengths = np.concatenate([e[1] for e in everyone])
        result.env_steps = sum(e[3] for e in everyone)
        result.env_errors = sum(e[4] for e in everyone)
        if result.filter_delta is not None:
            merged = FilterStats(*(None if stats is None else RunningStats(stats.shape)
                                   for stats in (result.filter_delta.obs, result.filter_delta.reward)))
            for each in everyone:
                merged.merge(each[2])
            result.filter_delta = merged
        shortest = self.comm.allreduce(len(result.batch), op=MPI.MIN)
        if len(result.batch) > shortest:
            result.batch = result.batch.slice(slice(0, shortest))


def gather_batches(comm: Any, batch: Batch) -> list[Batch]:
    """Each rank's batch at rank 0 (``[]`` elsewhere), column by column with ``Gatherv``.

    Columns travel as raw bytes: no pickling, one message per column, and any dtype.
    """
    rank = comm.Get_rank()
    rows = comm.gather(len(batch), root=0)
    gathered: dict[str, list[np.ndarray]] = {}
    for key in sorted(batch):
        local = np.ascontiguousarray(batch[key])
        row_bytes = local[:1].nbytes if len(local) else int(np.prod(local.shape[1:])) * local.itemsize
        if rank == 0:
            counts = [n * row_bytes for n in rows]
            received = np.empty(sum(counts), np.uint8)
            comm.Gatherv(local.view(np.uint8).reshape(-1), [received, counts], root=0)
            pieces = np.split(received, np.cumsum(counts)[:-1])
            gathered[key] = [p.view(local.dtype).reshape(-1, *local.shape[1:]) for p in pieces]
        else:
            comm.Gatherv(local.view(np.uint8).reshape(-1), None, root=0)
    if rank != 0:
        return []
    return [Batch({key: gathered[key][r] for key in gathered}) for r in range(len(rows))]
