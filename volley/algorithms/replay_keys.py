"""The keys every replay-based algorithm shares (DQN, SAC): the buffer; and the keys of Ape-X's
asynchronous layout (acting workers, replay shards, a parameter server) that Ape-X DQN and
asynchronous SAC share.

Torch-free, as every algorithm's config module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from volley.config import AlgorithmConfig, option
from volley.errors import ConfigError
from volley.replay import Prioritization
from volley.rllib_keys import RLlibKey, check_dict, sub_keys, translated, type_name

REPLAY_BUFFERS = {  # RLlib's buffer types (both stacks) -> volley's prioritized_replay
    "ReplayBuffer": False, "MultiAgentReplayBuffer": False, "EpisodeReplayBuffer": False,
    "MultiAgentEpisodeReplayBuffer": False, "PrioritizedReplayBuffer": True,
    "MultiAgentPrioritizedReplayBuffer": True, "PrioritizedEpisodeReplayBuffer": True,
    "MultiAgentPrioritizedEpisodeReplayBuffer": True,
}
REPLAY_KEYS = {"capacity": "replay_buffer_capacity", "learning_starts": "learning_starts",
               "prioritized_replay": "prioritized_replay",  # RLlib 2.9's SAC default carries it (-1 elsewhere)
               "prioritized_replay_alpha": "prioritized_replay_alpha", "alpha": "prioritized_replay_alpha",
               "prioritized_replay_beta": "prioritized_replay_beta", "beta": "prioritized_replay_beta",
               "prioritized_replay_eps": "prioritized_replay_eps"}
REPLAY_FIXED: dict[str, tuple[Any, ...]] = {
    "storage_unit": ("timesteps",), "replay_sequence_length": (1,), "replay_burn_in": (0,),
    "replay_zero_init_states": (True,), "no_local_replay_buffer": (True, False),
    "worker_side_prioritization": (False, True), "replay_mode": ("independent",),
    "prioritized_replay": (-1,), "replay_buffer_shards_colocated_with_driver": (True, False),
    "_enable_replay_buffer_api": (True,)}


def replay_buffer_config(value: Any, renames: dict[str, str] = REPLAY_KEYS,
                         fixed: dict[str, tuple[Any, ...]] = REPLAY_FIXED) -> dict[str, Any]:
    """RLlib's ``replay_buffer_config`` as volley's replay keys: a prioritized ``type`` sets
    ``prioritized_replay``; ``capacity`` and the α, β, ε of either stack map by name (an algorithm
    that stores more, R2D2's sequences, passes its own ``renames`` and ``fixed``)."""
    value = check_dict("replay_buffer_config", value)
    if "storage_unit" in value:  # RLlib's StorageUnit enum, read by its value
        value = {**value, "storage_unit": getattr(value["storage_unit"], "value", value["storage_unit"])}
    out = sub_keys("replay_buffer_config", value, renames, fixed)
    if "type" in value:
        kind = type_name("replay_buffer_config", value, REPLAY_BUFFERS, "uniform ('ReplayBuffer') and "
                         "prioritized ('PrioritizedReplayBuffer') replay, also under RLlib's MultiAgent "
                         "and Episode names")
        out["prioritized_replay"] = REPLAY_BUFFERS[kind]
    return out


@dataclass(kw_only=True)
class ReplayKeys(AlgorithmConfig):
    """The replay buffer: its size, uniform or prioritized sampling, and when learning starts."""

    ALIASES: ClassVar[dict[str, str]] = {
        **AlgorithmConfig.ALIASES,
        "num_steps_sampled_before_learning_starts": "learning_starts",
    }
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = (
        translated("replay_buffer_config", ("training",), replay_buffer_config,
                   ("replay_buffer_capacity", "prioritized_replay", "prioritized_replay_alpha",
                    "prioritized_replay_beta", "prioritized_replay_eps", "learning_starts"),
                   "a prioritized `type` sets `prioritized_replay`; `capacity` → `replay_buffer_capacity`; "
                   "`prioritized_replay_alpha`/`alpha`, `_beta`/`beta`, `_eps` → `prioritized_replay_*`; "
                   "other types and keys refused by name",
                   example={"type": "MultiAgentPrioritizedReplayBuffer", "capacity": 50_000,
                            "prioritized_replay_alpha": 0.5, "prioritized_replay_beta": 0.5,
                            "prioritized_replay_eps": 1e-6}),
    )

    replay_buffer_capacity: int = option(100_000, "training", "transitions the replay buffer keeps")
    prioritized_replay: bool = option(
        False, "training", "sample by TD error (Schaul et al., 2016) instead of uniformly")
    prioritized_replay_alpha: float = option(
        0.6, "training", "prioritized replay: how much priorities count (0 is uniform)")
    prioritized_replay_beta: float = option(
        0.4, "training", "prioritized replay: importance-weight exponent (1 corrects the bias fully)")
    prioritized_replay_eps: float = option(
        1e-6, "training", "prioritized replay: added to |TD error| so no transition has priority 0")
    learning_starts: int = option(1000, "training", "transitions in the buffer before the first update")

    @property
    def replay_batch_size(self) -> int:
        """Transitions each gradient step draws from the buffer (the algorithm's own key)."""
        raise NotImplementedError

    @property
    def prioritization(self) -> Prioritization | None:
        """The replay buffers' prioritized-replay settings (None: uniform replay)."""
        if not self.prioritized_replay:
            return None
        return Prioritization(self.prioritized_replay_alpha, self.prioritized_replay_beta,
                              self.prioritized_replay_eps)

    def validate(self) -> None:
        super().validate()
        for key in ("replay_buffer_capacity", "prioritized_replay_eps"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        for key in ("learning_starts", "prioritized_replay_alpha", "prioritized_replay_beta"):
            if getattr(self, key) < 0:
                raise ConfigError(f"config key '{key}' must be >= 0, got {getattr(self, key)!r}")
        if self.learning_starts > self.replay_buffer_capacity:
            raise ConfigError(f"learning_starts={self.learning_starts} is larger than "
                              f"replay_buffer_capacity={self.replay_buffer_capacity}: "
                              "learning would never start")


# A mixin's base: AlgorithmConfig for the type checker, nothing at run time, so the mixin's dataclass
# fields are its own only and never put AlgorithmConfig's defaults back over the algorithm's.
if TYPE_CHECKING:
    _MixinBase = AlgorithmConfig
else:
    _MixinBase = object


@dataclass(kw_only=True)
class ApexKeys(_MixinBase):
    """Ape-X's layout (Horgan et al., 2018) on Ray: acting workers, replay shards, a parameter
    server, and a learner that never waits for samples (design: the third way of sharing work).
    Mixed in before an algorithm's config (``class ApexSACConfig(ApexKeys, SACConfig)``), whose
    synchronous twin is its ``algo_name`` less ``apex_``."""

    max_sample_lead: int | None = option(
        None, "training", "environment steps the workers may sample beyond the learner's share of "
        "updates before they wait (None: they never wait, as in the paper; set it where workers and "
        "learner share few cores)")
    num_replay_shards: int = option(1, "training", "replay-buffer actors; the capacity is split among them")
    weight_sync_interval: int = option(
        128, "training", "environment steps each acting worker takes between weight fetches and reports")
    weight_publish_interval: int = option(
        16, "training", "learner updates between sending weights to the parameter server")
    replay_prefetch: int = option(
        4, "training", "minibatch requests the learner keeps in flight per replay shard")
    min_time_s_per_iteration: float = option(
        1.0, "reporting", "seconds train() learns for before it returns a result")
    checkpoint_replay: bool = option(
        False, "training", "save the replay shards' contents in checkpoints (can be gigabytes)")

    def validate(self) -> None:
        super().validate()
        name, sync = self.algo_name, self.algo_name.removeprefix("apex_")
        if self.engine != "ray":
            raise ConfigError(
                f"{name} runs its acting workers, replay shards and parameter server as Ray "
                f"actors, so engine={self.engine!r} cannot host it; use engine='ray', or the "
                f"synchronous algorithm '{sync}', which runs on every engine")
        if self.num_workers == 0:
            raise ConfigError(f"{name} needs num_workers >= 1 acting workers, got num_workers=0")
        if self.observation_filter != "NoFilter":
            raise ConfigError(f"{name} takes observation_filter='NoFilter', got "
                              f"{self.observation_filter!r}: workers never wait to merge statistics")
        if self.normalize_rewards:
            raise ConfigError(f"{name} takes normalize_rewards=False, got True: workers never wait to "
                              "merge statistics (clip_rewards works)")
        for key in ("num_replay_shards", "weight_sync_interval", "weight_publish_interval",
                    "replay_prefetch", "min_time_s_per_iteration"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if self.max_sample_lead is not None and self.max_sample_lead < 0:
            raise ConfigError(f"config key 'max_sample_lead' must be >= 0 or None, got {self.max_sample_lead!r}")

    def to_play(self) -> dict[str, Any]:
        """Only Ray can host Ape-X's actors: an embedded cluster and one acting worker, never
        started (episodes are played in this process, by the learner's network)."""
        return {**super().to_play(), "engine": "ray", "num_workers": 1}
