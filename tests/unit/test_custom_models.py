"""Custom models through RLlib's protocol, called as RLlib's docs spell it (only the imports
differ): ModelCatalog.register_custom_model, model={"custom_model": ...}, TorchModelV2 with
forward(input_dict, state, seq_lens) and value_function(); and the catalog's one interface."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from custom_models import TorchCustomModel, load_example
from torch import nn

from volley import (
    Algorithm,
    ConfigError,
    DQNConfig,
    FullyConnectedNetwork,
    ModelCatalog,
    PGConfig,
    PPOConfig,
    TorchModelV2,
    TRPOConfig,
)
from volley.catalog import build_policy, model_config_dict
from volley.config import ModelConfig
from volley.modelv2 import restore_original_dimensions
from volley.observations import ObsPreprocessor
from volley.rollout.worker import RolloutWorker


class KeywordModel(TorchModelV2, nn.Module):
    """Takes custom_model_config's keys as keyword arguments; records what it was built with."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, width=4, seen=None):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.built_with = (obs_space, action_space, num_outputs, model_config, name, width)
        self.body = nn.Linear(int(np.prod(obs_space.shape)), width)
        self.logits = nn.Linear(width, num_outputs)
        self.value = nn.Linear(width, 1)

    def forward(self, input_dict, state, seq_lens):
        self._features = torch.tanh(self.body(input_dict["obs_flat"]))
        return self.logits(self._features), state

    def value_function(self):
        return self.value(self._features).squeeze(1)


def test_a_registered_model_is_built_as_rllib_builds_it():
    ModelCatalog.register_custom_model("keyword_model", KeywordModel)
    config = PPOConfig().training(model={"custom_model": "keyword_model", "custom_model_config": {"width": 7},
                                         "fcnet_hiddens": [16], "conv_filters": [[16, [4, 4], 2]]})
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    for action_space, num_outputs in ((gym.spaces.Discrete(5), 5), (gym.spaces.Box(-1, 1, (2,), np.float32), 4)):
        _, policy = build_policy(obs_space, action_space, config.model)
        model = policy.model
        assert isinstance(model, KeywordModel)
        seen_obs, seen_actions, seen_outputs, model_config, name, width = model.built_with
        assert (seen_obs, seen_actions, seen_outputs, name, width) == (obs_space, action_space, num_outputs,
                                                                       "default_model", 7)
        # RLlib's defaults, volley's keys, and an RLlib key set beside the custom model, passed through
        assert model_config["fcnet_hiddens"] == [16] and model_config["custom_model_config"] == {"width": 7}
        assert model_config["conv_filters"] == [[16, [4, 4], 2]] and model_config["free_log_std"] is False
        assert model_config["custom_model"] == "keyword_model"
    with pytest.raises(ConfigError, match=r"RLlib's model\['conv_filters'\]=.* is not supported"):
        PPOConfig().training(model={"conv_filters": [[16, [4, 4], 2]]})  # volley's own network reads none


def test_a_class_given_directly_is_kept_by_its_import_path():
    config = PPOConfig().training(model={"custom_model": TorchCustomModel})
    assert config.model.custom_model == "custom_models:TorchCustomModel"
    assert config.to_dict()["model"]["custom_model"] == "custom_models:TorchCustomModel"  # JSON, never pickled
    _, policy = build_policy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), config.model)
    assert isinstance(policy.model, TorchCustomModel)


def test_the_custom_model_learns_on_the_batch_and_its_gaussian_is_rllibs():
    """PPO updates the custom model's weights; on a Box action space its outputs are RLlib's
    DiagGaussian inputs (means, then log-stds) and the log-probabilities follow from them."""
    config = (PPOConfig().environment("Pendulum-v1").resources(engine="local")
              .rollouts(num_envs_per_worker=2).training(train_batch_size=256, minibatch_size=64,
                                                        model={"custom_model": TorchCustomModel}))
    with config.build() as algo:
        before = {k: v.clone() for k, v in algo.policy.state_dict().items()}
        batch = algo.sample()
        algo.update(batch)
        assert all(not torch.equal(before[k], v) for k, v in algo.policy.state_dict().items())
        obs = torch.as_tensor(batch["obs"][:5])
        with torch.no_grad():
            out, _, _ = algo.policy.outputs(obs)
            mean, log_std = out[:, :1], out[:, 1:]
            want = torch.distributions.Normal(mean, log_std.exp()).log_prob(torch.as_tensor(batch["actions"][:5]))
            got = algo.policy.distribution_of(out).log_prob(torch.as_tensor(batch["actions"][:5]))
        torch.testing.assert_close(got, want.sum(-1))
        action = algo.compute_single_action(np.zeros(3, np.float32))
        assert action.shape == (1,)


def test_dict_observations_reach_the_model_in_their_structure():
    example = load_example()
    env = example.DictCartPole()
    pre = ObsPreprocessor(env.observation_space)
    rng = np.random.default_rng(0)
    raw = {"cart": rng.normal(size=(3, 2)).astype(np.float32), "pole": rng.normal(size=(3, 2)).astype(np.float32),
           "last_action": np.array([1, 0, 1])}
    flat = torch.as_tensor(pre(raw, 3))
    ModelCatalog.register_custom_model("dict_obs_model", example.DictObsModel)
    _, policy = build_policy(env.observation_space, env.action_space,
                             PPOConfig().training(model={"custom_model": "dict_obs_model"}).model)
    seen = {}
    forward = policy.model.forward

    def spy(input_dict, state, seq_lens):
        seen.update(input_dict)
        return forward(input_dict, state, seq_lens)
    policy.model.forward = spy
    policy.outputs(flat)
    assert set(seen["obs"]) == {"cart", "last_action", "pole"}
    torch.testing.assert_close(seen["obs"]["cart"], torch.as_tensor(raw["cart"]))
    torch.testing.assert_close(seen["obs"]["pole"], torch.as_tensor(raw["pole"]))
    torch.testing.assert_close(seen["obs"]["last_action"], torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
    assert seen["obs_flat"] is flat and seen["is_training"] is True
    assert policy.model.obs_space.original_space == env.observation_space  # what RLlib's models read


def test_nested_observations_restore_exactly():
    space = gym.spaces.Dict({"a": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2, 2)))),
                             "b": gym.spaces.Box(0, 5, (1,))})
    space.seed(1)
    samples = [space.sample() for _ in range(4)]
    batch = {"a": (np.array([s["a"][0] for s in samples]), np.stack([s["a"][1] for s in samples])),
             "b": np.stack([s["b"] for s in samples])}
    flat = ObsPreprocessor(space)(batch, 4)
    restored = restore_original_dimensions(torch.as_tensor(flat), space)
    np.testing.assert_array_equal(restored["a"][0].numpy(), np.eye(3)[batch["a"][0]])
    np.testing.assert_array_equal(restored["a"][1].numpy(), batch["a"][1])  # [4, 2, 2], its own shape
    np.testing.assert_array_equal(restored["b"].numpy(), batch["b"])
    numpy_restored = restore_original_dimensions(flat, space, "numpy")
    np.testing.assert_array_equal(numpy_restored["a"][1], batch["a"][1])
    with pytest.raises(ConfigError, match=r"observations of shape \(4, 7\) do not fit Dict.*expected \[..., 8\]"):
        restore_original_dimensions(torch.zeros(4, 7), space)


class WrongOutputs(KeywordModel):
    def forward(self, input_dict, state, seq_lens):
        out, state = super().forward(input_dict, state, seq_lens)
        return out[:, :1], state


class WrongValues(KeywordModel):
    def value_function(self):
        return super().value_function()[:, None]


class NotAModelV2(nn.Module):
    def value_function(self):
        return None


class FailsToBuild(KeywordModel):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("no GPU here")


@pytest.mark.parametrize(("model", "message"), [
    (WrongOutputs, r"custom model WrongOutputs returned outputs of shape \(2, 1\): expected \(2, 2\), one logit "
                   r"per action"),
    (WrongValues, r"custom model WrongValues's value_function\(\) returned shape \(2, 1\): expected \(2,\)"),
    (NotAModelV2, r"it must be a torch.nn.Module with ModelV2's methods forward, value_function, get_initial_state"),
    (FailsToBuild, r"custom model FailsToBuild failed to build: RuntimeError: no GPU here"),
])
def test_a_model_that_does_not_fit_is_named_in_one_line(model, message):
    config = PPOConfig().environment("CartPole-v1").resources(engine="local").training(
        model={"custom_model": model})
    with pytest.raises(ConfigError, match=message) as error:
        config.build()  # found before any data: a probe batch of two observations
    assert "\n" not in str(error.value)


def test_a_gaussian_models_outputs_are_sized_for_means_and_log_stds():
    config = PPOConfig().environment("Pendulum-v1").resources(engine="local").training(
        model={"custom_model": WrongOutputs})
    with pytest.raises(ConfigError, match=r"expected \(2, 2\), a Gaussian's 1 means, then its 1 log-stds"):
        config.build()


def test_an_unknown_name_suggests_the_registered_ones():
    ModelCatalog.register_custom_model("keyword_model", KeywordModel)
    config = PPOConfig().training(model={"custom_model": "keyword_modle"})
    with pytest.raises(ConfigError, match=r"unknown custom model 'keyword_modle'; did you mean 'keyword_model'\? "
                                          r"\(registered: .*'keyword_model'.*\); ModelCatalog.register_custom_model"):
        config.build()
    with pytest.raises(ConfigError, match=r"unknown model key 'custom_model_confg'; did you mean one of "
                                          r"'custom_model_config', .*; a custom model's own options go in"):
        PPOConfig().training(model={"custom_model": "keyword_model", "custom_model_confg": {}})


def test_a_checkpoint_names_the_class_and_a_new_process_without_it_says_how_to_register(tmp_path):
    ModelCatalog.register_custom_model("keyword_model", KeywordModel)
    config = PPOConfig().environment("CartPole-v1").resources(engine="local").training(
        train_batch_size=256, minibatch_size=64, model={"custom_model": "keyword_model", "custom_model_config": {"width": 5}})
    with config.build() as algo:
        algo.train()
        path = algo.save(tmp_path / "ckpt")
        weights = algo.get_policy().get_weights()
    restored = Algorithm.from_checkpoint(path)  # this process has it registered
    try:
        assert restored.policy.model.built_with[-1] == 5 and restored.iteration == 1
        for name, value in restored.get_policy().get_weights().items():
            np.testing.assert_array_equal(value, weights[name])
    finally:
        restored.stop()
    fresh = subprocess.run([sys.executable, "-c", f"from volley import Algorithm; Algorithm.from_checkpoint({str(path)!r})"],
                           capture_output=True, text=True, timeout=300)
    assert fresh.returncode != 0
    assert ("ConfigError: unknown custom model 'keyword_model' (none is registered in this process); "
            "ModelCatalog.register_custom_model('keyword_model', ...)") in fresh.stderr


def test_trpo_steps_the_policys_parameters_and_fits_the_value_functions_apart():
    """A custom model's parameters split by what depends on them: the natural-gradient step moves
    the policy's (the shared body too), the value fit only the value function's own."""
    shared = {"custom_model": TorchCustomModel, "vf_share_layers": True, "fcnet_hiddens": [8]}
    _, policy = build_policy(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2),
                             PPOConfig().training(model=shared).model)
    names = {id(p): n for n, p in policy.named_parameters()}
    assert sorted(names[id(p)] for p in policy.policy_parameters()) == [
        "model.torch_sub_model._hidden_layers.0.bias", "model.torch_sub_model._hidden_layers.0.weight",
        "model.torch_sub_model._logits.bias", "model.torch_sub_model._logits.weight"]
    assert sorted(names[id(p)] for p in policy.value_parameters()) == [
        "model.torch_sub_model._value_branch.bias", "model.torch_sub_model._value_branch.weight"]
    config = TRPOConfig().environment("CartPole-v1").resources(engine="local").training(
        train_batch_size=400, model={"custom_model": TorchCustomModel})
    with config.build() as algo:
        before = algo.policy.get_flat_weights()
        result = algo.train()
        assert result["kl"] > 0 and np.abs(algo.policy.get_flat_weights() - before).max() > 0
        pg = PGConfig().environment("CartPole-v1").resources(engine="local").training(
            batch_episodes=2, model={"custom_model": TorchCustomModel})
    with pg.build() as algo:  # PG's RMSProp on the policy's parameters alone
        value_before = [p.clone() for p in algo.policy.value_parameters()]
        algo.train()
        assert all(torch.equal(a, b) for a, b in zip(value_before, algo.policy.value_parameters(), strict=True))


class ValueFromLogits(KeywordModel):
    """Its value function is a function of the logits: it has no parameters of its own."""

    def value_function(self):
        return self.logits(self._features).sum(1)


def test_trpo_refuses_a_model_whose_value_function_owns_no_parameters():
    config = TRPOConfig().environment("CartPole-v1").resources(engine="local").training(
        model={"custom_model": ValueFromLogits})
    with pytest.raises(ConfigError, match=r"has no value-function parameters of its own: TRPO"):
        config.build()


def test_dqn_puts_its_q_head_on_the_custom_models_features():
    config = (DQNConfig().environment("CartPole-v1").resources(engine="local")
              .training(model={"custom_model": TorchCustomModel, "fcnet_hiddens": [32]}, hiddens=[16],
                        dueling=True, learning_starts=64, train_batch_size=64, minibatch_size=32))
    with config.build() as algo:
        features = algo.policy.body
        assert features.model.num_outputs == 32 and features.model.name == "q_func"  # RLlib's DQN rule
        assert algo.policy.q_values(torch.zeros(3, 4)).shape == (3, 2)
        before = algo.policy.get_flat_weights()
        for _ in range(3):
            result = algo.train()
        assert result["num_updates"] > 0 and np.abs(algo.policy.get_flat_weights() - before).max() > 0


class StepCounter(TorchModelV2, nn.Module):
    """A recurrent model whose state counts the steps since its episode began."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.logits = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def forward(self, input_dict, state, seq_lens):
        assert seq_lens is not None and (seq_lens == 1).all()  # acting: sequences of one step
        self._count = state[0][:, 0] + 1
        return self.logits(input_dict["obs_flat"]), [state[0] + 1]

    def value_function(self):
        return self._count  # the steps seen, as the value: visible in the batch


def test_a_worker_carries_each_envs_recurrent_state_and_resets_it_where_an_episode_starts():
    """The state seam the sequences build on: a worker feeds each environment's state to the next
    forward pass and starts it afresh with each episode."""
    config = (PPOConfig().environment("CartPole-v1").resources(engine="local")
              .rollouts(num_envs_per_worker=3, rollout_fragment_length=60)
              .training(model={"custom_model": StepCounter}))

    def env_index(columns, _):  # [T, N] columns; each row's environment, to split the flat batch
        return {**columns, "env": np.broadcast_to(np.arange(columns["values"].shape[1]), columns["values"].shape)}
    worker = RolloutWorker(config, 0, env_index, plan=config.plan())
    _, learner = build_policy(worker.observation_space, worker.action_space, config.model)
    batch = worker.sample(learner.get_flat_weights(), None).batch
    # value = steps seen in this episode, so 1, 2, 3, ... restarting at every episode
    ends = batch["terminated"] | batch["truncated"]
    for env in range(3):  # each env's steps in time order, the reset steps dropped
        env_values, env_ends = batch["values"][batch["env"] == env], ends[batch["env"] == env]
        expected, count = [], 0
        for end in env_ends:
            count += 1
            expected.append(count)
            count = 0 if end else count
        np.testing.assert_array_equal(env_values, expected)
    assert ends.any()  # CartPole's episodes ended within the fragment


def test_acting_in_torch_is_one_forward_pass_for_all_environments():
    config = PPOConfig().environment("CartPole-v1").training(model={"custom_model": KeywordModel})
    worker = RolloutWorker(config, 0, lambda columns, _: columns, num_envs=5, plan=config.plan(num_workers=1))
    assert worker.actor is None  # no numpy twin: it acts in torch
    calls = []
    model = worker.policy.model
    forward = model.forward
    model.forward = lambda input_dict, *a: (calls.append(len(input_dict["obs"])), forward(input_dict, *a))[1]
    worker.sample(worker.policy.get_flat_weights(), None)
    assert calls and set(calls) == {5}  # every call: the 5 environments at once


def test_fully_connected_network_keys_as_rllib_reads_them():
    ModelCatalog.register_custom_model("keyword_model", KeywordModel)
    obs, actions = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32)
    base = model_config_dict(ModelConfig(fcnet_hiddens=[8, 6]))
    free = FullyConnectedNetwork(obs, actions, 4, {**base, "free_log_std": True}, "m")
    out, _ = free({"obs": torch.ones(5, 3)}, [], None)
    assert out.shape == (5, 4) and torch.equal(out[:, 2:], torch.zeros(5, 2))  # the learned constant
    features = FullyConnectedNetwork(obs, actions, None, base, "m")
    assert features.num_outputs == 6 and features({"obs": torch.ones(2, 3)})[0].shape == (2, 6)
    no_final = FullyConnectedNetwork(obs, actions, 4, {**base, "no_final_linear": True, "vf_share_layers": True}, "m")
    assert no_final._logits is None and no_final({"obs": torch.ones(2, 3)})[0].shape == (2, 4)
    assert no_final.value_function().shape == (2,)
    linear = FullyConnectedNetwork(obs, actions, 4, {**base, "fcnet_activation": "linear"}, "m")
    assert not any(isinstance(m, (nn.Tanh, nn.ReLU)) for m in linear.modules())
    built = ModelCatalog.get_model_v2(obs, actions, 4, {**base, "custom_model": "keyword_model"}, name="x")
    assert isinstance(built, KeywordModel) and built.built_with[4] == "x"


class PolicyOnly(KeywordModel):
    """REINFORCE's network: a constant value function, which no parameter computes."""

    def value_function(self):
        return torch.zeros(len(self._features))


def test_a_model_without_a_value_function_trains_with_pg_and_trpo_refuses_it():
    pg = PGConfig().environment("CartPole-v1").resources(engine="local").training(
        batch_episodes=2, model={"custom_model": PolicyOnly})
    with pg.build() as algo:
        names = {id(p): n for n, p in algo.policy.named_parameters()}
        assert sorted(names[id(p)] for p in algo.policy.policy_parameters()) == [
            "model.body.bias", "model.body.weight", "model.logits.bias", "model.logits.weight"]
        assert algo.policy.value_parameters() == []
        before = algo.policy.get_flat_weights()
        algo.train()
        assert np.abs(algo.policy.get_flat_weights() - before).max() > 0
    trpo = TRPOConfig().environment("CartPole-v1").resources(engine="local").training(
        model={"custom_model": PolicyOnly})
    with pytest.raises(ConfigError, match=r"has no value-function parameters of its own: TRPO"):
        trpo.build()
