"""Checkpoints: the learner's whole state (weights, optimizers, filters, counters, random
generators, what an algorithm adds through ``extra_state``) written to a directory and read back.
:meth:`volley.algorithm.Algorithm.from_checkpoint` builds the algorithm a checkpoint names and
restores it here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from volley.checkpoint import (
    SavedCheckpoint,
    flatten_optimizer,
    read_checkpoint,
    unflatten_optimizer,
    write_checkpoint,
)
from volley.errors import CheckpointError
from volley.learner.base import LearnerBase
from volley.rollout.filters import RunningStats


class Checkpoints(LearnerBase):
    """``save`` and ``restore`` (and RLlib's newer names for them)."""

    def save(self, path: str | Path | None = None) -> SavedCheckpoint:
        """Write a checkpoint directory at ``path`` (atomically) and return its path.

        Without ``path``, as in RLlib, it goes to ``~/volley_results/<Algo>_<env>_<time>/
        checkpoint_<iteration>``. The path returned is a string that also answers RLlib 2.x's
        ``algo.save().checkpoint.path``.
        """
        if path is None:
            path = self.results_dir / f"checkpoint_{self.iteration:06d}"
        tensors, state = self.checkpoint_state()
        manifest = {"algorithm": type(self).__name__, "config": self.config.to_dict(), "state": state}
        return SavedCheckpoint(write_checkpoint(path, tensors, manifest))

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """What a checkpoint holds of this learner: its tensors, and its state as JSON data."""
        tensors = {f"policy.{k}": v for k, v in self.policy.state_dict().items()}
        optimizers = {}
        for name, optimizer in self.optimizers().items():
            opt_tensors, optimizers[name] = flatten_optimizer(optimizer.state_dict(), name)
            tensors.update(opt_tensors)
        tensors["rng.torch"] = torch.get_rng_state()
        extra_tensors, extra = self.extra_state()
        tensors.update(extra_tensors)
        state = {
            "iteration": self.iteration, "timesteps_total": self.timesteps_total,
            "episodes_total": self.episodes_total, "time_total_s": self.time_total_s,
            "recent_returns": list(self._recent_returns), "recent_lengths": list(self._recent_lengths),
            "filter": self.obs_filter.stats.to_state() if hasattr(self.obs_filter, "stats") else None,
            "reward_filter": self.reward_stats.to_state() if self.reward_stats is not None else None,
            "rng": self.rng.bit_generator.state, "optimizers": optimizers, "extra": extra,
            "faults": {"num_worker_restarts": self.workers.num_restarts,
                       "num_env_errors": self.num_env_errors,
                       "num_skipped_updates": self.num_skipped_updates},
        }
        return tensors, state

    def save_to_path(self, path: str | Path | None = None) -> str:
        """RLlib's newer name of :meth:`save`."""
        return self.save(path)

    def restore_from_path(self, path: str | Path) -> None:
        """RLlib's newer name of :meth:`restore`."""
        self.restore(path)

    def restore(self, path: str | Path) -> None:
        """Load weights, optimizer, filter, counters and RNG state from a checkpoint."""
        tensors, manifest = read_checkpoint(path)
        if manifest.get("algorithm") != type(self).__name__:
            raise CheckpointError(f"checkpoint '{path}' holds a {manifest.get('algorithm')} "
                                  f"algorithm, not {type(self).__name__}")
        self.load_checkpoint_state(tensors, manifest["state"], path)
        if self.is_driver:
            self.hooks("on_checkpoint_loaded", algorithm=self)

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any], path: str | Path) -> None:
        """Restore what :meth:`checkpoint_state` gave (``path``: the checkpoint's, for errors)."""
        try:
            self.policy.load_state_dict({k[len("policy."):]: v for k, v in tensors.items()
                                         if k.startswith("policy.")})
            for name, optimizer in self.optimizers().items():
                optimizer.load_state_dict(unflatten_optimizer(tensors, state["optimizers"][name], name))
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint '{path}' does not fit this model: {exc}") from None
        torch.set_rng_state(tensors["rng.torch"])
        self.rng.bit_generator.state = state["rng"]
        if state["filter"] is not None and hasattr(self.obs_filter, "stats"):
            self.obs_filter.set_stats(RunningStats.from_state(state["filter"]))
        if state.get("reward_filter") is not None and self.reward_stats is not None:
            self.reward_stats = RunningStats.from_state(state["reward_filter"])
        self.iteration = state["iteration"]
        self.timesteps_total = state["timesteps_total"]
        self.episodes_total = state["episodes_total"]
        self.time_total_s = state["time_total_s"]
        self._recent_returns.extend(state["recent_returns"])
        self._recent_lengths.extend(state["recent_lengths"])
        faults = state.get("faults", {})  # checkpoints from before volley counted faults have none
        self.workers.num_restarts = faults.get("num_worker_restarts", 0)
        self.num_env_errors = faults.get("num_env_errors", 0)
        self.num_skipped_updates = faults.get("num_skipped_updates", 0)
        self.load_extra_state(tensors, state.get("extra", {}))
