"""Every key of RLlib's own configs, as RLlib dumped them (volley/rllib_keys.json), is known to volley.

The dump is ``AlgorithmConfig.to_dict()`` of RLlib 2.60 (both API stacks) and 2.9 (old stack)
for each algorithm volley has or is adding, written by ``docs/dump_rllib_keys.py`` with
RLlib installed; these tests read it and need no RLlib. An algorithm of the dump that
volley does not have yet (by name: ``Algorithm.named``) is skipped, saying so, and checked
from the day it registers.
"""

from __future__ import annotations

import math
import re
import typing

import gymnasium as gym
import pytest
import torch

from volley import Algorithm, ConfigError, DQNConfig, PGConfig, PPOConfig, SACConfig
from volley.config import AlgorithmConfig, ModelConfig
from volley.envs import GuardedVectorEnv, register_env
from volley.rllib_compat import rllib_key
from volley.rllib_keys import DEPRECATED, RLlibObject, dumped_configs
from volley.schedules import value_at

DUMP = dumped_configs()
# RLlib's algorithm names -> volley's (TRPO is not an RLlib algorithm: it has no dump)
VOLLEY_NAME = {"PPO": "ppo", "PG": "pg", "DQN": "dqn", "APEX_DQN": "apex_dqn", "SAC": "sac", "APPO": "appo",
               "IMPALA": "impala"}
CASES = [(version, algo, stack) for version, algos in DUMP.items() for algo, stacks in algos.items()
         for stack in stacks]
IDS = [f"{algo}-{version}-{stack}" for version, algo, stack in CASES]


def volley_config(algo: str) -> type[AlgorithmConfig]:
    """volley's config class for RLlib's algorithm ``algo`` (every algorithm of the dump is volley's)."""
    return Algorithm.named(VOLLEY_NAME[algo]).config_class


def stand_in(value: typing.Any) -> typing.Any:
    """The dumped value as RLlib's to_dict() gives it: RLlib's classes and functions as objects with
    their import path (RLlib itself is not installed here)."""
    if isinstance(value, RLlibObject):
        module, _, qualname = value.path.partition(":")
        return type(qualname.rpartition(".")[2], (), {"__module__": module, "__qualname__": qualname})
    if isinstance(value, dict):
        return {k: stand_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stand_in(v) for v in value]
    return value


def items(config: dict) -> list[tuple[str, typing.Any]]:
    """Every key of a dumped config: top-level, and ``model.<key>`` for model={...}'s."""
    return [*((k, v) for k, v in config.items() if k != "model"),
            *((f"model.{k}", v) for k, v in config["model"].items())]


def known(cls: type[AlgorithmConfig], key: str) -> bool:
    """A volley key, an alias, or an entry of volley's RLlib table for this config."""
    if key.startswith("model.") and key[6:] in typing.get_type_hints(ModelConfig):
        return True
    if not key.startswith("model.") and (key in cls.field_specs() or key in cls.ALIASES):
        return True
    return rllib_key(key, cls, cls.field_specs()) is not None


def fed(cls: type[AlgorithmConfig], key: str, value: typing.Any) -> AlgorithmConfig:
    if key.startswith("model."):
        return cls().update_from_dict({"model": {key[6:]: value}})
    return cls().update_from_dict({key: value})


def changed(config: AlgorithmConfig) -> set[str]:
    default = type(config)().to_dict()
    return {k for k, v in config.to_dict().items() if v != default[k] and k != "seed"}


@pytest.mark.parametrize(("version", "algo", "stack"), CASES, ids=IDS)
def test_every_dumped_key_is_in_volleys_table(version, algo, stack):
    cls = volley_config(algo)
    missing = [key for key, _ in items(DUMP[version][algo][stack]) if not known(cls, key)]
    assert missing == [], f"RLlib {version} {algo} ({stack}) keys volley's table lacks: {missing}"


@pytest.mark.parametrize(("version", "algo", "stack"), CASES, ids=IDS)
def test_every_key_at_rllibs_default_is_accepted_and_any_other_value_named(version, algo, stack):
    cls = volley_config(algo)
    for key, default in items(DUMP[version][algo][stack]):
        config = fed(cls, key, stand_in(default))  # RLlib's own default: always accepted
        entry = rllib_key(key, cls, cls.field_specs())
        moved = changed(config)
        # taken (the volley key of that name, or the one its alias names), or translated into the
        # keys its table entry says; "model" for model keys
        allowed = ({"model"} if key.startswith("model.") else
                   set(entry.sets) if entry is not None else {cls.ALIASES.get(key, key)})
        assert moved <= allowed, (key, default, moved)
        try:  # another value: taken, translated, accepted, or refused in one line naming the key
            other = fed(cls, key, "not RLlib's default")
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and (key.rpartition(".")[2] in message
                                            or cls.ALIASES.get(key, "?") in message), (key, message)
        else:
            assert changed(other) <= allowed, key


def round_trip(algo: str, version: str, stack: str) -> tuple[dict, AlgorithmConfig]:
    rllib = stand_in(DUMP[version][algo][stack])
    return rllib, volley_config(algo).from_dict(rllib)


@pytest.mark.parametrize("stack", ["new_stack", "old_stack"])
def test_ppo_from_rllibs_to_dict_has_rllibs_values(stack):
    rllib, config = round_trip("PPO", "2.60.0", stack)
    # volley's key <- RLlib's key, read from the dump: the settings an RLlib run had
    same = {"lr": "lr", "gamma": "gamma", "gae_lambda": "lambda", "clip_param": "clip_param",
            "vf_clip_param": "vf_clip_param", "vf_loss_coeff": "vf_loss_coeff", "entropy_coeff": "entropy_coeff",
            "kl_coeff": "kl_coeff", "kl_target": "kl_target", "use_kl_loss": "use_kl_loss",
            "num_epochs": "num_epochs", "minibatch_size": "minibatch_size", "train_batch_size": "train_batch_size",
            "num_workers": "num_env_runners", "num_envs_per_worker": "num_envs_per_env_runner",
            "rollout_fragment_length": "rollout_fragment_length", "batch_mode": "batch_mode",
            "observation_filter": "observation_filter", "normalize_actions": "normalize_actions",
            "clip_actions": "clip_actions", "grad_clip": "grad_clip", "explore": "explore",
            "max_worker_restarts": "max_num_env_runner_restarts", "restart_failed_workers": "restart_failed_env_runners",
            "metrics_num_episodes_for_smoothing": "metrics_num_episodes_for_smoothing",
            "evaluation_duration": "evaluation_duration", "evaluation_num_workers": "evaluation_num_env_runners",
            "vectorize_mode": "gym_env_vectorize_mode", "num_cpus_for_driver": "num_cpus_for_main_process"}
    for volley_key, rllib_name in same.items():
        assert config[volley_key] == rllib[rllib_name], (volley_key, config[volley_key], rllib[rllib_name])
    for key in ("fcnet_hiddens", "fcnet_activation", "vf_share_layers"):
        assert getattr(config.model, key) == rllib["model"][key]
    assert config.env_errors == "raise"  # restart_failed_sub_environments=False
    assert config.evaluation_config == {} and rllib["evaluation_config"] is None
    assert isinstance(config.seed, int) and rllib["seed"] is None  # drawn
    assert PPOConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()


@pytest.mark.parametrize("stack", ["new_stack", "old_stack"])
def test_dqn_from_rllibs_to_dict_has_rllibs_values(stack):
    rllib, config = round_trip("DQN", "2.60.0", stack)
    same = {"lr": "lr", "gamma": "gamma", "n_step": "n_step", "double_q": "double_q", "dueling": "dueling",
            "hiddens": "hiddens", "tau": "tau", "target_update_freq": "target_network_update_freq",
            "learning_starts": "num_steps_sampled_before_learning_starts",
            "num_workers": "num_env_runners", "grad_clip": "grad_clip"}
    for volley_key, rllib_name in same.items():
        assert config[volley_key] == rllib[rllib_name], (volley_key, config[volley_key], rllib[rllib_name])
    buffer = rllib["replay_buffer_config"]
    assert config.replay_buffer_capacity == buffer["capacity"]
    assert config.prioritized_replay == ("Prioritized" in buffer["type"])
    assert config.prioritized_replay_alpha == buffer.get("alpha", buffer.get("prioritized_replay_alpha"))
    if stack == "new_stack":  # epsilon=[[0, start], [t, end]]
        (_, start), (steps, end) = rllib["epsilon"]
    else:  # exploration_config={"type": "EpsilonGreedy", ...}
        explore = rllib["exploration_config"]
        start, end, steps = explore["initial_epsilon"], explore["final_epsilon"], explore["epsilon_timesteps"]
    assert (config.epsilon_start, config.epsilon_end, config.epsilon_decay_steps) == (start, end, steps)
    assert DQNConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()


@pytest.mark.parametrize(("stack", "actor_lr"), [("new_stack", 3e-5), ("old_stack", 3e-4)])
def test_sac_from_rllibs_to_dict_takes_the_learning_rates_of_its_stack(stack, actor_lr):
    """RLlib 2.60's SAC dump holds actor_lr=3e-5 (the new stack's) and optimization's 3e-4 (the old
    stack's): RLlib trains with the set its enable_rl_module_and_learner names, and so does volley."""
    rllib, config = round_trip("SAC", "2.60.0", stack)
    assert rllib["actor_lr"] == 3e-5 and rllib["optimization"]["actor_learning_rate"] == 3e-4
    assert config.learning_rates(config.lr) == (actor_lr, 3e-4, 3e-4)
    assert SACConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()


def test_rllibs_own_defaults_that_used_to_be_refused():
    config = PPOConfig().update_from_dict({"seed": None, "evaluation_config": None, "vf_share_layers": DEPRECATED,
                                           "sgd_minibatch_size": DEPRECATED, "min_time_s_per_iteration": None,
                                           "model": {"vf_share_layers": False, "fcnet_weights_initializer": None,
                                                     "lstm_use_prev_action_reward": DEPRECATED}})
    assert config.evaluation_config == {} and config.minibatch_size == PPOConfig().minibatch_size
    assert config.min_time_s_per_iteration == 0.0 and 0 <= config.seed < 2**31
    seeds = {PPOConfig().debugging(seed=None).seed for _ in range(3)}
    assert len(seeds) == 3  # each a fresh draw (equal ones: a 2**-31 chance)
    with pytest.raises(ConfigError, match=r"^RLlib's model\['fcnet_weights_initializer'\]='xavier_uniform_' "
                                          r"is not supported by volley: volley's MLP is initialized orthogonally"):
        PPOConfig().training(model={"fcnet_weights_initializer": "xavier_uniform_"})
    assert PPOConfig().update_from_dict({"action_mask_key": "mask"}).action_mask_key == "mask"  # masking is volley's
    with pytest.raises(ConfigError, match=r"^RLlib's max_requests_in_flight_per_env_runner=4 is not supported"):
        PPOConfig().env_runners(max_requests_in_flight_per_env_runner=4)
    assert PPOConfig().env_runners(max_requests_in_flight_per_env_runner=1).to_dict() == PPOConfig().to_dict()
    with pytest.raises(ConfigError, match=r"^RLlib's _learner_class='cls' is not supported by volley"):
        PPOConfig().update_from_dict({"_learner_class": "cls"})
    assert PPOConfig().update_from_dict({"_train_batch_size_per_learner": 1000}).train_batch_size == 1000
    assert PPOConfig().update_from_dict({"_is_atari": False}).atari_preprocessing == "none"
    assert PPOConfig.overrides(explore=True, lr=1e-4) == {"explore": True, "lr": 1e-4}  # RLlib's classmethod
    with pytest.raises(ConfigError, match=r"unknown config key 'lrr' .*did you mean 'lr'"):
        PPOConfig.overrides(lrr=1e-4)
    evaluation = PPOConfig().evaluation(evaluation_config=PPOConfig.overrides(explore=True))
    assert evaluation.evaluation_settings().explore is True


def test_a_random_seed_is_recorded_in_results_and_checkpoints(tmp_path):
    config = PPOConfig().environment("CartPole-v1").resources(engine="local").debugging(seed=None).training(
        train_batch_size=128, minibatch_size=64, num_epochs=1)
    algo = config.build()
    try:
        result = algo.train()
        weights = [p.detach().clone() for p in algo.policy.parameters()]
        assert result["seed"] == algo.config.seed == config.seed
        path = algo.save(tmp_path / "ckpt")
        twin = Algorithm.from_checkpoint(path)
        try:
            assert twin.config.seed == config.seed
        finally:
            twin.stop()
    finally:
        algo.stop()
    again = PPOConfig.from_dict(config.to_dict()).build()  # the same run
    try:
        again.train()
        assert all(torch.equal(a, b) for a, b in zip(again.policy.parameters(), weights, strict=True))
    finally:
        again.stop()


# -- schedules -----------------------------------------------------------------------------------


def rllib_piecewise(points: list[list[float]], t: int) -> float:
    """RLlib's PiecewiseSchedule(points, outside_value=points[-1][-1]).value(t), written out."""
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t0 <= t < t1:
            return v0 + (t - t0) / (t1 - t0) * (v1 - v0)
    return points[-1][1]


def test_value_at_is_rllibs_piecewise_schedule():
    points = [[0, 1e-3], [1000, 1e-4], [3000, 0.0]]
    for t in (0, 1, 500, 999, 1000, 2000, 3000, 10**7):
        assert value_at(points, t) == pytest.approx(rllib_piecewise(points, t), rel=1e-12, abs=0)
    assert value_at([[100, 2.0], [200, 4.0]], 0) == 4.0  # before the first point: RLlib's outside value
    assert value_at(0.5, 10) == 0.5
    with pytest.raises(ConfigError, match=r"'lr' must be a number or \[\[timestep, value\], ...\] with "
                                          r"timesteps >= 0 in increasing order"):
        PPOConfig().training(lr=[[1000, 1e-3], [0, 1e-4]]).validate()


@pytest.mark.parametrize("spelling", ["new", "old"])
def test_the_learning_rate_after_each_iteration_is_rllibs_interpolation(spelling):
    points = [[0, 1e-3], [1000, 1e-4]]
    entropy = [[0, 0.01], [600, 0.0]]
    keys = ({"lr": points, "entropy_coeff": entropy} if spelling == "new" else
            {"lr_schedule": points, "entropy_coeff_schedule": entropy})
    algo = (PPOConfig().environment("CartPole-v1").resources(engine="local")
            .training(train_batch_size=256, minibatch_size=128, num_epochs=1, **keys).build())
    used: list[tuple[float, float]] = []
    update = algo.update

    def recording(batch):  # the lr and entropy weight each update ran with
        used.append((algo.optimizer.param_groups[0]["lr"], algo.entropy_coeff))
        return update(batch)

    algo.update = recording  # type: ignore[method-assign]
    try:
        before = 0
        for _ in range(6):  # 1536 steps: across the last point
            result = algo.train()
            steps = result["timesteps_total"]
            assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(rllib_piecewise(points, steps), rel=1e-9)
            assert result["lr"] == result["learners"]["default_policy"]["default_optimizer_learning_rate"]
            assert result["lr"] == pytest.approx(rllib_piecewise(points, steps), rel=1e-9)
            assert result["entropy_coeff"] == pytest.approx(rllib_piecewise(entropy, steps), rel=1e-9, abs=1e-15)
            # the update itself ran with what the previous one left, as RLlib's learner does
            assert used[-1] == pytest.approx((rllib_piecewise(points, before), rllib_piecewise(entropy, before)))
            before = steps
        assert steps > 1000 and result["lr"] == 1e-4
    finally:
        algo.stop()


def test_pg_and_dqn_follow_the_schedule_too():
    points = [[0, 1e-2], [500, 1e-3]]
    for config in (PGConfig().training(lr=points, batch_episodes=2),
                   DQNConfig().training(lr=points, train_batch_size=200, learning_starts=100)):
        algo = config.environment("CartPole-v1").resources(engine="local").build()
        try:
            for _ in range(4):
                result = algo.train()
                expected = rllib_piecewise(points, result["timesteps_total"])
                assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9)
        finally:
            algo.stop()


# -- use_kl_loss, create_env_on_local_env_runner, gym_env_vectorize_mode ----------------------------


def weights_after(config: PPOConfig, iterations: int) -> tuple[torch.Tensor, float]:
    algo = config.environment("CartPole-v1").resources(engine="local").training(
        train_batch_size=256, minibatch_size=128, num_epochs=2).build()
    try:
        for _ in range(iterations):
            algo.train()
        return torch.nn.utils.parameters_to_vector(algo.policy.parameters()).detach(), algo.kl_coeff
    finally:
        algo.stop()


def test_use_kl_loss_turns_kl_coeffs_penalty_off_as_in_rllib():
    off, coeff_off = weights_after(PPOConfig().training(kl_coeff=0.2, kl_target=1e-9, use_kl_loss=False), 2)
    none, _ = weights_after(PPOConfig().training(kl_coeff=0.0), 2)
    on, coeff_on = weights_after(PPOConfig().training(kl_coeff=0.2, kl_target=1e-9), 2)
    assert torch.equal(off, none)  # no penalty in the loss: the run of kl_coeff=0
    assert coeff_off == 0.2  # and no adaptation
    assert coeff_on == pytest.approx(0.2 * 1.5 * 1.5) and not torch.equal(on, none)  # KL > 2 x target twice


def test_create_env_on_local_env_runner_is_create_env_on_driver():
    config = PPOConfig().env_runners(create_env_on_local_env_runner=True, create_local_env_runner=True)
    assert config.create_env_on_driver is True


def vector_of(config: AlgorithmConfig, env: str = "CartPole-v1") -> gym.vector.VectorEnv:
    algo = config.environment(env).resources(engine="local").env_runners(num_envs_per_env_runner=3).build()
    try:
        return algo.workers.workers[0].env
    finally:
        algo.stop()


def test_gym_env_vectorize_mode_chooses_volleys_vector():
    assert isinstance(vector_of(PPOConfig().env_runners(gym_env_vectorize_mode="sync")), GuardedVectorEnv)
    assert type(vector_of(PPOConfig().env_runners(gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT))
                ).__name__ == "CartPoleVectorEnv"
    assert type(vector_of(PPOConfig())).__name__ == "CartPoleVectorEnv"  # volley's "auto"
    with pytest.raises(ConfigError, match=r"^RLlib's gym_env_vectorize_mode='async' is not supported by volley"):
        PPOConfig().env_runners(gym_env_vectorize_mode="async")
    register_env("volley-test-vectorless", lambda cfg: gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match=r"vectorize_mode='vector_entry_point' but environment "
                                          r"'volley-test-vectorless' is made by a creator function"):
        vector_of(PPOConfig().env_runners(gym_env_vectorize_mode="vector_entry_point"), "volley-test-vectorless")
    algo = (PPOConfig().env_runners(gym_env_vectorize_mode="sync", num_envs_per_env_runner=2)
            .environment("CartPole-v1").resources(engine="local").training(train_batch_size=512).build())
    try:  # trains on its copies, whole episodes ended and counted
        result = algo.train()
        assert result["timesteps_total"] > 400 and math.isfinite(result["episode_len_mean"])
    finally:
        algo.stop()


def test_no_key_of_the_table_is_named_like_an_unrelated_volley_key():
    """A table entry wins over a volley key of its name, so none may shadow one unless it is that key."""
    for cls in (PPOConfig, DQNConfig, PGConfig):
        for name in [*cls.field_specs(), *cls.ALIASES]:
            entry = rllib_key(name, cls)
            assert entry is None or re.fullmatch(r"same|translated", entry.kind) and name in entry.sets \
                or entry.kind == "same", (cls.__name__, name, entry.kind)
