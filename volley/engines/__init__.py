"""Engines run a group of rollout workers: in this process, as Ray actors, (later) as MPI ranks."""

from __future__ import annotations

import os
from pathlib import Path

from volley.config import AlgorithmConfig
from volley.engines.base import WorkerGroup
from volley.envs import EnvCreator
from volley.rollout.worker import Postprocess


def use_cluster_auth_token() -> None:
    """Send this machine's Ray token when joining a cluster, as ``ray start`` expects.

    ``ray start --head`` turns token authentication on when a token exists, but a
    driver joining by address sends it only with ``RAY_AUTH_MODE=token``, which Ray
    reads when it is first imported (ray-project/ray#64755).
    """
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", str(Path.home() / ".ray" / "auth_token"))
    has_token = "RAY_AUTH_TOKEN" in os.environ or Path(token_path).is_file()
    if has_token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"


def make_worker_group(config: AlgorithmConfig, postprocess: Postprocess,
                      env_creator: EnvCreator | None) -> WorkerGroup:
    """The worker group for ``config.engine``; ``num_workers=0`` always samples in-process."""
    if config.engine == "local" or config.resolved_num_workers == 0:
        from volley.engines.local import LocalWorkerGroup
        return LocalWorkerGroup(config, postprocess, env_creator)
    if config.ray_address is not None:
        use_cluster_auth_token()
    from volley.engines.ray_engine import RayWorkerGroup
    return RayWorkerGroup(config, postprocess, env_creator)


__all__ = ["WorkerGroup", "make_worker_group"]
