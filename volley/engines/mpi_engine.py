"""The MPI engine: one rollout worker per rank under ``mpiexec``; rank 0 is the learner.

Every rank runs the same program and builds its own worker, whose environments are
seeded ``seed + global env index`` (rank ``r`` holds envs ``r·N … r·N + N − 1``), so
ranks never replay each other's episodes. Two ways of sharing work:

- **gather** (default, every batch algorithm, :class:`GatherGroup`): rank 0 broadcasts
  each call (the weight vector with ``Bcast``, the few small arguments pickled), runs
  it on its own worker too, and gathers the results: batches column by column with
  ``Gatherv`` on numpy buffers, episode statistics and filter deltas as small objects.
- **allreduce** (PPO and PG, :class:`AllreduceGroup`): every rank trains a replica of
  the whole algorithm on its own data; gradients are averaged with ``Allreduce`` before
  every optimizer step, episode statistics and filter deltas are exchanged every
  iteration, so the replicas stay identical. Rank 0 tells the others when to run one.

Every rank builds the algorithm, and ``build()`` returns on every rank. Rank 0 (the
driver) trains; the other ranks call ``serve_forever()``, which serves rank 0 (or trains
in step with it) until rank 0 calls ``stop()``, then returns. ``volley.run.train_until``
and ``volley train`` do this themselves.

Only rank 0 prints, logs and writes checkpoints. :func:`install_rank_hooks`, called by
the entry point, makes an exception on any rank print one line naming the rank and
abort the whole job (``MPI.COMM_WORLD.Abort``) rather than leave the other ranks
waiting in a collective forever.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import time
import traceback
import warnings
from abc import abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch

from volley.config import AlgorithmConfig
from volley.engines.base import Replica, WorkerGroup, WorkerRecipe
from volley.envs import EnvCreator
from volley.errors import ConfigError, VolleyError
from volley.policies import PolicySetup
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats, RunningStats
from volley.rollout.sequences import truncated
from volley.rollout.worker import Postprocess, SampleResult

STOP, CALL, TRAIN, WEIGHTS = "stop", "call", "train", "weights"
ABORT_GRACE_S = 1.0  # between a failed rank's message and its MPI Abort


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


_RUNNING: set[MPIWorkerGroup] = set()  # rank 0's groups whose other ranks still wait for it
_hooks_installed = False


def install_rank_hooks() -> None:
    """For the entry point of a program run under ``mpiexec`` (``volley train``, a script):
    an unhandled exception on any rank prints ``volley: rank N failed: ...`` and aborts the
    whole job; rank 0 exiting before its group's ``stop()`` aborts it too; warnings of
    other ranks are prefixed ``[rank N]``. Nothing to do with one rank; installed once."""
    global _hooks_installed
    comm = _comm()
    rank = int(comm.Get_rank())
    if _hooks_installed or comm.Get_size() == 1:
        return
    _hooks_installed = True
    _abort_on_error(comm, rank)
    if rank == 0:
        atexit.register(_abort_if_running, comm)
    else:
        _prefix_warnings(rank)


def _abort_on_error(comm: Any, rank: int) -> None:
    """Make an unhandled exception on this rank end the whole job, naming the rank."""
    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            comm.Abort(130)
        detail = "".join(traceback.format_exception(kind, error, tb)[-3:]) if rank != 0 else ""
        print(f"volley: rank {rank} failed: {kind.__name__}: {error}\n{detail}".rstrip(),
              file=sys.stderr, flush=True)
        # a moment for mpiexec's proxy to forward the line: Abort kills the proxy too, and on a
        # busy machine the line was lost with it (the job ended with an empty stderr)
        time.sleep(ABORT_GRACE_S)
        comm.Abort(1)
    sys.excepthook = hook


def _abort_if_running(comm: Any) -> None:
    if _RUNNING:  # rank 0 is exiting without stop(): do not leave the others waiting
        print("volley: rank 0 exited without stopping its workers; aborting the job",
              file=sys.stderr, flush=True)
        comm.Abort(1)


def _prefix_warnings(rank: int) -> None:
    show = warnings.showwarning

    def shown(message: Warning | str, *args: Any, **kwargs: Any) -> None:
        show(f"[rank {rank}] {message}", *args, **kwargs)
    warnings.showwarning = shown


def make_mpi_group(config: AlgorithmConfig, postprocess: Postprocess,
                   env_creator: EnvCreator | None, setup: PolicySetup | None = None) -> MPIWorkerGroup:
    """This rank's group for ``config.mpi_mode``: one worker per rank, the plan resolved for
    the ranks mpiexec started."""
    comm = _comm()
    size = int(comm.Get_size())
    if config.num_workers not in ("auto", size):
        raise ConfigError(f"num_workers={config.num_workers} but mpiexec started "
                          f"{size} rank(s): under the MPI engine each rank is one "
                          "worker; leave num_workers unset or change mpiexec -n")
    recipe = WorkerRecipe(config, config.plan(num_workers=size), postprocess, env_creator, setup=setup)
    group = AllreduceGroup if config.mpi_mode == "allreduce" else GatherGroup
    return group(comm, recipe)


class MPIWorkerGroup(WorkerGroup):
    """This rank's worker, and the messages that connect rank 0 with the others."""

    def __init__(self, comm: Any, recipe: WorkerRecipe) -> None:
        self.comm, self.plan = comm, recipe.plan
        self.rank, self.num_workers = int(comm.Get_rank()), int(comm.Get_size())
        self.is_driver = self.rank == 0
        self.running = True
        # one torch thread per rank: the ranks already fill the cores (and waiting MPICH ranks
        # spin), so more threads only fight over them; it also makes sampling match the local engine
        torch.set_num_threads(1)
        self.worker = recipe.build(self.rank)
        if self.is_driver and self.num_workers > 1:
            _RUNNING.add(self)

    def spaces(self) -> Any:
        return self.worker.spaces()

    def stop(self) -> None:
        if not self.running:
            return
        if self.is_driver and self.num_workers > 1:
            self._release_others()
        self.running = False
        _RUNNING.discard(self)
        self.worker.stop()

    @abstractmethod
    def _release_others(self) -> None:
        """Rank 0: tell the other ranks' ``serve_forever`` loops to return."""

    def _not_the_driver(self) -> VolleyError:
        return VolleyError(f"MPI rank {self.rank} serves rank 0 and does not train or sample itself: "
                           "call algo.serve_forever() on the ranks other than 0 (train_until and "
                           "`volley train` do; see docs/clusters.md)")


class GatherGroup(MPIWorkerGroup):
    """Gather mode: rank 0 broadcasts each call, every rank runs it, rank 0 gathers the results."""

    def __init__(self, comm: Any, recipe: WorkerRecipe) -> None:
        super().__init__(comm, recipe)
        self.learns = self.is_driver

    def call(self, method: str, *args: Any) -> list[Any]:
        if not self.is_driver:
            raise self._not_the_driver()
        self._broadcast(CALL, method, args)
        return self._gather(getattr(self.worker, method)(*args))

    def begin_iteration(self) -> None:
        if not self.is_driver:
            raise self._not_the_driver()

    def serve_forever(self, replica: Replica) -> None:
        """Ranks other than 0: run rank 0's calls on this rank's worker until it stops."""
        while not self.is_driver:
            command, method, args = self._receive()
            if command == STOP:
                return
            self._gather(getattr(self.worker, method)(*args))

    def _release_others(self) -> None:
        self._broadcast(STOP, "", ())

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


class AllreduceGroup(MPIWorkerGroup):
    """Allreduce mode: every rank trains a replica; rank 0 says when, gradients are averaged."""

    serving = False  # True while a rank other than 0 trains in step with rank 0

    def call(self, method: str, *args: Any) -> list[Any]:
        """Every rank calls its own worker; episode statistics and filter deltas are pooled."""
        result = getattr(self.worker, method)(*args)
        pooled = result[-1] if isinstance(result, tuple) else result
        if isinstance(pooled, SampleResult):
            self._pool(pooled)
        return [result]

    def begin_iteration(self) -> None:
        if self.is_driver:
            self.comm.bcast((TRAIN,), root=0)
        elif not self.serving:
            raise self._not_the_driver()

    def serve_forever(self, replica: Replica) -> None:
        """Ranks other than 0: train ``replica`` whenever rank 0 does, until it stops."""
        if self.is_driver:
            return
        self.serving = True
        try:
            while (command := self.comm.bcast(None, root=0)[0]) != STOP:
                if command == TRAIN:
                    replica.train()
                else:
                    self.comm.gather(replica.policy.get_flat_weights(), root=0)
        finally:
            self.serving = False

    def _release_others(self) -> None:
        self.comm.bcast((STOP,), root=0)

    def average_gradients(self, parameters: list[torch.Tensor]) -> None:
        """Replace every gradient by its mean over the ranks, in one Allreduce."""
        if self.num_workers == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = self.average_over_replicas(torch.cat([g.reshape(-1) for g in grads]).cpu().numpy())  # MPI reads host memory
        offset = 0
        for param in parameters:
            param.grad = torch.as_tensor(flat[offset:offset + param.numel()], dtype=param.dtype,
                                         device=param.device).view_as(param).clone()
            offset += param.numel()

    def average_over_replicas(self, values: np.ndarray) -> np.ndarray:
        """``values`` averaged element-wise over the ranks, in float64."""
        if self.num_workers == 1:
            return values
        from mpi4py import MPI

        total = np.array(values, np.float64)  # a copy: the Allreduce works in place
        self.comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        return total / self.num_workers

    def replica_weights(self, weights: np.ndarray) -> list[np.ndarray]:
        """Every rank's flat weight vector, rank order (to check they agree)."""
        if self.num_workers == 1:
            return [weights]
        self.comm.bcast((WEIGHTS,), root=0)
        return list(self.comm.gather(weights, root=0))

    def _pool(self, result: SampleResult) -> None:
        """Every rank gets all ranks' episodes, steps and filter statistics
        (so replicas normalise alike and rank 0 reports the whole job), and batches are cut
        to the shortest rank's length so every rank takes the same number of SGD steps."""
        from mpi4py import MPI

        everyone = self.comm.allgather((result.episode_returns, result.episode_lengths,
                                        result.filter_delta, result.env_steps, result.env_errors,
                                        result.episode_metrics))
        result.episode_returns = np.concatenate([e[0] for e in everyone])
        result.episode_lengths = np.concatenate([e[1] for e in everyone])
        result.env_steps = sum(e[3] for e in everyone)
        result.env_errors = sum(e[4] for e in everyone)
        result.episode_metrics = [record for e in everyone for record in e[5]]
        if result.filter_delta is not None:
            merged = FilterStats(*(None if stats is None else RunningStats(stats.shape)
                                   for stats in (result.filter_delta.obs, result.filter_delta.reward)))
            for each in everyone:
                merged.merge(each[2])
            result.filter_delta = merged
        shortest = self.comm.allreduce(len(result.batch), op=MPI.MIN)
        if len(result.batch) > shortest:
            result.batch = truncated(result.batch, shortest)


def gather_batches(comm: Any, batch: Batch) -> list[Batch]:
    """Each rank's batch at rank 0 (``[]`` elsewhere), column by column with ``Gatherv``.

    Columns travel as raw bytes: no pickling, one message per column, and any dtype. Each has
    its own length (a recurrent batch's per-sequence columns are shorter).
    """
    rank = comm.Get_rank()
    lengths = comm.gather({key: len(column) for key, column in batch.items()}, root=0)
    gathered: dict[str, list[np.ndarray]] = {}
    for key in sorted(batch):
        local = np.ascontiguousarray(batch[key])
        row_bytes = local[:1].nbytes if len(local) else int(np.prod(local.shape[1:])) * local.itemsize
        if rank == 0:
            counts = [each[key] * row_bytes for each in lengths]
            received = np.empty(sum(counts), np.uint8)
            comm.Gatherv(local.view(np.uint8).reshape(-1), [received, counts], root=0)
            pieces = np.split(received, np.cumsum(counts)[:-1])
            gathered[key] = [p.view(local.dtype).reshape(-1, *local.shape[1:]) for p in pieces]
        else:
            comm.Gatherv(local.view(np.uint8).reshape(-1), None, root=0)
    if rank != 0:
        return []
    return [Batch({key: gathered[key][r] for key in gathered}) for r in range(len(lengths))]
