"""The keys of the asynchronous actor-learners: IMPALA and APPO (V-trace on streamed fragments).

Torch-free, as every algorithm's config module. The names are RLlib's (its
2.9 ``IMPALAConfig`` and ``APPOConfig``, with the newer spellings as aliases); where a
default differs from RLlib's, its help says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from volley.algorithms.impala.keys import APPO_KEYS, IMPALA_KEYS
from volley.config import AlgorithmConfig, option
from volley.errors import ConfigError
from volley.rllib_keys import RLlibKey
from volley.schedules import Schedulable, check_schedulable


@dataclass(kw_only=True)
class IMPALAConfig(AlgorithmConfig):
    """IMPALA's keys (Espeholt et al., 2018) on top of :class:`~volley.config.AlgorithmConfig`.

    Workers sample fragments of ``rollout_fragment_length`` steps without waiting for the
    learner; it trains on ``train_batch_size`` rows of whatever fragments arrived, correcting for
    their policy lag with V-trace. The defaults are RLlib's (lr 5e-4, entropy 0.01, grad_clip 40,
    50-step fragments, 500-step batches), except ``learner_queue_size`` (RLlib 2.9's 16; its newer
    stack's 3), ``replay_buffer_num_slots`` and ``min_time_s_per_iteration`` (RLlib's 10 s).
    """

    ALIASES: ClassVar[dict[str, str]] = {
        **AlgorithmConfig.ALIASES,
        "num_sgd_iter": "num_epochs",
        "max_requests_in_flight_per_env_runner": "max_requests_in_flight_per_sampler_worker",
    }
    algo_name: ClassVar[str] = "impala"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = IMPALA_KEYS

    rollout_fragment_length: int | Literal["auto"] = option(
        50, "rollouts", "steps per environment in each fragment a worker sends; 'auto' divides "
        "train_batch_size among the workers' environments")
    max_requests_in_flight_per_sampler_worker: int = option(
        2, "rollouts", "fragments each worker is asked for ahead (alias "
        "max_requests_in_flight_per_env_runner): it starts the next as soon as one is done")
    lr: Schedulable = option(5e-4, "training", "learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
    train_batch_size: int = option(
        500, "training", "environment steps per learner update: the fragments that arrived, concatenated "
        "until they hold at least this many")
    grad_clip: float | None = option(40.0, "training", "max global gradient norm (None: no clipping)")
    vf_loss_coeff: float = option(0.5, "training", "weight of the value loss")
    entropy_coeff: Schedulable = option(
        0.01, "training", "weight of the entropy bonus, or [[timestep, weight], ...] (RLlib's schedule)")
    entropy_coeff_schedule: list[list[float]] | None = option(
        None, "training", "RLlib's old spelling of an entropy_coeff schedule; overrides entropy_coeff when set")
    vtrace: bool = option(
        True, "training", "correct for policy lag with V-trace; False takes every importance weight as 1 "
        "(n-step returns, as A3C)")
    vtrace_clip_rho_threshold: float = option(
        1.0, "training", "V-trace's rho-bar: the value targets' importance weights are clipped to this")
    vtrace_clip_pg_rho_threshold: float = option(
        1.0, "training", "the policy gradient's importance weights are clipped to this")
    broadcast_interval: int = option(
        1, "training", "learner updates between sending the weights to the workers (each gets them "
        "with its next request)")
    num_epochs: int = option(
        1, "training", "updates on each train batch (alias num_sgd_iter), taken in turns with the other "
        "batches of the minibatch buffer")
    minibatch_buffer_size: int = option(
        1, "training", "train batches held for their num_epochs updates, trained in turn (RLlib's "
        "MinibatchBuffer)")
    learner_queue_size: int = option(
        3, "training", "train batches waiting for the learner; while it is full, workers get no new "
        "requests (nothing is dropped)")
    replay_proportion: float = option(
        0.0, "training", "replayed fragments per new one, from the last replay_buffer_num_slots "
        "fragments (p:1; 0 replays none)")
    replay_buffer_num_slots: int = option(
        100, "training", "fragments kept for replay (RLlib's IMPALA: 0, which it treats as 1)")
    opt_type: Literal["adam", "rmsprop"] = option(
        "adam", "training", "optimizer: Adam, or RMSProp as in the IMPALA paper (decay, epsilon)")
    decay: float = option(0.99, "training", "RMSProp's decay of the squared-gradient average")
    epsilon: float = option(0.1, "training", "RMSProp's epsilon (added to the root of the average)")
    min_time_s_per_iteration: float = option(
        1.0, "reporting", "seconds train() learns for before it returns a result (RLlib: 10)")

    def validate(self) -> None:
        super().validate()
        if self.engine == "mpi":
            raise ConfigError(
                f"{self.algo_name} streams fragments from workers that never wait for the learner, and "
                f"engine='mpi' cannot host that (its ranks meet in collective calls); use engine='ray', "
                f"or 'local'")
        self.check_bounds(positive=("broadcast_interval", "max_requests_in_flight_per_sampler_worker",
                                    "learner_queue_size", "vtrace_clip_rho_threshold",
                                    "vtrace_clip_pg_rho_threshold", "num_epochs", "minibatch_buffer_size",
                                    "replay_buffer_num_slots", "decay", "epsilon"),
                          non_negative=("replay_proportion", "vf_loss_coeff"))
        if self.decay >= 1:
            raise ConfigError(f"config key 'decay' must be in (0, 1), got {self.decay!r}")
        check_schedulable("entropy_coeff", self.entropy_coeff)
        if self.entropy_coeff_schedule is not None:
            check_schedulable("entropy_coeff_schedule", self.entropy_coeff_schedule)
        if self.batch_mode != "truncate_episodes":
            raise ConfigError(f"{self.algo_name} learns from fragments of rollout_fragment_length steps: "
                              f"batch_mode must be 'truncate_episodes', got {self.batch_mode!r}")
        if self.model.use_lstm:
            raise ConfigError(f"model.use_lstm=True is not supported by {self.algo_name}: its learner trains on "
                              "fragments step by step, without replaying sequences from stored states; recurrent "
                              "networks train with ppo, pg and trpo")



@dataclass(kw_only=True)
class APPOConfig(IMPALAConfig):
    """APPO's keys (IMPACT, Luo et al., 2020) on top of :class:`IMPALAConfig`.

    IMPALA's V-trace targets, with PPO's clipped surrogate: the ratio is taken against a target
    network that trails the learner (copied every ``target_network_update_freq`` x
    ``minibatch_buffer_size`` x ``num_epochs`` updates), so the clip holds however stale the
    fragments are. The defaults are RLlib's (clip 0.4, no KL loss, target-worker clip 2).
    """

    algo_name: ClassVar[str] = "appo"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = APPO_KEYS

    clip_param: float = option(0.4, "training", "the surrogate's ratio clip epsilon")
    use_kl_loss: bool = option(False, "training", "add kl_coeff x KL(target ‖ learner) to the loss")
    kl_coeff: float = option(
        1.0, "training", "initial weight of the KL loss, adapted at every target update towards kl_target")
    kl_target: float = option(
        0.01, "training", "the KL the loss's weight steers towards: x1.5 above 2·kl_target, x0.5 below "
        "kl_target/2")
    target_network_update_freq: int = option(
        2, "training", "target-network updates come every this many x minibatch_buffer_size x num_epochs "
        "learner updates (RLlib's unit)")
    tau: float = option(
        1.0, "training", "each target update moves the target this fraction towards the learner (1: a copy)")
    target_worker_clipping: float = option(
        2.0, "training", "IMPACT's clip of the behaviour-to-target ratio in the surrogate's importance weight")

    def validate(self) -> None:
        super().validate()
        self.check_bounds(positive=("clip_param", "kl_target", "target_network_update_freq",
                                    "target_worker_clipping"), non_negative=("kl_coeff",))
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"config key 'tau' must be in (0, 1], got {self.tau!r}")

