"""What RLlib 2.9's multi-agent example scripts use of the policy API (issue 46, the suite of issue 49):
configs that go through ``to_dict()`` and back, policies of RLlib's own algorithms (PPO and DQN each
training its own policy), LSTM policies replayed exactly, one policy restored from a checkpoint,
environments that declare no spaces, and RLlib's policy classes an algorithm names."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNTorchPolicy
from ray.rllib.algorithms.ppo import PPOTorchPolicy

from volley import PPO, DQNConfig, MultiAgentEnv, Policy, PolicySpec, PPOConfig, make_multi_agent
from volley.catalog import build_policy
from volley.errors import CheckpointError, ConfigError, EnvError, VolleyError
from volley.policies import PolicySetup, check_rllib_policy_class
from volley.rollout.advantages import gae_columns
from volley.rollout.multi_agent import MultiAgentRolloutWorker
from volley.rollout.sequences import Sequences

MultiAgentCartPole = make_multi_agent("CartPole-v1")
CARTPOLE = gym.make("CartPole-v1")
SPACES = (CARTPOLE.observation_space, CARTPOLE.action_space)


def by_parity(agent_id: Any, episode: Any, worker: Any = None, **kwargs: Any) -> str:
    return "ppo_policy" if agent_id % 2 == 0 else "dqn_policy"


class Randomly(Policy):
    """A hand-written policy as RLlib's RandomPolicy is written: it adjusts a view requirement."""

    def init_view_requirements(self) -> None:
        super().init_view_requirements()
        self.view_requirements["infos"].used_for_training = False

    def compute_actions(self, obs_batch: Any, state_batches: Any = None, **kwargs: Any) -> Any:
        return [self.action_space.sample() for _ in obs_batch], [], {}


def test_a_config_dict_gives_back_its_policies():
    """multi_agent_cartpole.py: ``tune.Tuner("PPO", param_space=config.to_dict())``."""
    config = PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2}).multi_agent(
        policies={"learned": PolicySpec(config={"gamma": 0.9}), "random": PolicySpec(Randomly, *SPACES)},
        policy_mapping_fn=lambda agent_id, *args, **kwargs: ["learned", "random"][agent_id % 2])
    again = PPOConfig.from_dict(config.to_dict())
    assert again.policies == config.policies and again.policies["learned"]["config"] == {"gamma": 0.9}
    assert Randomly(*SPACES).view_requirements["infos"].used_for_training is False


def two_trainers(config: PPOConfig | DQNConfig, trains: str) -> Any:
    """multi_agent_two_trainers.py's configs: RLlib's PPO and DQN policy classes, each with its config."""
    ppo = PPOConfig().training(train_batch_size=256, sgd_minibatch_size=64, num_sgd_iter=2)
    dqn = DQNConfig().training(gamma=0.95).reporting(min_sample_timesteps_per_iteration=100)
    policies = {"ppo_policy": (PPOTorchPolicy, *SPACES, ppo), "dqn_policy": (DQNTorchPolicy, *SPACES, dqn)}
    return (config.environment(MultiAgentCartPole, env_config={"num_agents": 2}).rollouts(num_rollout_workers=0)
            .debugging(seed=4)
            .multi_agent(policies=policies, policy_mapping_fn=by_parity, policies_to_train=[trains]).build())


def test_a_run_acts_with_another_algorithms_policy_and_trains_only_its_own():
    ppo = two_trainers(PPOConfig().training(train_batch_size=256, sgd_minibatch_size=64), "ppo_policy")
    dqn = two_trainers(DQNConfig().training(learning_starts=100).reporting(min_sample_timesteps_per_iteration=100),
                       "dqn_policy")
    try:
        assert type(ppo.get_policy("dqn_policy")).__name__ == "QNetwork"
        before = {run: run.get_weights(["ppo_policy", "dqn_policy"]) for run in (ppo, dqn)}
        for _ in range(2):
            results = {run: run.train() for run in (ppo, dqn)}
        for run, trained, acting in ((ppo, "ppo_policy", "dqn_policy"), (dqn, "dqn_policy", "ppo_policy")):
            after = run.get_weights([trained, acting])
            assert set(results[run]["policy_reward_mean"]) == {"ppo_policy", "dqn_policy"}
            assert list(results[run]["info"]["learner"]) == [trained]
            assert any(not np.array_equal(before[run][trained][k], v) for k, v in after[trained].items())
            for k, v in after[acting].items():
                np.testing.assert_array_equal(before[run][acting][k], v)
        dqn.set_weights(ppo.get_weights(["ppo_policy"]))  # the script's exchange of trained weights
        for k, v in ppo.get_weights(["ppo_policy"])["ppo_policy"].items():
            np.testing.assert_array_equal(dqn.get_weights(["ppo_policy"])["ppo_policy"][k], v)
    finally:
        ppo.stop()
        dqn.stop()
    with pytest.raises(ConfigError, match="policies_to_train names 'dqn_policy', a policy of dqn: a ppo run acts"):
        two_trainers(PPOConfig(), "dqn_policy")


def test_an_lstm_policys_sequences_replay_exactly_what_the_worker_computed():
    """rock_paper_scissors_multiagent.py's learned policy with use_lstm, here on three cartpoles whose
    agents end at different steps: a sequence that crossed from one agent to the next would replay
    the second from the first's state."""
    lstm = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 5}
    config = (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 3})
              .rollouts(num_envs_per_worker=2, rollout_fragment_length=30).debugging(seed=2)
              .multi_agent(policies={"learned": PolicySpec(config={"model": lstm}), "random": PolicySpec(Randomly)},
                           policy_mapping_fn=lambda agent_id, *args, **kwargs: "random" if agent_id == 2 else "learned"))
    setup = PolicySetup.of(config)
    worker = MultiAgentRolloutWorker(config, 0, gae_columns, plan=config.plan(num_workers=1), setup=setup)
    torch.manual_seed(3)
    _, network = build_policy(*SPACES, setup.configs["learned"].model)
    weights = {"learned": network.get_flat_weights()}
    for _ in range(3):  # the later fragments go on with running agents
        batch = worker.sample(weights, {}).policies["learned"].batch
        assert batch["seq_lens"].max() <= 5 and batch["seq_lens"].sum() == len(batch)
        view = Sequences.of(batch).map(torch.as_tensor)
        with torch.no_grad():
            dist, values = network(**view.inputs)
        np.testing.assert_allclose(view.real(dist.log_prob(view["actions"])).numpy(), batch["logp"], atol=1e-6)
        np.testing.assert_allclose(view.real(values).numpy(), batch["values"], atol=1e-5, rtol=1e-6)


def test_one_policy_of_a_checkpoint_restores_into_another_run(tmp_path):
    """restore_1_of_n_agents_from_checkpoint.py: ``Policy.from_checkpoint(<checkpoint>/policies/policy_0)``."""
    config = (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
              .rollouts(num_rollout_workers=0).training(train_batch_size=128, sgd_minibatch_size=64, num_sgd_iter=1)
              .multi_agent(policies={"policy_0": (None, *SPACES, None), "policy_1": (None, *SPACES, None)},
                           policy_mapping_fn=lambda agent_id, *args, **kwargs: f"policy_{agent_id}"))
    algo = config.build()
    algo.train()
    saved = algo.save(tmp_path / "checkpoint")
    trained = algo.get_policy("policy_0").get_weights()
    algo.stop()

    restored = Policy.from_checkpoint(tmp_path / "checkpoint" / "policies" / "policy_0")
    assert restored.policy_id == "policy_0" and restored.config["train_batch_size"] == 128  # type: ignore[union-attr]
    both = Policy.from_checkpoint(saved)
    assert sorted(both) == ["policy_0", "policy_1"]  # type: ignore[arg-type]
    fresh = config.copy(copy_frozen=False).debugging(seed=9).build()
    try:
        fresh.set_weights({"policy_0": restored.get_weights()})  # type: ignore[union-attr]
        for name, value in fresh.get_policy("policy_0").get_weights().items():
            np.testing.assert_array_equal(value, trained[name])
    finally:
        fresh.stop()
    with pytest.raises(VolleyError, match="restored from a checkpoint as its weights"):
        restored.compute_single_action(np.zeros(4, np.float32))  # type: ignore[union-attr]
    with pytest.raises(CheckpointError, match=r"holds no policy 'policy_7' \(it holds \['policy_0', 'policy_1'\]\)"):
        Policy.from_checkpoint(saved, ["policy_7"])


class Unnamed(MultiAgentEnv):
    """An environment that declares no spaces (RLlib's HierarchicalWindyMazeEnv): a few steps of a
    "leader" agent, then of a "worker" agent it starts."""

    def __init__(self, config: dict) -> None:
        super().__init__()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        return {"leader": np.zeros(2, np.float32)}, {}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        agent = "leader" if self.t < 3 else "worker"
        done = self.t >= 6
        return {agent: np.full(2, self.t, np.float32)}, {agent: 1.0}, {"__all__": done}, {"__all__": False}, {}


def test_an_environment_without_spaces_takes_those_of_its_policies_specs():
    box = gym.spaces.Box(0, 10, (2,))
    policies = {"leader": (None, box, gym.spaces.Discrete(4), None), "worker": (None, box, gym.spaces.Discrete(2), None)}
    config = (PPOConfig().environment(Unnamed)
              .rollouts(num_rollout_workers=0, num_envs_per_worker=1, rollout_fragment_length=60)
              .training(train_batch_size=60, sgd_minibatch_size=30, num_sgd_iter=1)
              .multi_agent(policies=policies, policy_mapping_fn=lambda agent_id, *args, **kwargs: agent_id))
    algo = config.build()
    try:
        result = algo.train()
        assert result["policy_reward_mean"] == {"leader": 2.0, "worker": 4.0}
    finally:
        algo.stop()
    with pytest.raises(EnvError, match="policy 'leader': no agent of Unnamed is mapped to it and its PolicySpec gives no"):
        config.copy(copy_frozen=False).multi_agent(policies={"leader": PolicySpec(), "worker": PolicySpec()}).build()


class EntropyLike(PPOTorchPolicy):
    def loss_fn(self, model: Any, dist_class: Any, train_batch: Any) -> Any:  # a name RLlib's class never calls
        raise AssertionError


class OwnLoss(PPOTorchPolicy):
    def loss(self, model: Any, dist_class: Any, train_batch: Any) -> Any:
        raise AssertionError


def test_rllibs_policy_class_of_an_algorithm_is_its_network_and_a_changed_one_is_refused():
    """rock_paper_scissors_multiagent.py's EntropyLossPPO, and centralized_critic.py's own loss."""
    check_rllib_policy_class(PPOTorchPolicy, "ppo", "it")
    check_rllib_policy_class(EntropyLike, "ppo", "it")
    with pytest.raises(ConfigError, match="it is OwnLoss, which overrides loss of RLlib's PPOTorchPolicy: volley"):
        check_rllib_policy_class(OwnLoss, "ppo", "it")
    with pytest.raises(ConfigError, match="it is DQNTorchPolicy, not RLlib's policy of ppo"):
        check_rllib_policy_class(DQNTorchPolicy, "ppo", "it")

    class OwnLossPPO(PPO):
        @classmethod
        def get_default_policy_class(cls, config: Any) -> type:
            return OwnLoss

    class EntropyPPO(PPO):
        @classmethod
        def get_default_policy_class(cls, config: Any) -> type:
            return EntropyLike

    algo = PPOConfig(algo_class=EntropyPPO).rollouts(num_rollout_workers=0).build()
    assert type(algo) is EntropyPPO
    algo.stop()
    with pytest.raises(ConfigError, match=r"OwnLossPPO.get_default_policy_class\(\) is .*OwnLoss, which overrides loss"):
        PPOConfig(algo_class=OwnLossPPO).build()
